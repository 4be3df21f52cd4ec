//! JIT: one ORC LLJIT per session (llvm-sys); object files per cell; absolute symbols for
//! slots, global storage and the runtime; process symbols (printf, malloc) by search.
//!
//! Cells are compiled to object files by `session` (so each cell can have its own optimisation
//! level) and added here with a resource tracker of their own: a cell that fails to link is
//! removed again, leaving the JIT as it was, and a cell whose code can no longer be reached is
//! removed too, giving its memory back.
//!
//! Objects are linked by RuntimeDyld into the session's `CodeMemory` rather than by JITLink into
//! pages of their own: JITLink's dependency tracking is quadratic in the symbols of one object
//! (a cell of 8,000 forms took seconds to link) and its memory manager maps at least a page per
//! segment for every object.

pub(crate) mod library;
mod memory;

use std::ffi::{CStr, CString};
use std::ptr;

use llvm_sys::error::{LLVMDisposeErrorMessage, LLVMErrorRef, LLVMGetErrorMessage};
use llvm_sys::orc2::ee::LLVMOrcCreateRTDyldObjectLinkingLayerWithMCJITMemoryManagerLikeCallbacks;
use llvm_sys::orc2::lljit::{
    LLVMOrcCreateLLJIT, LLVMOrcCreateLLJITBuilder, LLVMOrcDisposeLLJIT, LLVMOrcLLJITAddObjectFileWithRT,
    LLVMOrcLLJITBuilderSetObjectLinkingLayerCreator, LLVMOrcLLJITGetGlobalPrefix, LLVMOrcLLJITGetMainJITDylib,
    LLVMOrcLLJITLookup, LLVMOrcLLJITMangleAndIntern, LLVMOrcLLJITRef,
};
use llvm_sys::orc2::{
    LLVMJITEvaluatedSymbol, LLVMJITSymbolFlags, LLVMJITSymbolGenericFlags, LLVMOrcAbsoluteSymbols,
    LLVMOrcCSymbolMapPair, LLVMOrcCreateDynamicLibrarySearchGeneratorForProcess, LLVMOrcExecutionSessionRef,
    LLVMOrcJITDylibAddGenerator, LLVMOrcJITDylibCreateResourceTracker, LLVMOrcJITDylibDefine, LLVMOrcJITDylibRef,
    LLVMOrcObjectLayerRef, LLVMOrcReleaseResourceTracker, LLVMOrcResourceTrackerRef, LLVMOrcResourceTrackerRemove,
};

use self::memory::CodeMemory;

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
    /// Where linked code lives. The linking layer writes into it, so it is freed after the JIT
    /// (fields drop after `drop`'s body); only tests read it.
    #[cfg_attr(not(test), allow(dead_code))]
    memory: Box<CodeMemory>,
}

/// The code of one linked cell; removing it frees the code.
pub(crate) struct CellCode {
    tracker: LLVMOrcResourceTrackerRef,
}

impl Jit {
    pub fn new() -> Result<Jit, JitError> {
        let memory = CodeMemory::new().map_err(JitError::Create)?;
        let mut lljit = ptr::null_mut();
        // SAFETY: plain ORC C API calls; the builder is consumed by LLVMOrcCreateLLJIT, and
        // the JIT is disposed in Drop. The code memory the linking layer is given lives in a box
        // that the JIT owns and frees after disposing of the JIT.
        unsafe {
            let builder = LLVMOrcCreateLLJITBuilder();
            let context = &*memory as *const CodeMemory as *mut std::ffi::c_void;
            LLVMOrcLLJITBuilderSetObjectLinkingLayerCreator(builder, create_linking_layer, context);
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
            Ok(Jit { lljit, dylib, memory })
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
            if let Some(message) = take_error(LLVMOrcJITDylibDefine(self.dylib, unit)) {
                return Err(JitError::Define(message));
            }
        }
        // Materialise the unit now: until one of its symbols is looked up it keeps two hash
        // tables of its own (2.5 KB for a single slot), and a function no cell calls yet would
        // keep them for the rest of the session. One lookup materialises all its symbols.
        let (first, _) = &symbols[0];
        self.lookup(first).map(|_| ())
    }

    /// The address of a symbol of the JIT, materialising what defines it.
    fn lookup(&mut self, symbol: &str) -> Result<usize, JitError> {
        let symbol_name = CString::new(symbol).map_err(|error| JitError::Link(error.to_string()))?;
        let mut address = 0;
        // SAFETY: the JIT is live and the name a C string for the duration of the call.
        let error = unsafe { LLVMOrcLLJITLookup(self.lljit, &mut address, symbol_name.as_ptr()) };
        take_error(error).map_or(Ok(address as usize), |message| Err(JitError::Link(message)))
    }

    /// Adds a cell's object file and resolves the given symbols; on failure nothing stays.
    /// Links as `link`, with the object's code on pages of its own, which no later link makes
    /// writable: for code that runs on other threads while the session links (the simulator's
    /// builds, which device workers run).
    pub fn link_isolated(
        &mut self,
        object: &[u8],
        name: &str,
        lookups: &[String],
    ) -> Result<(CellCode, Vec<usize>), JitError> {
        self.memory.set_isolated(true);
        let linked = self.link(object, name, lookups);
        self.memory.set_isolated(false);
        linked
    }

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
                match self.lookup(symbol) {
                    Ok(address) => addresses.push(address),
                    Err(error) => {
                        code.remove();
                        return Err(error);
                    }
                }
            }
            Ok((code, addresses))
        }
    }
}

impl Jit {
    /// Bytes of code memory in use, for tests that code is given back.
    #[cfg(test)]
    pub(crate) fn code_in_use(&self) -> usize {
        self.memory.in_use()
    }
}

impl CellCode {
    /// Removes the cell's code from the JIT and frees its memory: linking failed, or nothing
    /// can reach the code any more.
    pub(crate) fn remove(self) {
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
        // SAFETY: the JIT was created in `new` and is disposed exactly once, here, before its
        // code memory (a field, dropped after this body) is unmapped.
        unsafe {
            take_error(LLVMOrcDisposeLLJIT(self.lljit));
        }
    }
}

/// The object linking layer of the session's JIT: RuntimeDyld, with sections in `CodeMemory`.
extern "C" fn create_linking_layer(
    memory: *mut std::ffi::c_void,
    session: LLVMOrcExecutionSessionRef,
    _triple: *const std::ffi::c_char,
) -> LLVMOrcObjectLayerRef {
    // SAFETY: `memory` is the JIT's live `CodeMemory`, which outlives the layer; the callbacks
    // keep to the contract of MCJIT's memory manager (see `memory`).
    unsafe {
        LLVMOrcCreateRTDyldObjectLinkingLayerWithMCJITMemoryManagerLikeCallbacks(
            session,
            memory,
            memory::create_context,
            memory::notify_terminating,
            memory::allocate_code,
            memory::allocate_data,
            memory::finalize,
            Some(memory::destroy),
        )
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
