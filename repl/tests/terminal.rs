//! The real `quasi` binary in a pseudo-terminal: prompts, multi-line cells, history, Ctrl-C
//! and Ctrl-D, as a person at a terminal would meet them.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use rexpect::process::WaitStatus;
use rexpect::session::{spawn_with_options, Options, PtySession};

/// How long one expectation may wait (a debug build on a busy two-core machine).
const TIMEOUT_MS: u64 = 10_000;
const ENTER: &str = "\r";
const UP: &str = "\x1b[A";

/// `quasi` in a fresh pseudo-terminal with its history in `history`. `TERM` is set because
/// CI may have none, or `dumb`, which makes rustyline give up line editing.
fn spawn(history: &Path) -> PtySession {
    spawn_with(history, &[])
}

/// `spawn` with more of the environment set.
fn spawn_with(history: &Path, environment: &[(&str, &str)]) -> PtySession {
    let mut command = Command::new(env!("CARGO_BIN_EXE_quasi"));
    command.env("TERM", "xterm").env("NO_COLOR", "1").env("QUASI_HISTORY", history);
    command.envs(environment.iter().copied());
    let options = Options::new().timeout_ms(Some(TIMEOUT_MS)).strip_ansi_escape_codes(true);
    spawn_with_options(command, options).expect("quasi starts in a pseudo-terminal")
}

/// `spawn`, then wait for the banner and the first prompt.
fn start(history: &Path) -> PtySession {
    let mut terminal = spawn(history);
    expect_banner(&mut terminal);
    expect_prompt(&mut terminal);
    terminal
}

fn expect_banner(terminal: &mut PtySession) -> String {
    terminal.exp_string(":help for help, Ctrl-D to quit.").expect("the banner")
}

/// Waits for a fresh prompt at the start of a line (rustyline returns the carriage first).
/// Input sent before it could reach the terminal before rustyline switched to raw mode, so
/// every send waits for one first.
fn expect_prompt(terminal: &mut PtySession) -> String {
    terminal.exp_regex(r"\n\r*> ").expect("a prompt").0
}

fn send(terminal: &mut PtySession, keys: &str) {
    terminal.send(keys).expect("writing to the terminal");
    terminal.flush().expect("flushing the terminal");
}

/// Ctrl-D on an empty line ends `quasi`; returns how it ended.
fn quit_with_ctrl_d(mut terminal: PtySession) -> WaitStatus {
    terminal.send_control('d').expect("sending Ctrl-D");
    terminal.exp_eof().expect("quasi closes the terminal");
    let started = Instant::now();
    loop {
        match terminal.process().status() {
            Some(WaitStatus::StillAlive) | None if started.elapsed() < Duration::from_millis(TIMEOUT_MS) => {
                std::thread::sleep(Duration::from_millis(10))
            }
            Some(status) => return status,
            None => panic!("quasi did not exit after Ctrl-D"),
        }
    }
}

fn exited_successfully(status: WaitStatus) -> bool {
    matches!(status, WaitStatus::Exited(_, 0))
}

#[test]
fn a_cell_continues_while_a_list_is_open() {
    let directory = tempfile::tempdir().expect("a temporary directory");
    let mut terminal = start(&directory.path().join("history"));
    send(&mut terminal, &format!("(define ((sq int) (x int)){ENTER}"));
    // The continuation prompt, then the indentation for the one open list.
    terminal.exp_regex(r"\n\.   ").expect("the continuation prompt");
    send(&mut terminal, &format!("(ret (mul x x))){ENTER}"));
    terminal.exp_string("sq : (int) -> int").expect("the definition");
    expect_prompt(&mut terminal);
    send(&mut terminal, &format!("(call sq 7){ENTER}"));
    terminal.exp_string("49 : int").expect("the call's value");
    expect_prompt(&mut terminal);
    assert!(exited_successfully(quit_with_ctrl_d(terminal)));
}

#[test]
fn history_is_kept_across_sessions() {
    let directory = tempfile::tempdir().expect("a temporary directory");
    // A directory that does not exist yet: quasi creates it.
    let history = directory.path().join("state/quasi/history");
    let mut first = start(&history);
    send(&mut first, &format!("(add 40 2){ENTER}"));
    first.exp_string("42 : int").expect("the first session's value");
    expect_prompt(&mut first);
    assert!(exited_successfully(quit_with_ctrl_d(first)));
    let saved = std::fs::read_to_string(&history).expect("the history file was written");
    assert!(saved.contains("(add 40 2)"), "history file:\n{saved}");

    let mut second = start(&history);
    send(&mut second, UP);
    second.exp_string("> (add 40 2)").expect("Up recalls the cell of the last session");
    send(&mut second, ENTER);
    second.exp_string("42 : int").expect("the recalled cell runs");
    expect_prompt(&mut second);
    assert!(exited_successfully(quit_with_ctrl_d(second)));
}

#[test]
fn ctrl_c_drops_the_cell_being_typed() {
    let directory = tempfile::tempdir().expect("a temporary directory");
    let mut terminal = start(&directory.path().join("history"));
    send(&mut terminal, &format!("(add 1{ENTER}"));
    terminal.exp_regex(r"\n\.   ").expect("the continuation prompt");
    send(&mut terminal, "(mul 2");
    terminal.send_control('c').expect("sending Ctrl-C");
    expect_prompt(&mut terminal);
    send(&mut terminal, &format!("(add 2 3){ENTER}"));
    let before_value = terminal.exp_string("5 : int").expect("a fresh cell after Ctrl-C");
    assert!(!before_value.contains("error"), "the dropped cell was evaluated:\n{before_value}");
    expect_prompt(&mut terminal);
    assert!(exited_successfully(quit_with_ctrl_d(terminal)));
}

#[test]
fn a_history_that_cannot_be_kept_is_only_a_warning() {
    let directory = tempfile::tempdir().expect("a temporary directory");
    let not_a_directory = directory.path().join("file");
    std::fs::write(&not_a_directory, "").expect("writing a plain file");
    let mut terminal = spawn(&not_a_directory.join("history"));
    let before_banner = expect_banner(&mut terminal);
    assert!(before_banner.contains("quasi: warning: cannot read history from"), "{before_banner}");
    expect_prompt(&mut terminal);
    send(&mut terminal, &format!("(add 1 2){ENTER}"));
    // Saving fails as well, but the user has been told once.
    let before_value = terminal.exp_string("3 : int").expect("the cell still runs");
    assert!(!before_value.contains("warning"), "{before_value}");
    expect_prompt(&mut terminal);
    send(&mut terminal, &format!(":quit{ENTER}"));
    terminal.exp_eof().expect(":quit ends quasi");
}

#[test]
fn tab_completes_defined_names_and_commands() {
    let directory = tempfile::tempdir().expect("a temporary directory");
    let mut terminal = start(&directory.path().join("history"));
    send(&mut terminal, &format!("(define ((square int) (x int)) (ret (mul x x))){ENTER}"));
    terminal.exp_string("square : (int) -> int").expect("the definition");
    expect_prompt(&mut terminal);
    send(&mut terminal, "(call squa\t");
    terminal.exp_string("(call square").expect("the name completed");
    send(&mut terminal, &format!(" 5){ENTER}"));
    terminal.exp_string("25 : int").expect("the completed call runs");
    expect_prompt(&mut terminal);
    send(&mut terminal, ":qu\t");
    terminal.exp_string(":quit").expect("the command completed");
    send(&mut terminal, ENTER);
    terminal.exp_eof().expect(":quit ends quasi");
}

#[test]
fn pasted_and_typed_ahead_cells_all_run() {
    let directory = tempfile::tempdir().expect("a temporary directory");
    let mut terminal = start(&directory.path().join("history"));
    // A bracketed paste of a two-line cell, then two cells typed before any result is shown.
    send(
        &mut terminal,
        &format!("\x1b[200~(define ((five int))\n  (ret 5))\x1b[201~{ENTER}(call five){ENTER}(add 1 2){ENTER}"),
    );
    terminal.exp_string("five : () -> int").expect("the pasted definition");
    terminal.exp_string("5 : int").expect("the first cell typed ahead");
    terminal.exp_string("3 : int").expect("the second cell typed ahead");
    expect_prompt(&mut terminal);
    assert!(exited_successfully(quit_with_ctrl_d(terminal)));
}

#[test]
fn a_pasted_cell_keeps_its_indentation() {
    let directory = tempfile::tempdir().expect("a temporary directory");
    let mut terminal = start(&directory.path().join("history"));
    // The diagnostic quotes the line as the session read it: with the 8 spaces pasted, not 6
    // (the first 2 taken for the margin under the continuation prompt).
    let cell = "(define ((f int) (x int))\n    (if (lt x 0)\n        (ret 0)\n        (ret oops)))";
    send(&mut terminal, &format!("\x1b[200~{cell}\x1b[201~{ENTER}"));
    terminal.exp_string("4 |         (ret oops)))").expect("the pasted line, as pasted");
    expect_prompt(&mut terminal);
    // A paste that leaves a list open: Enter indents the line typed after it for the two lists
    // open (4 spaces), and the pasted lines keep theirs.
    send(&mut terminal, &format!("\x1b[200~(define ((g int) (x int))\n(if (lt x 0)\n      (ret 0)\x1b[201~{ENTER}"));
    terminal.exp_regex(r"\n\.     ").expect("the continuation prompt and Enter's indentation");
    send(&mut terminal, &format!("(ret oops)))){ENTER}"));
    terminal.exp_string("4 |     (ret oops))))").expect("the typed line, indented by Enter");
    expect_prompt(&mut terminal);
    send(&mut terminal, &format!("(define ((h int))\x1b[200~\n   (ret\n 7))\x1b[201~{ENTER}"));
    terminal.exp_string("h : () -> int").expect("a paste into a typed line");
    expect_prompt(&mut terminal);
    assert!(exited_successfully(quit_with_ctrl_d(terminal)));
    let history = std::fs::read_to_string(directory.path().join("history")).expect("the history");
    // History keeps the buffer, a margin under each continuation prompt.
    assert!(history.contains(r"(define ((h int))\n     (ret\n   7))"), "history:\n{history}");
}

#[test]
fn a_caret_under_a_line_wider_than_the_terminal_stays_under_its_character() {
    let directory = tempfile::tempdir().expect("a temporary directory");
    // The pseudo-terminal reports no width, so `COLUMNS` gives it: 40 columns.
    let mut terminal = spawn_with(&directory.path().join("history"), &[("COLUMNS", "40")]);
    expect_banner(&mut terminal);
    expect_prompt(&mut terminal);
    send(
        &mut terminal,
        &format!("(define ((f int) (x int)) (ret (add x (add x (add x (add x (add x 1.5))))))){ENTER}"),
    );
    // The header keeps the real column; the line is cut to 40 columns around the label, the
    // carets under `(add x 1.5)` as on the whole line. rexpect reads the terminal's bytes as
    // one character each: `…` (E2 80 A6) comes as three.
    terminal.exp_string("--> cell 1:1:60").expect("the location");
    let window = "1 | \u{e2}\u{80}\u{a6}d x (add x (add x (add x 1.5)))))))\r\n  |                    ^^^^^^^^^^^\r\n";
    terminal.exp_string(window).expect("the window of the line, the carets under the label");
    expect_prompt(&mut terminal);
    assert!(exited_successfully(quit_with_ctrl_d(terminal)));
}

#[test]
fn a_pasted_transcript_runs_without_its_prompts_and_outputs() {
    let directory = tempfile::tempdir().expect("a temporary directory");
    let mut terminal = start(&directory.path().join("history"));
    // Copied with prompts and outputs, error lines included (their parentheses need not
    // balance): each cell runs, shown with its prompt, and the outputs pasted are not read
    // (they differ from the real ones here, so that the terminal's echo of the paste cannot
    // pass for them).
    let transcript = "> (define ((sq int) (x int))\n.   (ret (mul x x)))\nsq : (int) -> float\n> (call sq 8)\n49 : int\n> (add 40 2)\n1 | (oops (\n";
    send(&mut terminal, &format!("\x1b[200~{transcript}\x1b[201~{ENTER}"));
    terminal.exp_string("sq : (int) -> int").expect("the first cell's result");
    terminal.exp_string("> (call sq 8)").expect("the second cell, shown with its prompt");
    terminal.exp_string("64 : int").expect("the second cell's result");
    terminal.exp_string("> (add 40 2)").expect("the third cell");
    terminal.exp_string("42 : int").expect("the third cell's result");
    expect_prompt(&mut terminal);
    send(&mut terminal, &format!("(call sq 9){ENTER}"));
    terminal.exp_string("81 : int").expect("the definition pasted is kept");
    expect_prompt(&mut terminal);
    assert!(exited_successfully(quit_with_ctrl_d(terminal)));
}

#[test]
fn save_writes_a_transcript_that_quasi_test_passes() {
    let directory = tempfile::tempdir().expect("a temporary folder");
    let saved = directory.path().join("session.repl");
    let mut terminal = start(&directory.path().join("history"));
    for cell in ["(define ((sq int) (x int)) (ret (mul x x)))", "(call sq 7)", "(call sq 1.5)"] {
        send(&mut terminal, cell);
        send(&mut terminal, ENTER);
        expect_prompt(&mut terminal);
    }
    send(&mut terminal, &format!(":save {}", saved.display()));
    send(&mut terminal, ENTER);
    terminal.exp_string("saved 3 cells to").expect("`:save` says what it wrote");
    expect_prompt(&mut terminal);
    assert!(exited_successfully(quit_with_ctrl_d(terminal)));
    let text = std::fs::read_to_string(&saved).expect("the transcript was written");
    assert!(text.contains("> (call sq 7)\n49 : int\n"), "{text}");
    assert!(text.contains("error[type]"), "a failing cell is recorded too:\n{text}");
    let checked = Command::new(env!("CARGO_BIN_EXE_quasi")).arg("test").arg(&saved).output().expect("quasi test runs");
    let report = String::from_utf8_lossy(&checked.stdout);
    assert!(checked.status.success(), "{report}");
    assert!(report.ends_with("1 passed, 0 failed\n"), "{report}");
}

/// Ctrl-C while compiled code loops stops it where it stands (§6.6, issue 13): the cell ends with
/// `error[interrupted]` naming the function, and the session keeps its definitions and what the
/// loop did. The same for a Rhai loop and for code blocked in a libc call.
#[test]
fn a_transcript_saved_after_an_interrupt_replays_without_hanging() {
    let directory = tempfile::tempdir().expect("a temporary folder");
    let saved = directory.path().join("interrupted.repl");
    let mut terminal = start(&directory.path().join("history"));
    send(&mut terminal, &format!("(define ((forever void)) (while #t ())){ENTER}"));
    terminal.exp_string("forever : () -> void").expect("the definition");
    expect_prompt(&mut terminal);
    send(&mut terminal, &format!("(call forever){ENTER}"));
    std::thread::sleep(Duration::from_millis(500));
    terminal.send_control('c').expect("sending Ctrl-C");
    terminal.exp_string("interrupted").expect("the cell is interrupted");
    expect_prompt(&mut terminal);
    for cell in ["(add 40 2)".to_string(), format!(":save {}", saved.display())] {
        send(&mut terminal, &format!("{cell}{ENTER}"));
        expect_prompt(&mut terminal);
    }
    assert!(exited_successfully(quit_with_ctrl_d(terminal)));
    let text = std::fs::read_to_string(&saved).expect("the transcript was written");
    assert!(text.contains("> (call forever)\nerror[interrupted]"), "the interrupted cell is recorded:\n{text}");
    // Replayed, the interrupted cell is not run (it would loop until --timeout).
    let checked = Command::new(env!("CARGO_BIN_EXE_quasi"))
        .args(["test", "--timeout", "60"])
        .arg(&saved)
        .output()
        .expect("quasi test runs");
    let report = String::from_utf8_lossy(&checked.stdout);
    assert!(checked.status.success() && report.ends_with("1 passed, 0 failed\n"), "{report}");
}

#[test]
fn ctrl_c_stops_running_code_and_keeps_the_session() {
    let directory = tempfile::tempdir().expect("a temporary directory");
    let mut terminal = start(&directory.path().join("history"));
    let cells = [
        // Pinned: the loop's stores to `spins` are checked below, and optimised code (opt 3, as
        // tiered compilation would promote `spin` to) may keep `spins` in a register until the
        // loop ends, which it never does (docs/language.md §4).
        (":opt 1", "optimisation level 1"),
        ("(define-global (spins int64))", "spins : int64 = 0"),
        ("(define ((spin void)) (while #t (set spins (add spins (int64 1)))))", "spin : () -> void"),
        ("(define ((usleep int) (us int)))", "usleep : (int) -> int  (extern)"),
        ("(define ((nap void)) (while #t (call usleep 1000000)))", "nap : () -> void"),
        // Rhai's operations limit would stop the Rhai loop before Ctrl-C does.
        (":limits operations 100000000000", "operations"),
    ];
    for (cell, shown) in cells {
        send(&mut terminal, &format!("{cell}{ENTER}"));
        terminal.exp_string(shown).expect("the definition");
        expect_prompt(&mut terminal);
    }
    for (cell, stopped) in [
        ("(call spin)", "interrupted in function `spin`"),
        ("(call nap)", "interrupted in function `nap`"),
        ("(rhai \"loop { }\")", "interrupted while expanding"),
    ] {
        send(&mut terminal, &format!("{cell}{ENTER}"));
        std::thread::sleep(Duration::from_millis(500));
        terminal.send_control('c').expect("sending Ctrl-C");
        terminal.exp_string(stopped).expect("the cell is interrupted");
        expect_prompt(&mut terminal);
    }
    send(&mut terminal, &format!("(gt spins (int64 0)){ENTER}"));
    terminal.exp_string("#t : bool").expect("the loop's effects are kept");
    expect_prompt(&mut terminal);
    assert!(exited_successfully(quit_with_ctrl_d(terminal)));
}

#[test]
fn a_long_autotune_shows_its_progress_on_one_line_then_its_table() {
    let directory = tempfile::tempdir().expect("a temporary directory");
    let mut terminal = start(&directory.path().join("history"));
    send(&mut terminal, &format!("(rhai \"fn gen_id(k) {{ quote(\\\"(define ((id int) (n int)) (ret (add n ,k)))\\\", #{{ k: k }}) }}\"){ENTER}"));
    expect_prompt(&mut terminal);
    // Six variants of 0.2 s each: past the half second, the progress line is drawn on the last
    // line (carriage return, then erase the line: the test's terminal reader drops that escape
    // sequence), redrawn in place and erased before the table: no line break between them.
    send(
        &mut terminal,
        &format!("(autotune id (gen gen_id k) (params (k 0 1 2 3 4 5)) (run (call id 1)) (check 0) (fresh)){ENTER}"),
    );
    terminal.exp_regex(r"\rautotune id: [1-6] of 6 variants, \d+\.\d s, about \d+ s left\r").expect("a progress line");
    terminal.exp_regex(r"\rautotune id: 6 of 6 variants in \d+\.\d s\r").expect("the last progress line, in place");
    terminal
        .exp_string("autotune id: 6 variants, 6 ok (6 timed, 0 cached)\r\n")
        .expect("the line erased, the table's summary written over it");
    expect_prompt(&mut terminal);
    assert!(exited_successfully(quit_with_ctrl_d(terminal)));
}
