//! `quasi`: the terminal front end (rustyline) and `quasi run FILE`.

use std::io::{BufRead, IsTerminal, Write};

use quasi_lang::{completeness, Completeness, Session, SessionConfig};
use quasi_repl::{render, Style};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let code = match args.first().map(String::as_str) {
        Some("run") => run_file(&args[1..]),
        _ => piped(),
    };
    std::process::exit(code);
}

fn new_session() -> Session {
    match Session::new(SessionConfig { capture_output: true, ..SessionConfig::default() }) {
        Ok(session) => session,
        Err(error) => {
            eprintln!("quasi: cannot start a session: {error}");
            std::process::exit(1);
        }
    }
}

fn run_file(args: &[String]) -> i32 {
    let Some(path) = args.first() else {
        eprintln!("usage: quasi run FILE [ARG…]");
        return 1;
    };
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(error) => {
            eprintln!("error[io]: cannot read `{path}`: {error}");
            return 1;
        }
    };
    let mut session = match Session::new(SessionConfig::default()) {
        Ok(session) => session,
        Err(error) => {
            eprintln!("quasi: {error}");
            return 1;
        }
    };
    let (outcome, status) = session.run_file(path, text, &args[1..]);
    let style = if std::io::stderr().is_terminal() { Style::Color } else { Style::Plain };
    for diagnostic in outcome.diagnostics.iter().filter(|diagnostic| diagnostic.is_error()) {
        eprint!("{}", quasi_repl::render_diagnostic(diagnostic, &outcome, style));
    }
    status
}

/// Reads cells from stdin without prompts: a cell ends at the end of a line where every
/// list is closed, as in the interactive REPL.
fn piped() -> i32 {
    let mut session = new_session();
    let mut pending = String::new();
    let stdin = std::io::stdin();
    let mut stdout = std::io::stdout();
    for line in stdin.lock().lines() {
        let Ok(line) = line else { break };
        if pending.is_empty() && line.trim().is_empty() {
            continue;
        }
        pending.push_str(&line);
        pending.push('\n');
        if let Completeness::Incomplete { .. } = completeness(&pending) {
            continue;
        }
        let outcome = session.eval(pending.trim_end());
        pending.clear();
        let _ = write!(stdout, "{}", render(&outcome, Style::Plain));
        let _ = stdout.flush();
        if outcome.quit {
            return 0;
        }
    }
    if !pending.trim().is_empty() {
        let outcome = session.eval(pending.trim_end());
        let _ = write!(stdout, "{}", render(&outcome, Style::Plain));
    }
    0
}
