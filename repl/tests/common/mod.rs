//! What the binary's test files share.
// Each test file that includes this module uses part of it.
#![allow(dead_code)]

use std::io::Read;
use std::process::{Child, ChildStdin, Command, Stdio};

/// A program that says it runs, then loops until stopped, so a signal is sent to running code.
pub const SPIN: &str = "(define ((printf int) (fmt (ptr int8)) ...))\n(define ((fflush int) (stream (ptr int8))))\n\
                        (define ((main int)) (call printf \"running\\n\") (call fflush (inttoptr 0 (ptr int8))) (while #t) (ret 0))\n";

/// `quasi` reading cells from a pipe (its standard error dropped), with `environment` set:
/// the child, to read its output from, and its standard input, to write cells to.
pub fn quasi_reading_cells(environment: &[(&str, &std::ffi::OsStr)]) -> (Child, ChildStdin) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_quasi"))
        .env("NO_COLOR", "1")
        .envs(environment.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("the quasi binary starts");
    let stdin = child.stdin.take().expect("stdin is piped");
    (child, stdin)
}

/// Closes `quasi`'s standard input and returns everything it printed, once it has ended
/// successfully (the assertion shows the output when it did not).
pub fn output_at_end(mut child: Child, stdin: ChildStdin) -> String {
    drop(stdin);
    let mut output = String::new();
    child.stdout.take().expect("stdout is piped").read_to_string(&mut output).expect("the output");
    assert!(child.wait().expect("quasi ends").success(), "{output}");
    output
}

/// Starts `command` (a `quasi run` of `SPIN`) with its output piped, and returns once its code runs.
pub fn spinning(command: &mut Command) -> Child {
    let mut child = command.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("the quasi binary starts");
    let mut running = [0u8; 8];
    child.stdout.as_mut().expect("stdout is piped").read_exact(&mut running).expect("the program runs");
    assert_eq!(&running, b"running\n");
    child
}
