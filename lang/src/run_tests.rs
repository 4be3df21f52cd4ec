//! Tests of the executor and capture that need whole sessions.

use super::*;
use crate::{Session, SessionConfig, Stream};

/// The file a descriptor refers to, as (device, inode).
fn identity(descriptor: i32) -> (u64, u64) {
    // SAFETY: fstat of a descriptor into a zeroed stat only reads.
    unsafe {
        let mut status: libc::stat = std::mem::zeroed();
        assert_eq!(libc::fstat(descriptor, &mut status), 0, "descriptor {descriptor} is open");
        (status.st_dev, status.st_ino)
    }
}

/// Two sessions in one process capturing at once (as tests side by side, or a program
/// embedding two, do): each gets its own output, and stdout is the process's own again after.
/// Before captured calls took turns, one session saved the other's redirection as the
/// original and stdout stayed in a memory file: the test binary's own report went missing.
#[test]
fn sessions_capturing_at_once_take_turns() {
    // Other tests' captured calls may have stdout redirected right now: look between them.
    let standard_output = || {
        let _turn = CAPTURED_CALL.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        identity(1)
    };
    let before = standard_output();
    let workers = ["left", "right"].map(|tag| {
        thread::spawn(move || {
            let config = SessionConfig { capture_output: true, load_prelude: false, ..SessionConfig::default() };
            let mut session = Session::new(config).expect("a session starts");
            assert!(!session.eval("(define ((printf int) (format (ptr int8)) ...))").failed());
            for round in 0..200 {
                let outcome = session.eval(&format!("(call printf \"{tag} {round}\\n\")"));
                assert!(!outcome.failed(), "{:?}", outcome.diagnostics);
                assert_eq!(outcome.written(Stream::Stdout), format!("{tag} {round}\n"));
            }
        })
    });
    for worker in workers {
        worker.join().expect("every captured call got its own output");
    }
    assert_eq!(standard_output(), before, "stdout is the process's own again");
}
