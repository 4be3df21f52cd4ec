//! `quasi run`'s argv, as C wants it, kept by the session while its program may read it.

/// `quasi run`'s argv as C wants it: NUL-terminated strings and a null-terminated array of
/// pointers to them. An argument holding a NUL ends there, as it would through `execve`.
pub(super) struct ScriptArgv {
    _strings: Vec<std::ffi::CString>,
    pointers: Vec<*const std::ffi::c_char>,
}

// SAFETY: the pointers point into `_strings`, which the value owns and moves with it.
unsafe impl Send for ScriptArgv {}

impl ScriptArgv {
    pub(super) fn new<'a>(arguments: impl Iterator<Item = &'a str>) -> ScriptArgv {
        let strings: Vec<std::ffi::CString> = arguments
            .map(|argument| {
                let bytes = argument.as_bytes();
                let end = bytes.iter().position(|&byte| byte == 0).unwrap_or(bytes.len());
                std::ffi::CString::new(&bytes[..end]).unwrap_or_default()
            })
            .collect();
        let pointers = strings.iter().map(|string| string.as_ptr()).chain(std::iter::once(std::ptr::null())).collect();
        ScriptArgv { _strings: strings, pointers }
    }

    /// The array's address (the strings' heap buffers do not move when the vector does).
    pub(super) fn address(&self) -> usize {
        self.pointers.as_ptr() as usize
    }
}
