//! JIT: one ORC LLJIT per session (llvm-sys); object files per cell; absolute symbols for
//! slots, global storage and the runtime; process symbols (printf, malloc) by search.
//!
//! Cells are compiled to object files by `session` (so each cell can have its own optimisation
//! level) and added here with a resource tracker of their own: a cell that fails to link is
//! removed again, leaving the JIT as it was.

use std::ffi::{CStr, CString};
use std::ptr;

use llvm_sys::error::{LLVMDisposeErrorMessage, LLVMErrorRef, LLVMGetErrorMessage};
use llvm_sys::orc2::lljit::{
    LLVMOrcCreateLLJIT, LLVMOrcCreateLLJITBuilder, LLVMOrcDisposeLLJIT, LLVMOrcLLJITAddObjectFileWithRT,
    LLVMOrcLLJITGetGlobalPrefix, LLVMOrcLLJITGetMainJITDylib, LLVMOrcLLJITLookup, LLVMOrcLLJITMangleAndIntern,
    LLVMOrcLLJITRef,
};
use llvm_sys::orc2::{
    LLVMJITEvaluatedSymbol, LLVMJITSymbolFlags, LLVMJITSymbolGenericFlags, LLVMOrcAbsoluteSymbols,
    LLVMOrcCSymbolMapPair, LLVMOrcCreateDynamicLibrarySearchGeneratorForProcess, LLVMOrcJITDylibAddGenerator,
    LLVMOrcJITDylibCreateResourceTracker, LLVMOrcJITDylibDefine, LLVMOrcJITDylibRef, LLVMOrcReleaseResourceTracker,
    LLVMOrcResourceTrackerRef, LLVMOrcResourceTrackerRemove,
};

/// A failure of the JIT machinery.
#[derive(Debug, thiserror::Error)]
pub(crate) enum JitError {
    #[error("could not create the ORC JIT: {0}")]
    Create(String),
    #[error("ORC could not link the cell: {0}")]
    Link(String),
    #[error("ORC could not define a symbol: {0}")]
    Define(String),
}

/// Consumes an LLVM error, returning its message.
fn take_error(error: LLVMErrorRef) -> Option<String> {
    if error.is_null() {
        return None;
    }
    // SAFETY: `error` is a live LLVMErrorRef; LLVMGetErrorMessage consumes it and returns a
    // C string we own until LLVMDisposeErrorMessage.
    unsafe {
        let message = LLVMGetErrorMessage(error);
        let text = CStr::from_ptr(message).to_string_lossy().into_owned();
        LLVMDisposeErrorMessage(message);
        Some(text)
    }
}

/// The session's JIT.
pub(crate) struct Jit {
    lljit: LLVMOrcLLJITRef,
    dylib: LLVMOrcJITDylibRef,
}

/// The code of one linked cell; removing it frees the code.
pub(crate) struct CellCode {
    tracker: LLVMOrcResourceTrackerRef,
}

impl Jit {
    pub fn new() -> Result<Jit, JitError> {
        let mut lljit = ptr::null_mut();
        // SAFETY: plain ORC C API calls; the builder is consumed by LLVMOrcCreateLLJIT, and
        // the JIT is disposed in Drop.
        unsafe {
            let builder = LLVMOrcCreateLLJITBuilder();
            if let Some(message) = take_error(LLVMOrcCreateLLJIT(&mut lljit, builder)) {
                return Err(JitError::Create(message));
            }
            let dylib = LLVMOrcLLJITGetMainJITDylib(lljit);
            let mut generator = ptr::null_mut();
            let prefix = LLVMOrcLLJITGetGlobalPrefix(lljit);
            if let Some(message) = take_error(LLVMOrcCreateDynamicLibrarySearchGeneratorForProcess(
                &mut generator,
                prefix,
                None,
                ptr::null_mut(),
            )) {
                LLVMOrcDisposeLLJIT(lljit);
                return Err(JitError::Create(message));
            }
            LLVMOrcJITDylibAddGenerator(dylib, generator);
            Ok(Jit { lljit, dylib })
        }
    }

    /// Defines symbols at fixed addresses (slots, global storage, runtime functions).
    pub fn define_absolute(&mut self, symbols: &[(String, usize)]) -> Result<(), JitError> {
        if symbols.is_empty() {
            return Ok(());
        }
        let mut pairs = Vec::with_capacity(symbols.len());
        for (name, address) in symbols {
            let name = CString::new(name.as_str()).map_err(|error| JitError::Define(error.to_string()))?;
            // SAFETY: the JIT is live; MangleAndIntern returns an owned pool entry whose
            // ownership passes to LLVMOrcAbsoluteSymbols below.
            let interned = unsafe { LLVMOrcLLJITMangleAndIntern(self.lljit, name.as_ptr()) };
            pairs.push(LLVMOrcCSymbolMapPair {
                Name: interned,
                Sym: LLVMJITEvaluatedSymbol {
                    Address: *address as u64,
                    Flags: LLVMJITSymbolFlags {
                        GenericFlags: LLVMJITSymbolGenericFlags::LLVMJITSymbolGenericFlagsExported as u8,
                        TargetFlags: 0,
                    },
                },
            });
        }
        // SAFETY: `pairs` is a valid array for the call; the materialization unit is consumed
        // by LLVMOrcJITDylibDefine whatever it returns.
        unsafe {
            let unit = LLVMOrcAbsoluteSymbols(pairs.as_mut_ptr(), pairs.len());
            take_error(LLVMOrcJITDylibDefine(self.dylib, unit)).map_or(Ok(()), |message| Err(JitError::Define(message)))
        }
    }

    /// Adds a cell's object file and resolves the given symbols; on failure nothing stays.
    pub fn link(&mut self, object: &[u8], name: &str, lookups: &[String]) -> Result<(CellCode, Vec<usize>), JitError> {
        let buffer_name = CString::new(name).unwrap_or_default();
        // SAFETY: the buffer copies `object`; ownership passes to ORC with the add call; the
        // tracker is ours to release (CellCode::drop) or remove on failure.
        unsafe {
            let buffer = llvm_sys::core::LLVMCreateMemoryBufferWithMemoryRangeCopy(
                object.as_ptr().cast(),
                object.len(),
                buffer_name.as_ptr(),
            );
            let tracker = LLVMOrcJITDylibCreateResourceTracker(self.dylib);
            let code = CellCode { tracker };
            if let Some(message) = take_error(LLVMOrcLLJITAddObjectFileWithRT(self.lljit, tracker, buffer)) {
                code.remove();
                return Err(JitError::Link(message));
            }
            let mut addresses = Vec::with_capacity(lookups.len());
            for symbol in lookups {
                let symbol_name = CString::new(symbol.as_str()).unwrap_or_default();
                let mut address = 0;
                if let Some(message) = take_error(LLVMOrcLLJITLookup(self.lljit, &mut address, symbol_name.as_ptr())) {
                    code.remove();
                    return Err(JitError::Link(message));
                }
                addresses.push(address as usize);
            }
            Ok((code, addresses))
        }
    }
}

impl CellCode {
    /// Removes the cell's code from the JIT (used when linking failed).
    fn remove(self) {
        // SAFETY: the tracker is live; removing it frees what it tracks. Errors here leave
        // only unreachable code behind, so they are ignored.
        unsafe {
            take_error(LLVMOrcResourceTrackerRemove(self.tracker));
        }
    }
}

impl Drop for CellCode {
    fn drop(&mut self) {
        // SAFETY: releasing our reference keeps the code alive in the JITDylib; it is freed
        // with the JIT itself.
        unsafe { LLVMOrcReleaseResourceTracker(self.tracker) }
    }
}

impl Drop for Jit {
    fn drop(&mut self) {
        // SAFETY: the JIT was created in `new` and is disposed exactly once, here.
        unsafe {
            take_error(LLVMOrcDisposeLLJIT(self.lljit));
        }
    }
}

/// Errors LLVM reports through a context while it compiles a cell: inline assembly the
/// assembler rejects, registers it cannot allocate. Without a handler LLVM prints such an
/// error and exits the process; with this one the session turns them into diagnostics.
pub(crate) struct LlvmDiagnostics {
    errors: std::sync::Mutex<Vec<String>>,
}

impl LlvmDiagnostics {
    /// Routes `context`'s diagnostics here. The returned box must outlive the context's use.
    pub fn install(context: &inkwell::context::Context) -> Box<LlvmDiagnostics> {
        let sink = Box::new(LlvmDiagnostics { errors: std::sync::Mutex::new(Vec::new()) });
        let pointer = &*sink as *const LlvmDiagnostics as *mut std::ffi::c_void;
        // SAFETY: the context is live; `pointer` stays valid while the box lives, and the
        // session keeps the box for as long as it uses the context.
        unsafe { llvm_sys::core::LLVMContextSetDiagnosticHandler(context.raw(), Some(collect_diagnostic), pointer) };
        sink
    }

    /// The errors reported since the last call.
    pub fn take_errors(&self) -> Vec<String> {
        self.errors.lock().map(|mut errors| std::mem::take(&mut *errors)).unwrap_or_default()
    }
}

extern "C" fn collect_diagnostic(info: llvm_sys::prelude::LLVMDiagnosticInfoRef, sink: *mut std::ffi::c_void) {
    // SAFETY: LLVM passes the live diagnostic and the pointer given in `install`, which points
    // to a live `LlvmDiagnostics`; the description is a C string we own until disposed.
    unsafe {
        if llvm_sys::core::LLVMGetDiagInfoSeverity(info) != llvm_sys::LLVMDiagnosticSeverity::LLVMDSError {
            return;
        }
        let description = llvm_sys::core::LLVMGetDiagInfoDescription(info);
        let text = CStr::from_ptr(description).to_string_lossy().into_owned();
        llvm_sys::core::LLVMDisposeMessage(description);
        if let Ok(mut errors) = (*(sink as *const LlvmDiagnostics)).errors.lock() {
            errors.push(text);
        }
    }
}
