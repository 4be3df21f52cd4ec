//! A recorded session reads back as a transcript that passes. Its own test binary with one
//! test: a session capturing output redirects the process's stdout while code runs, so it must
//! not share a process with tests whose harness prints results meanwhile (the project's
//! transcript harnesses run one test at a time for the same reason).

use quasi_repl::transcript::{new_session, parse, run, Recording};

#[test]
fn a_recording_reads_back_as_the_same_cells() {
    let mut recording = Recording::default();
    let mut session = new_session().expect("a session starts");
    for input in ["(define ((sq int) (x int))\n  (ret (mul x x)))", "(call sq 7)", "(add 1 2.5)"] {
        let outcome = session.eval(input);
        recording.record(input, &outcome);
    }
    let transcript = parse(&recording.text());
    assert_eq!(transcript.cells.len(), 3);
    assert_eq!(transcript.cells[1].expected, "49 : int\n");
    assert!(transcript.cells[2].expected.starts_with("error[type]"));
    let rerun = run(&transcript).expect("the transcript runs");
    let expected: Vec<String> = transcript.cells.iter().map(|cell| cell.expected.clone()).collect();
    assert_eq!(rerun, expected);
}
