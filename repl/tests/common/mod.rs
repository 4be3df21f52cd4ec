//! What the binary's test files share.

use std::io::Read;
use std::process::{Child, Command, Stdio};

/// A program that says it runs, then loops until stopped, so a signal is sent to running code.
pub const SPIN: &str = "(define ((printf int) (fmt (ptr int8)) ...))\n(define ((fflush int) (stream (ptr int8))))\n\
                        (define ((main int)) (call printf \"running\\n\") (call fflush (inttoptr 0 (ptr int8))) (while #t) (ret 0))\n";

/// Starts `command` (a `quasi run` of `SPIN`) with its output piped, and returns once its code runs.
pub fn spinning(command: &mut Command) -> Child {
    let mut child = command.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("the quasi binary starts");
    let mut running = [0u8; 8];
    child.stdout.as_mut().expect("stdout is piped").read_exact(&mut running).expect("the program runs");
    assert_eq!(&running, b"running\n");
    child
}
