//! Logging: short lines on the kernel's own stderr, never in a cell's output.
//!
//! While compiled code runs, `lang` redirects file descriptors 1 and 2 into the cell's
//! output. A line another thread wrote to fd 2 then would land in the user's notebook, so the
//! log keeps a duplicate of fd 2 taken at start-up, which the redirection does not touch.

use std::fs::File;
use std::io::Write;
use std::os::fd::AsFd;
use std::sync::{Mutex, OnceLock};

static LOG: OnceLock<Mutex<File>> = OnceLock::new();
static VERBOSE: OnceLock<bool> = OnceLock::new();

/// Takes the duplicate of stderr; call before the session starts running cells.
pub fn init() {
    // Set QUASI_KERNEL_LOG=debug to see every request; by default only problems are logged,
    // as jupyter console shows the kernel's stderr in the user's terminal.
    let _ = VERBOSE.set(std::env::var("QUASI_KERNEL_LOG").is_ok_and(|level| level == "debug"));
    if let Ok(descriptor) = std::io::stderr().as_fd().try_clone_to_owned() {
        let _ = LOG.set(Mutex::new(File::from(descriptor)));
    }
}

/// Whether debug lines are wanted.
pub fn verbose() -> bool {
    VERBOSE.get().copied().unwrap_or(false)
}

/// Writes one line.
pub fn write(arguments: std::fmt::Arguments) {
    let line = format!("[quasi-kernel] {arguments}\n");
    match LOG.get().map(Mutex::lock) {
        Some(Ok(mut file)) => {
            let _ = file.write_all(line.as_bytes());
        }
        _ => eprint!("{line}"),
    }
}

/// Logs a problem (a dropped message, a failed send).
macro_rules! warning {
    ($($argument:tt)*) => { $crate::logging::write(format_args!($($argument)*)) };
}

/// Logs a line only under `QUASI_KERNEL_LOG=debug`.
macro_rules! debug {
    ($($argument:tt)*) => {
        if $crate::logging::verbose() {
            $crate::logging::write(format_args!($($argument)*))
        }
    };
}

pub(crate) use {debug, warning};
