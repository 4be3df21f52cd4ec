//! Shared libraries a session loaded with `(load-library "NAME")`, and the symbols they define.
//!
//! Each library is opened `RTLD_NOW | RTLD_LOCAL`: its symbols are found only through its own
//! handle, so they reach neither the process's global scope nor other sessions of the process
//! (tests run many), nor the session that follows a `:reset`. A library is closed when the
//! session that opened it lets it go; the loader counts the opens of a file, so another
//! session's copy stays.

use crate::abi;
use crate::helper::{self, HelperEnd, HelperError};
use crate::tree::Resolution;
use std::ffi::{c_void, CStr, CString};
use std::path::Path;
use std::sync::atomic::AtomicBool;

/// Why a library was not loaded.
#[derive(Debug)]
pub(crate) enum LoadError {
    /// The loader's message (no such file, a missing symbol…).
    Loader(String),
    /// Loading it in a helper process ended that process (its initialisers called `exit` or
    /// `abort`, or faulted): the session did not load it. What happened, and what it wrote.
    Refused { end: HelperEnd, errors: String },
    /// The session was interrupted while the library loaded (its initialisers hang).
    Interrupted,
}

/// The environment variable of directories (colon-separated) searched for a library named
/// without a `/`, before the system loader's own search.
pub(crate) const LIBRARY_PATH_VARIABLE: &str = "QUASI_LIBRARY_PATH";

/// One loaded library: the handle the loader gave, and the name it was loaded by.
pub(crate) struct Library {
    handle: *mut c_void,
    /// The name as the program wrote it (`libm.so.6`, or a path).
    pub(crate) name: String,
    /// What the loader calls the file (its path), to tell the library's own symbols from those
    /// of the libraries it depends on.
    file: String,
}

/// The start of glibc's `struct link_map` (`<link.h>`), which `dlinfo` gives.
#[repr(C)]
struct LinkMapStart {
    address: usize,
    name: *const libc::c_char,
}

impl Library {
    /// Loads a library: a name with a `/` is a path; another name is looked for in the
    /// directories of `QUASI_LIBRARY_PATH`, then by the system loader. The error is the
    /// loader's message, with the directories searched. A library not yet in the process is
    /// loaded first in a helper process (`helper`): initialisers that end the process (exit,
    /// abort, a fault) end that one, and one that hangs is stopped by `interrupt`. Handlers of
    /// the fault guard that the initialisers replace are put back; the count is in the result.
    pub(crate) fn open(name: &str, interrupt: &AtomicBool) -> Result<(Library, i32), LoadError> {
        let mut candidates = Vec::new();
        let search_path = std::env::var(LIBRARY_PATH_VARIABLE).unwrap_or_default();
        if !name.contains('/') {
            for directory in search_path.split(':').filter(|directory| !directory.is_empty()) {
                let path = Path::new(directory).join(name);
                if path.exists() {
                    candidates.push(path.to_string_lossy().into_owned());
                    break;
                }
            }
        }
        candidates.push(name.to_string());
        let mut message = String::new();
        for candidate in candidates {
            if let Err(error) = probe(&candidate, interrupt) {
                match error {
                    LoadError::Loader(error) if message.is_empty() => message = error,
                    LoadError::Loader(_) => {}
                    other => return Err(other),
                }
                continue;
            }
            match open_file(&candidate) {
                Ok(handle) => {
                    let restored = crate::guard::restore_handlers();
                    let file = file_name(handle).unwrap_or(candidate);
                    return Ok((Library { handle, name: name.to_string(), file }, restored));
                }
                // A file found in QUASI_LIBRARY_PATH that does not load says why; else the
                // loader's search does.
                Err(error) => {
                    if message.is_empty() {
                        message = error;
                    }
                }
            }
        }
        Err(LoadError::Loader(message))
    }

    /// The address of a function or variable the library itself defines (not one of the
    /// libraries it depends on, which `dlsym` would also find through its handle).
    pub(crate) fn symbol(&self, symbol: &str) -> Option<usize> {
        let symbol = CString::new(symbol).ok()?;
        // SAFETY: the handle is live until drop; dlsym only reads the NUL-terminated name.
        let address = unsafe { libc::dlsym(self.handle, symbol.as_ptr()) };
        if address.is_null() {
            return None;
        }
        let mut info: libc::Dl_info = libc::Dl_info {
            dli_fname: std::ptr::null(),
            dli_fbase: std::ptr::null_mut(),
            dli_sname: std::ptr::null(),
            dli_saddr: std::ptr::null_mut(),
        };
        // SAFETY: dladdr writes the fields of `info`; the name it gives lives as long as the
        // object that holds the address, which this handle keeps loaded.
        let found = unsafe { libc::dladdr(address, &mut info) } != 0 && !info.dli_fname.is_null();
        // SAFETY: as above, a NUL-terminated string owned by the loader.
        let owner = found.then(|| unsafe { CStr::from_ptr(info.dli_fname) }.to_string_lossy().into_owned());
        (owner.as_deref() == Some(self.file.as_str())).then_some(address as usize)
    }
}

/// The helper job that loads a library (`probe_library`).
const LOAD_LIBRARY: &str = "load-library";

helper::helper_job!(LOAD_LIBRARY, probe_library);

/// In a helper: loads the library `path` as the session would (`RTLD_NOW | RTLD_LOCAL`);
/// answers `ok`, or `error` and the loader's message.
fn probe_library(path: &CStr) -> i32 {
    helper::answer_with(|| {
        // SAFETY: dlopen runs the initialisers, which is the job; dlerror's string is copied
        // before any other loader call.
        unsafe {
            let handle = libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL);
            if !handle.is_null() {
                return b"ok\n".to_vec();
            }
            let error = libc::dlerror();
            let mut text = b"error\n".to_vec();
            if !error.is_null() {
                text.extend_from_slice(CStr::from_ptr(error).to_bytes());
            }
            text
        }
    })
}

/// Loads `path` in a helper process first, unless the process has it already: `Ok` if it
/// loads there.
fn probe(path: &str, interrupt: &AtomicBool) -> Result<(), LoadError> {
    let Ok(c_path) = CString::new(path) else { return Ok(()) };
    // SAFETY: RTLD_NOLOAD only looks the file up (no initialiser runs); the handle it gives
    // is closed at once.
    let loaded = unsafe {
        let handle = libc::dlopen(c_path.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL | libc::RTLD_NOLOAD);
        if !handle.is_null() {
            libc::dlclose(handle);
        }
        !handle.is_null()
    };
    if loaded {
        return Ok(());
    }
    let limits = helper::Limits { memory: None, cpu_seconds: None, answer: 1 << 16 };
    match helper::run(LOAD_LIBRARY, path, limits, interrupt) {
        Ok(answer) => match answer.strip_prefix(b"error\n") {
            Some(message) => Err(LoadError::Loader(String::from_utf8_lossy(message).into_owned())),
            None => Ok(()),
        },
        Err(HelperError::Interrupted) => Err(LoadError::Interrupted),
        Err(HelperError::Ended { end, errors }) => Err(LoadError::Refused { end, errors }),
        // No helper (no /proc): the library is loaded as it is.
        Err(HelperError::Start) => Ok(()),
    }
}

/// dlopen with the session's flags, giving dlerror's text on failure.
fn open_file(path: &str) -> Result<*mut c_void, String> {
    let c_path = CString::new(path).map_err(|_| format!("{path}: the name contains a NUL byte"))?;
    // SAFETY: dlopen runs the library's initialisers, which is what loading a library means;
    // dlerror's string is copied before any other loader call.
    unsafe {
        let handle = libc::dlopen(c_path.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL);
        if handle.is_null() {
            let error = libc::dlerror();
            return Err(if error.is_null() {
                format!("{path}: the loader gave no reason")
            } else {
                CStr::from_ptr(error).to_string_lossy().into_owned()
            });
        }
        Ok(handle)
    }
}

/// The loader's name for a loaded library's file.
fn file_name(handle: *mut c_void) -> Option<String> {
    let mut map: *const LinkMapStart = std::ptr::null();
    // SAFETY: RTLD_DI_LINKMAP stores a pointer to the handle's `struct link_map`, whose first
    // two fields `LinkMapStart` mirrors; it lives while the handle does.
    unsafe {
        if libc::dlinfo(handle, libc::RTLD_DI_LINKMAP, (&mut map as *mut *const LinkMapStart).cast()) != 0
            || map.is_null()
            || (*map).name.is_null()
        {
            return None;
        }
        Some(CStr::from_ptr((*map).name).to_string_lossy().into_owned())
    }
}

impl Drop for Library {
    fn drop(&mut self) {
        // SAFETY: the handle came from dlopen and is closed once. The session drops a library
        // only after the code that could call into it: a failed cell (its code never ran) or
        // the whole session (its program goes first).
        unsafe {
            libc::dlclose(self.handle);
        }
    }
}

/// The libraries of a session, newest first, and those the cell being evaluated loaded.
///
/// Invariant: `pending` is empty between cells: a cell's libraries become the session's in
/// `commit_pending`, or are closed by `drop_pending` when the cell fails.
#[derive(Default)]
pub(crate) struct Libraries {
    loaded: Vec<Library>,
    /// Loaded by the current cell, newest last.
    pending: Vec<Library>,
}

/// Finds a symbol in the running process (libc, libm, loaded libraries).
pub(crate) fn process_symbol(name: &str) -> Option<usize> {
    let name = std::ffi::CString::new(name).ok()?;
    // SAFETY: dlsym with RTLD_DEFAULT and a NUL-terminated name only reads.
    let address = unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) };
    (!address.is_null()).then_some(address as *const () as usize)
}

impl Libraries {
    /// Where a bodiless declaration's symbol is (docs/language.md §3.3): these libraries,
    /// newest first (the current cell's first), then the built-in runtime, then the process.
    /// The checker asks once per declaration; what it finds is the declaration's for good
    /// (`ExternDef::resolution`).
    pub(crate) fn resolve(&self, name: &str) -> Option<Resolution> {
        if let Some((library, address)) = self.find(name) {
            return Some(Resolution::Library { library: library.name.clone(), address });
        }
        abi::runtime_function(name).or_else(|| process_symbol(name).map(|_| name.to_string())).map(Resolution::Link)
    }

    /// Loads a library for the current cell (see `Library::open`); returns how many of the
    /// guard's signal handlers its initialisers replaced (they were put back).
    pub(crate) fn load(&mut self, name: &str, interrupt: &AtomicBool) -> Result<i32, LoadError> {
        let (library, restored) = Library::open(name, interrupt)?;
        self.pending.push(library);
        Ok(restored)
    }

    /// The newest library defining `symbol` (the current cell's first), and the address.
    pub(crate) fn find(&self, symbol: &str) -> Option<(&Library, usize)> {
        self.pending
            .iter()
            .rev()
            .chain(&self.loaded)
            .find_map(|library| library.symbol(symbol).map(|address| (library, address)))
    }

    /// Makes the current cell's libraries the session's; returns their names in load order.
    pub(crate) fn commit_pending(&mut self) -> Vec<String> {
        let added: Vec<String> = self.pending.iter().map(|library| library.name.clone()).collect();
        for library in self.pending.drain(..) {
            self.loaded.insert(0, library);
        }
        added
    }

    /// Closes the current cell's libraries: the cell failed.
    pub(crate) fn drop_pending(&mut self) {
        self.pending.clear();
    }
}
