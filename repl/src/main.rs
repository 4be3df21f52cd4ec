//! `quasi`: the terminal front end (rustyline), the pipe mode, `quasi run FILE` and `quasi test`.
//!
//! It reads cells and renders outcomes; every language decision, including "is this cell
//! complete?", is `quasi_lang`'s.

#[macro_use]
mod streams;

mod paste;
mod shown;
use shown::Shown;

mod server;
mod test_command;

use std::borrow::Cow;
use std::cell::RefCell;
use std::ffi::OsString;
use std::io::{BufRead, IsTerminal, Write};
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use quasi_lang::{
    completeness, Completeness, Diagnostic, Kind, ObjectCache, Outcome, Session, SessionConfig, Severity, TuneCache,
};
use quasi_repl::transcript::{record_or_save, Recording};
use quasi_repl::Style;
use rustyline::completion::Completer;
use rustyline::error::ReadlineError;
use rustyline::highlight::{CmdKind, Highlighter};
use rustyline::hint::Hinter;
use rustyline::history::DefaultHistory;
use rustyline::validate::{ValidationContext, ValidationResult, Validator};
use rustyline::{
    Cmd, ColorMode, CompletionType, ConditionalEventHandler, Config, Context, Editor, Event, EventContext,
    EventHandler, Helper, KeyCode, KeyEvent, Modifiers, RepeatCount,
};

const USAGE: &str = "\
usage: quasi                         the interactive REPL (cells from stdin when it is not a terminal)
       quasi --gpu sim|sim-unchecked|device …
                                     where launches run (as `:gpu`, or QUASI_GPU): the CUDA
                                     device, or the CPU simulator, checked or not
       quasi run [--warnings] [--opt N] [--timeout SECONDS] FILE [ARG…]
                                     run FILE as one cell, then its `main`; exit with its status;
                                     --opt: the optimisation level 0–3 (default 3); --timeout:
                                     stop the run after SECONDS (status 124)
       quasi test [--bless] [--jobs N] [--timeout SECONDS] PATH…
                                     check transcripts (.repl; folders recursively), documents'
                                     ```repl blocks (.md) and notebooks (.ipynb) against a fresh
                                     session each; --bless rewrites what differs; a file
                                     running past --timeout (300 s) fails
       quasi server start [--idle MINUTES]
                                     keep a prepared worker for `quasi run`, which then
                                     skips starting LLVM; the server ends after MINUTES
                                     without a run (30). A `quasi run` that finds none
                                     starts one (idle 10) for the runs after it;
                                     QUASI_SERVER=0: none is used or started
       quasi server stop | status    end it; say whether it runs and what it served
       quasi cache [clear]           where `quasi run` keeps compiled objects (QUASI_CACHE:
                                     a folder, or `off`), how many and how big; clear: remove
                                     them all
       quasi --version               print the version
       quasi --help                  print this help";

/// What the command line asked for.
#[derive(Debug, PartialEq, Eq)]
enum Invocation {
    Repl,
    Run(RunOptions),
    Test(test_command::Options),
    /// `quasi test`'s worker for one file.
    TestWorker(String),
    /// `quasi cache`, `quasi cache clear` (true).
    Cache {
        clear: bool,
    },
    Version,
    Help,
}

fn main() {
    // Before any thread starts: the server forks.
    let mut arguments = std::env::args_os().skip(1);
    match arguments.next() {
        Some(first) if first == "server" => {
            let arguments: Vec<String> = arguments.map(|argument| argument.to_string_lossy().into_owned()).collect();
            std::process::exit(server::main(&arguments));
        }
        // One task of an autotune on Slurm (docs/language.md §8): its lines on standard output.
        Some(first) if first == "tune-worker" => {
            let Some(job) = arguments.next() else {
                eprintln!("quasi: usage: quasi-engine tune-worker JOB");
                std::process::exit(2);
            };
            let worker = std::thread::Builder::new()
                .name("quasi".into())
                .stack_size(quasi_lang::SESSION_STACK)
                .spawn(move || quasi_lang::run_tune_worker(std::path::Path::new(&job), &mut |line| println!("{line}")));
            std::process::exit(worker.map_or(1, |worker| worker.join().unwrap_or(101)));
        }
        _ => {}
    }
    // The session runs on a thread with the stack it needs; the main thread only waits.
    let quasi = std::thread::Builder::new().name("quasi".into()).stack_size(quasi_lang::SESSION_STACK).spawn(quasi);
    let code = match quasi.map(std::thread::JoinHandle::join) {
        Ok(Ok(code)) => code,
        Ok(Err(_)) => 101,
        Err(error) => {
            eprintln!("quasi: cannot start: {error}");
            1
        }
    };
    std::process::exit(code);
}

/// `--gpu MODE`: where the sessions of this process run launches.
static GPU_MODE: std::sync::OnceLock<quasi_lang::GpuMode> = std::sync::OnceLock::new();

/// Removes `--gpu MODE` from the front of the arguments (or after `run`) and returns the mode.
fn take_gpu_option(arguments: &mut Vec<OsString>) -> Result<Option<quasi_lang::GpuMode>, String> {
    let at = match arguments.first().and_then(|first| first.to_str()) {
        Some("--gpu") => 0,
        Some("run") if arguments.get(1).and_then(|second| second.to_str()) == Some("--gpu") => 1,
        _ => return Ok(None),
    };
    let value = arguments.get(at + 1).and_then(|value| value.to_str()).unwrap_or("").to_string();
    let Some(mode) = quasi_lang::GpuMode::from_name(&value) else {
        return Err(format!("`--gpu` takes {}, not `{value}`", quasi_lang::GpuMode::NAMES));
    };
    arguments.drain(at..at + 2);
    Ok(Some(mode))
}

/// The configuration of this process's sessions.
fn session_config(capture_output: bool) -> SessionConfig {
    SessionConfig { capture_output, gpu: GPU_MODE.get().copied(), ..SessionConfig::default() }
}

fn quasi() -> i32 {
    let mut arguments: Vec<OsString> = std::env::args_os().skip(1).collect();
    match take_gpu_option(&mut arguments) {
        Ok(Some(mode)) => {
            let _ = GPU_MODE.set(mode);
        }
        Ok(None) => {}
        Err(message) => {
            eprintln!("quasi: {message}\n{USAGE}");
            return 2;
        }
    }
    match parse_arguments(arguments) {
        Ok(Invocation::Repl) if std::io::stdin().is_terminal() => interactive(),
        Ok(Invocation::Repl) => piped(),
        Ok(Invocation::Run(options)) => run_with(None, &options),
        Ok(Invocation::Test(options)) => test_command::main(options, terminal_style(std::io::stdout().is_terminal())),
        Ok(Invocation::TestWorker(file)) => test_command::worker(&file),
        Ok(Invocation::Cache { clear }) => cache_command(clear),
        Ok(Invocation::Version) => print_line(&format!("quasi {}", env!("CARGO_PKG_VERSION"))),
        Ok(Invocation::Help) => print_line(USAGE),
        Err(message) => {
            eprintln!("quasi: {message}\n{USAGE}");
            2
        }
    }
}

/// `println!` without its panic when stdout is closed (`quasi --help | true`); returns the
/// exit status.
fn print_line(text: &str) -> i32 {
    let _ = writeln!(std::io::stdout(), "{text}");
    0
}

/// `quasi cache [clear]`: the object cache's folder, objects and bytes; `clear` removes them.
fn cache_command(clear: bool) -> i32 {
    let Some(cache) = ObjectCache::from_environment() else {
        return print_line(&format!(
            "quasi cache: off ({}=off, or no HOME to keep it in): `quasi run` compiles every program",
            quasi_lang::tools::CACHE_VARIABLE
        ));
    };
    let folder = cache.directory().display();
    let result = if clear { cache.clear() } else { cache.usage() };
    match result {
        Ok((objects, bytes)) if clear => {
            print_line(&format!("quasi cache: removed {} ({}) from {folder}", count(objects), size(bytes)))
        }
        Ok((objects, bytes)) => print_line(&format!(
            "quasi cache: {folder}: {}, {} (kept under {}: the least recently used go first)",
            count(objects),
            size(bytes),
            size(quasi_lang::tools::CACHE_BUDGET)
        )),
        Err(error) => {
            eprintln!("quasi cache: cannot read {folder}: {error}");
            1
        }
    }
}

/// `1 object`, `2 objects`.
fn count(objects: usize) -> String {
    format!("{objects} object{}", if objects == 1 { "" } else { "s" })
}

/// Bytes for people: B, KiB or MiB.
fn size(bytes: u64) -> String {
    match bytes {
        0..1024 => format!("{bytes} B"),
        1024..1_048_576 => format!("{:.1} KiB", bytes as f64 / 1024.0),
        _ => format!("{:.1} MiB", bytes as f64 / 1_048_576.0),
    }
}

/// A tiny hand parse: one subcommand and two flags do not need an argument-parsing crate.
fn parse_arguments(arguments: Vec<OsString>) -> Result<Invocation, String> {
    let arguments: Vec<String> = arguments
        .into_iter()
        .map(|argument| {
            argument.into_string().map_err(|argument| format!("argument `{}` is not UTF-8", argument.to_string_lossy()))
        })
        .collect::<Result<_, _>>()?;
    let Some((first, rest)) = arguments.split_first() else { return Ok(Invocation::Repl) };
    match first.as_str() {
        "--version" | "-V" => Ok(Invocation::Version),
        "--help" | "-h" => Ok(Invocation::Help),
        "run" => parse_run(rest),
        "cache" => match rest {
            [] => Ok(Invocation::Cache { clear: false }),
            [clear] if clear == "clear" => Ok(Invocation::Cache { clear: true }),
            [other, ..] => Err(format!("`cache` takes nothing or `clear`, not `{other}`")),
        },
        "test" => Ok(match test_command::parse(rest)? {
            Ok(options) => Invocation::Test(options),
            Err(file) => Invocation::TestWorker(file),
        }),
        flag if flag.starts_with('-') => Err(format!("unknown option `{flag}`")),
        command => Err(format!("unknown command `{command}` (to run a file: `quasi run {command}`)")),
    }
}

/// `quasi run`'s options, file and the program's arguments.
#[derive(Debug, PartialEq, Eq, Default)]
struct RunOptions {
    warnings: bool,
    /// `--opt N`: the optimisation level (else the session's default).
    opt: Option<u8>,
    /// `--timeout SECONDS`: the run is stopped after this long.
    timeout: Option<std::time::Duration>,
    file: String,
    args: Vec<String>,
}

/// `run [--warnings] [--opt N] [--timeout SECONDS] FILE [ARG…]`: everything after FILE belongs
/// to the program.
fn parse_run(mut arguments: &[String]) -> Result<Invocation, String> {
    let mut warnings = false;
    let mut opt = None;
    let mut timeout = None;
    loop {
        match arguments {
            [flag, rest @ ..] if flag == "--warnings" => {
                warnings = true;
                arguments = rest;
            }
            [flag, seconds, rest @ ..] if flag == "--timeout" => {
                let parsed = seconds.parse::<f64>().ok().filter(|seconds| seconds.is_finite() && *seconds > 0.0);
                let Some(seconds) = parsed else {
                    return Err(format!("`--timeout` takes a number of seconds above 0, not `{seconds}`"));
                };
                timeout = Some(std::time::Duration::from_secs_f64(seconds.min(1e9)));
                arguments = rest;
            }
            [flag] if flag == "--timeout" => return Err("`--timeout` takes a number of seconds".to_string()),
            [flag, level, rest @ ..] if flag == "--opt" => {
                opt = Some(match level.as_str() {
                    "0" => 0,
                    "1" => 1,
                    "2" => 2,
                    "3" => 3,
                    _ => return Err(format!("`--opt` takes a level 0, 1, 2 or 3, not `{level}`")),
                });
                arguments = rest;
            }
            [flag] if flag == "--opt" => return Err("`--opt` takes a level 0, 1, 2 or 3".to_string()),
            _ => break,
        }
    }
    match arguments.split_first() {
        Some((flag, _)) if flag.starts_with('-') && flag != "-" => Err(format!("unknown option `{flag}` for `run`")),
        Some((file, args)) => {
            Ok(Invocation::Run(RunOptions { warnings, opt, timeout, file: file.clone(), args: args.to_vec() }))
        }
        None => Err("`run` needs a FILE".to_string()),
    }
}

fn new_session() -> Session {
    match Session::new(session_config(true)) {
        Ok(mut session) => {
            watch_interrupts(&session);
            session.set_tune_cache(TuneCache::from_environment());
            session
        }
        Err(error) => {
            eprintln!("quasi: cannot start a session: {error}");
            std::process::exit(1);
        }
    }
}

/// `quasi run --timeout`: interrupts the run once it has taken its time, and again every 50 ms
/// until it ends (an interrupt that lands between two steps is taken by the next).
struct Watchdog {
    done: Arc<AtomicBool>,
    /// Answers whether it interrupted the run.
    thread: std::thread::JoinHandle<bool>,
}

impl Watchdog {
    fn start(handle: quasi_lang::InterruptHandle, limit: std::time::Duration) -> Watchdog {
        let done = Arc::new(AtomicBool::new(false));
        let watched = Arc::clone(&done);
        let thread = std::thread::spawn(move || {
            let deadline = std::time::Instant::now() + limit;
            let mut fired = false;
            while !watched.load(Ordering::SeqCst) {
                let now = std::time::Instant::now();
                if now >= deadline {
                    fired = true;
                    handle.interrupt();
                    std::thread::park_timeout(std::time::Duration::from_millis(50));
                } else {
                    std::thread::park_timeout(deadline - now);
                }
            }
            fired
        });
        Watchdog { done, thread }
    }

    /// Ends the watch; whether it stopped the run.
    fn stop(self) -> bool {
        self.done.store(true, Ordering::SeqCst);
        self.thread.thread().unpark();
        self.thread.join().unwrap_or(false)
    }
}

/// Whether no cell is running: SIGINT then ends the process as usual (piped input, `quasi run`
/// before its code runs). In the terminal rustyline reads Ctrl-C as a key while it edits.
static IDLE: OnceLock<Arc<AtomicBool>> = OnceLock::new();

/// Ctrl-C (SIGINT) while a cell runs stops the cell: Rhai at once, compiled code where it
/// stands (`error[interrupted]`), and the session keeps every definition.
fn watch_interrupts(session: &Session) {
    let idle = IDLE.get_or_init(|| Arc::new(AtomicBool::new(true)));
    let handle = session.interrupt_handle();
    // Registered in this order, the handlers run in this order: when idle the default action
    // ends the process before the interrupt is asked for.
    let registered = signal_hook::flag::register_conditional_default(signal_hook::consts::SIGINT, Arc::clone(idle))
        .and_then(|_| {
            // SAFETY: the action only stores to an atomic flag, which is async-signal-safe.
            unsafe { signal_hook::low_level::register(signal_hook::consts::SIGINT, move || handle.interrupt()) }
        });
    if let Err(error) = registered {
        eprintln!("quasi: Ctrl-C will end the process, not the cell: {error}");
    }
}

/// Runs `work` as a cell: SIGINT interrupts it instead of ending the process.
fn as_cell<T>(work: impl FnOnce() -> T) -> T {
    let idle = IDLE.get();
    idle.inspect(|idle| idle.store(false, Ordering::SeqCst));
    let result = work();
    idle.inspect(|idle| idle.store(true, Ordering::SeqCst));
    result
}

/// Colour only for a terminal, and never when the user asked for none (no-color.org).
fn terminal_style(stream_is_terminal: bool) -> Style {
    let no_color = std::env::var_os("NO_COLOR").is_some_and(|value| !value.is_empty());
    if stream_is_terminal && !no_color {
        Style::Color
    } else {
        Style::Plain
    }
}

/// The configuration of `quasi run`'s session.
fn run_config(opt: Option<u8>) -> SessionConfig {
    // Not captured: a script's output goes straight to stdout, as a compiled program's would.
    // Full speed unless asked otherwise: nobody waits for a prompt (a tiny program compiles as
    // fast at O3; a loop-heavy one runs many times faster).
    SessionConfig { opt_level: opt.unwrap_or(quasi_lang::BATCH_OPT_LEVEL), ..session_config(false) }
}

/// `quasi run`'s arguments (those after `run`) in a `quasi server` worker, with the session it
/// prepared (made by `run_config(None)`).
fn run_prepared(session: Session, arguments: Vec<OsString>) -> i32 {
    match parse_arguments(std::iter::once(OsString::from("run")).chain(arguments).collect()) {
        Ok(Invocation::Run(options)) => run_with(Some(session), &options),
        Ok(_) => unreachable!("`run` parses as a run or not at all"),
        Err(message) => {
            eprintln!("quasi: {message}\n{USAGE}");
            2
        }
    }
}

/// A `quasi server`'s compile of a program its user saved (`server/saved.rs`): `quasi run`'s
/// arguments, read as `run_prepared` reads them, and the session it prepared. The program is
/// compiled as its run would compile it, into the object cache; nothing runs.
fn compile_prepared(mut session: Session, arguments: Vec<OsString>) {
    let parsed = parse_arguments(std::iter::once(OsString::from("run")).chain(arguments).collect());
    let Ok(Invocation::Run(options)) = parsed else { return };
    let Ok(text) = quasi_lang::read_source(&options.file) else { return };
    set_for_file(&mut session, options.opt);
    session.compile_file(&options.file, text);
    std::mem::forget(session);
}

/// What a file's run (and a server's compile of it, which must make the very same module) sets
/// on its session: `--opt`, else short runs at level 0; the object cache, read from the
/// environment now (a server's worker or compiler has just taken the launcher's).
fn set_for_file(session: &mut Session, opt: Option<u8>) {
    if let Some(level) = opt {
        session.set_opt_level(level);
    }
    session.set_quick_short_runs(opt.is_none());
    session.set_object_cache(ObjectCache::from_environment());
    session.set_tune_cache(TuneCache::from_environment());
}

/// Runs a file. `prepared`: a session made ahead at the batch level (`--opt` sets another); it
/// is never dropped (the process ends with the run, and sooner without it).
fn run_with(prepared: Option<Session>, options: &RunOptions) -> i32 {
    let RunOptions { warnings, opt, timeout, file: path, args } = options;
    let (warnings, opt) = (*warnings, *opt);
    let text = match quasi_lang::read_source(path) {
        Ok(text) => text,
        Err(error) => {
            eprintln!("error[{}]: {}", error.kind.code(), error.message);
            return 1;
        }
    };
    let from_server = prepared.is_some();
    let mut session = match prepared.map_or_else(|| Session::new(run_config(opt)), Ok) {
        Ok(session) => session,
        Err(error) => {
            eprintln!("quasi: cannot start a session: {error}");
            return 1;
        }
    };
    set_for_file(&mut session, opt);
    watch_interrupts(&session);
    let watchdog = timeout.map(|limit| Watchdog::start(session.interrupt_handle(), limit));
    let (outcome, mut status) = as_cell(|| session.run_file(path, text, args));
    let timed_out = watchdog.is_some_and(Watchdog::stop);
    let style = terminal_style(std::io::stderr().is_terminal());
    for diagnostic in outcome.diagnostics.iter().filter(|diagnostic| warnings || diagnostic.is_error()) {
        eprint!("{}", quasi_repl::render_diagnostic(diagnostic, &outcome, style));
    }
    if let (true, Some(limit)) = (timed_out, timeout) {
        eprintln!("quasi: the run took longer than --timeout {} s and was stopped", limit.as_secs_f64());
        // As timeout(1) ends.
        status = 124;
    }
    if from_server {
        std::mem::forget(session);
    }
    status
}

/// Reads cells from stdin without prompts: a cell ends at the end of a line where every
/// list is closed, as in the interactive REPL. The output is exactly `render`'s text, which
/// transcripts and the docs rely on.
fn piped() -> i32 {
    // Before any cell runs: a cell redirects fds 1 and 2 while its code runs.
    terminal_streams();
    let mut session = new_session();
    let mut recording = Recording::default();
    let mut pending = String::new();
    let mut input = std::io::stdin().lock();
    let mut line_number = 0;
    loop {
        let mut bytes = Vec::new();
        match input.read_until(b'\n', &mut bytes) {
            Ok(0) => break,
            Ok(_) => line_number += 1,
            Err(error) => {
                eprintln!("quasi: cannot read the input: {error}");
                return 1;
            }
        }
        let line = match String::from_utf8(bytes) {
            Ok(line) => line.trim_end_matches('\n').trim_end_matches('\r').to_string(),
            // A cell cannot be read past bytes that are not text: it is dropped, saying so, and
            // the next cells run.
            Err(error) => {
                let (column, byte) =
                    (error.utf8_error().valid_up_to(), error.as_bytes()[error.utf8_error().valid_up_to()]);
                let outcome = not_utf8(line_number, column + 1, byte, !pending.is_empty());
                pending.clear();
                Shown::new(Style::Plain, false).update(&outcome);
                continue;
            }
        };
        if pending.is_empty() && line.trim().is_empty() {
            continue;
        }
        pending.push_str(&line);
        pending.push('\n');
        if let Completeness::Incomplete { .. } = completeness(&pending) {
            continue;
        }
        let outcome = run_cell(&mut session, &mut recording, pending.trim_end(), Shown::new(Style::Plain, false));
        pending.clear();
        if outcome.quit {
            return 0;
        }
    }
    if !pending.trim().is_empty() {
        run_cell(&mut session, &mut recording, pending.trim_end(), Shown::new(Style::Plain, false));
    }
    0
}

/// The outcome that reports a line of piped input that is not UTF-8.
fn not_utf8(line: usize, column: usize, byte: u8, inside_a_cell: bool) -> Outcome {
    let dropped = if inside_a_cell { "the cell it continues is dropped" } else { "the line is dropped" };
    Outcome {
        diagnostics: vec![Diagnostic {
            severity: Severity::Error,
            kind: Kind::Syntax,
            message: format!("line {line} of the input is not UTF-8 (byte 0x{byte:02x} at column {column})"),
            labels: Vec::new(),
            notes: vec![format!("{dropped}; the cells after it run")],
        }],
        ..Outcome::default()
    }
}

// ---------------------------------------------------------------------------------------
// The interactive REPL.

const PROMPT: &str = "> ";
/// Drawn at the start of every line after the first of a cell.
const CONTINUATION_PROMPT: &str = ". ";
/// What stands in the buffer under the continuation prompt. rustyline has no continuation
/// prompt and lays lines out from the buffer's own text, so the prompt must occupy columns
/// of the buffer: Enter inserts this margin, the highlighter draws the prompt over it and
/// `cell_text` removes it again. Its width is the prompt's.
const MARGIN: &str = "  ";
/// Indentation per open list when Enter continues a cell.
const INDENT: &str = "  ";

fn interactive() -> i32 {
    // Before any cell runs: a cell redirects fds 1 and 2 while its code runs.
    terminal_streams();
    let session = Rc::new(RefCell::new(new_session()));
    let pending_paste = paste::PendingPastes::default();
    let mut editor = match new_editor(Rc::clone(&session), &pending_paste) {
        Ok(editor) => editor,
        Err(error) => {
            eprintln!("quasi: cannot set up the line editor: {error}");
            return 1;
        }
    };
    let mut history = HistoryFile::new(history_path());
    history.load(&mut editor);
    let style = terminal_style(std::io::stdout().is_terminal());
    let mut recording = Recording::default();
    print_line(&format!("Quasi {} — C-Lisp on LLVM ORC. :help for help, Ctrl-D to quit.", env!("CARGO_PKG_VERSION")));
    loop {
        *paste::lock(&pending_paste) = paste::Pastes::default();
        let buffer = match editor.readline(PROMPT) {
            // Pasted lines get their margins, so that `cell_text` keeps their indentation.
            Ok(buffer) => paste::lock(&pending_paste).with_margins(&buffer),
            // Ctrl-C drops the cell being typed, not the session.
            Err(ReadlineError::Interrupted) => continue,
            Err(ReadlineError::Eof) => return 0,
            Err(error) => {
                eprintln!("quasi: cannot read input: {error}");
                return 1;
            }
        };
        let cell = cell_text(&buffer);
        if cell.trim().is_empty() {
            continue;
        }
        // Recorded before running, so a cell that brings the process down is still recalled.
        history.record(&mut editor, &buffer);
        // A pasted transcript runs cell by cell, each shown with its prompt, up to a failure.
        let pasted = quasi_repl::transcript::pasted_cells(&cell);
        for cell in pasted.as_deref().unwrap_or(std::slice::from_ref(&cell)) {
            if pasted.is_some() {
                print_line(&quasi_repl::transcript::format_input(cell));
            }
            let outcome = run_cell(&mut session.borrow_mut(), &mut recording, cell.trim_end(), Shown::new(style, true));
            if outcome.quit {
                return 0;
            }
            if outcome.failed() {
                break;
            }
        }
    }
}

fn new_editor(
    session: Rc<RefCell<Session>>,
    pending_paste: &paste::PendingPastes,
) -> rustyline::Result<Editor<CellHelper, DefaultHistory>> {
    let config = Config::builder()
        .max_history_size(10_000)?
        .history_ignore_dups(true)?
        .auto_add_history(false)
        .completion_type(CompletionType::List)
        // The highlighter draws the continuation prompt, so it must run even under NO_COLOR;
        // it adds no colour of its own.
        .color_mode(ColorMode::Forced)
        .build();
    let mut editor = Editor::with_config(config)?;
    editor.set_helper(Some(CellHelper { session, pastes: Arc::clone(pending_paste) }));
    for key in [KeyEvent(KeyCode::Enter, Modifiers::NONE), KeyEvent::ctrl('J')] {
        editor.bind_sequence(key, EventHandler::Conditional(Box::new(ContinueCell(Arc::clone(pending_paste)))));
    }
    editor.bind_sequence(
        KeyEvent(KeyCode::BracketedPasteStart, Modifiers::NONE),
        EventHandler::Conditional(Box::new(paste::PasteStarts(Arc::clone(pending_paste)))),
    );
    Ok(editor)
}

/// Runs a cell, showing it as it runs, and records it for `:save`.
fn run_cell(session: &mut Session, recording: &mut Recording, cell: &str, shown: Shown) -> Outcome {
    let mut shown = shown;
    let mut outcome = as_cell(|| session.eval_streaming(cell, &mut |partial| shown.update(partial)));
    record_or_save(recording, cell, &mut outcome);
    shown.update(&outcome);
    shown.finish();
    outcome
}

fn write_flushed(stream: &mut dyn Write, text: &str) -> std::io::Result<()> {
    stream.write_all(text.as_bytes())?;
    stream.flush()
}

/// The terminal's stdout and stderr as they were when `quasi` started. While compiled code runs,
/// the session redirects file descriptors 1 and 2 into its capture files (process-wide), and what
/// is shown meanwhile must not land there: it goes to these duplicates instead. Taken first
/// thing, before any cell can redirect the descriptors.
fn terminal_streams() -> &'static (std::fs::File, std::fs::File) {
    use std::os::fd::AsFd;
    static STREAMS: std::sync::OnceLock<(std::fs::File, std::fs::File)> = std::sync::OnceLock::new();
    STREAMS.get_or_init(|| {
        let duplicate = |fd: std::os::fd::BorrowedFd<'_>| {
            fd.try_clone_to_owned().map(std::fs::File::from).unwrap_or_else(|error| {
                eprintln!("quasi: cannot duplicate the terminal's streams: {error}");
                std::process::exit(1)
            })
        };
        (duplicate(std::io::stdout().as_fd()), duplicate(std::io::stderr().as_fd()))
    })
}

/// The cell an edit buffer holds: its text after the prompts, without the margins that
/// stand under continuation prompts.
fn cell_text(buffer: &str) -> String {
    let mut lines = buffer.split('\n');
    let mut cell = lines.next().unwrap_or_default().to_string();
    for line in lines {
        cell.push('\n');
        cell.push_str(line.strip_prefix(MARGIN).unwrap_or(line));
    }
    cell
}

/// The buffer as the terminal shows it: the continuation prompt over each margin that
/// `cell_text` removes, so what is shown after the prompts is exactly the cell.
fn draw_continuation_prompts(buffer: &str) -> Cow<'_, str> {
    if !buffer.contains('\n') {
        return Cow::Borrowed(buffer);
    }
    let mut lines = buffer.split('\n');
    let mut drawn = lines.next().unwrap_or_default().to_string();
    for line in lines {
        drawn.push('\n');
        match line.strip_prefix(MARGIN) {
            Some(rest) => {
                drawn.push_str(CONTINUATION_PROMPT);
                drawn.push_str(rest);
            }
            None => drawn.push_str(line),
        }
    }
    Cow::Owned(drawn)
}

/// Whether the cell must go on: the session's reader decides (`completeness`). A cell that
/// can never become valid is submitted anyway, so that the session reports it with a caret.
fn cell_continues(buffer: &str) -> bool {
    let text = cell_text(buffer);
    // A pasted transcript is whole when its last cell is: what its cells printed is not C-Lisp.
    let pasted = quasi_repl::transcript::pasted_cells(&text);
    let last = pasted.as_ref().map_or(Some(&text), |cells| cells.last());
    last.is_some_and(|cell| matches!(completeness(cell), Completeness::Incomplete { .. }))
}

/// The line editor's view of the session: completion, validation, continuation prompts.
struct CellHelper {
    // Shared with the read loop, which borrows it mutably only between two `readline`s.
    session: Rc<RefCell<Session>>,
    /// The cell's pastes: the validator judges the cell with their margins, as it will be run.
    pastes: paste::PendingPastes,
}

impl Helper for CellHelper {}

impl Completer for CellHelper {
    type Candidate = String;

    fn complete(&self, line: &str, pos: usize, _: &Context<'_>) -> rustyline::Result<(usize, Vec<String>)> {
        match self.session.try_borrow() {
            Ok(session) => Ok(session.completions(line, pos)),
            Err(_) => Ok((pos, Vec::new())),
        }
    }
}

impl Hinter for CellHelper {
    type Hint = String;
}

impl Highlighter for CellHelper {
    fn highlight<'l>(&self, line: &'l str, _pos: usize) -> Cow<'l, str> {
        draw_continuation_prompts(line)
    }

    // A character typed into a margin changes whether its prompt is drawn, which rustyline's
    // shortcut for plain typing would not repaint.
    fn highlight_char(&self, line: &str, pos: usize, _kind: CmdKind) -> bool {
        let before = line.get(..pos).unwrap_or(line);
        before.rfind('\n').is_some_and(|newline| before.len() - newline <= MARGIN.len() + 1)
    }
}

impl Validator for CellHelper {
    fn validate(&self, context: &mut ValidationContext<'_>) -> rustyline::Result<ValidationResult> {
        let cell = paste::lock(&self.pastes).with_margins(context.input());
        Ok(if cell_continues(&cell) { ValidationResult::Incomplete } else { ValidationResult::Valid(None) })
    }
}

/// Enter on a cell that goes on: where the validator alone would make rustyline insert a bare
/// newline, insert the newline with the margin for the continuation prompt and an indentation
/// for the lists still open before the cursor. Otherwise rustyline's own Enter runs, and with
/// it the validator. A paste before it is settled first (`paste`): the newline typed now is
/// not one it brought.
struct ContinueCell(paste::PendingPastes);

impl ConditionalEventHandler for ContinueCell {
    fn handle(&self, _: &Event, _: RepeatCount, _: bool, context: &EventContext<'_>) -> Option<Cmd> {
        let buffer = context.line();
        let mut pastes = paste::lock(&self.0);
        if !cell_continues(&pastes.with_margins(buffer)) {
            return None;
        }
        pastes.settle(buffer);
        // Spaces do not change how many lists are open: the margins make no difference here.
        let before = buffer.get(..context.pos()).unwrap_or(buffer);
        let depth = match completeness(&cell_text(before)) {
            Completeness::Incomplete { depth } => depth,
            Completeness::Complete | Completeness::Invalid => 0,
        };
        Some(Cmd::Insert(1, format!("\n{MARGIN}{}", INDENT.repeat(depth))))
    }
}

/// Where history is kept: `QUASI_HISTORY`, else `$XDG_STATE_HOME/quasi/history`, else
/// `~/.local/state/quasi/history`.
fn history_path() -> Option<PathBuf> {
    let set = |name: &str| std::env::var_os(name).filter(|value| !value.is_empty()).map(PathBuf::from);
    if let Some(path) = set("QUASI_HISTORY") {
        return Some(path);
    }
    // The XDG spec says relative paths in these variables are to be ignored.
    let state_home = set("XDG_STATE_HOME")
        .filter(|path| path.is_absolute())
        .or_else(|| set("HOME").map(|home| home.join(".local/state")))?;
    Some(state_home.join("quasi/history"))
}

/// The persistent history. Nothing about it is fatal: a history that cannot be read or
/// written is a warning, once, and the session goes on with history in memory.
struct HistoryFile {
    path: Option<PathBuf>,
    directory_ready: bool,
    warned: bool,
}

impl HistoryFile {
    fn new(path: Option<PathBuf>) -> HistoryFile {
        HistoryFile { path, directory_ready: false, warned: false }
    }

    fn load(&mut self, editor: &mut Editor<CellHelper, DefaultHistory>) {
        let Some(path) = self.path.clone() else { return };
        match editor.load_history(&path) {
            Ok(()) => {}
            // No history yet is the normal first run.
            Err(ReadlineError::Io(error)) if error.kind() == std::io::ErrorKind::NotFound => {}
            Err(error) => self.warn(format!("cannot read history from {}: {error}", path.display())),
        }
    }

    /// Adds a cell and appends it to the file at once, so that concurrent sessions and a
    /// session that dies keep what was typed.
    fn record(&mut self, editor: &mut Editor<CellHelper, DefaultHistory>, buffer: &str) {
        let _ = editor.add_history_entry(buffer);
        let Some(path) = self.path.clone() else { return };
        if !self.directory_ready {
            if let Some(directory) = path.parent().filter(|directory| !directory.as_os_str().is_empty()) {
                if let Err(error) = std::fs::create_dir_all(directory) {
                    return self.warn(format!("cannot create {}: {error}", directory.display()));
                }
            }
            self.directory_ready = true;
        }
        if let Err(error) = editor.append_history(&path) {
            self.warn(format!("cannot save history to {}: {error}", path.display()));
        }
    }

    fn warn(&mut self, message: String) {
        if !self.warned {
            eprintln!("quasi: warning: {message} (history is kept for this session only)");
            self.warned = true;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn arguments(words: &[&str]) -> Result<Invocation, String> {
        parse_arguments(words.iter().map(OsString::from).collect())
    }

    #[test]
    fn command_lines() {
        assert_eq!(arguments(&[]), Ok(Invocation::Repl));
        assert_eq!(arguments(&["--version"]), Ok(Invocation::Version));
        assert_eq!(arguments(&["-h"]), Ok(Invocation::Help));
        assert_eq!(arguments(&["cache"]), Ok(Invocation::Cache { clear: false }));
        assert_eq!(arguments(&["cache", "clear"]), Ok(Invocation::Cache { clear: true }));
        assert!(arguments(&["cache", "purge"]).is_err());
        assert_eq!(
            arguments(&["run", "f.cl", "-x", "y"]),
            Ok(Invocation::Run(RunOptions {
                file: "f.cl".into(),
                args: vec!["-x".into(), "y".into()],
                ..RunOptions::default()
            }))
        );
        assert_eq!(
            arguments(&["run", "--warnings", "f.cl"]),
            Ok(Invocation::Run(RunOptions { warnings: true, file: "f.cl".into(), ..RunOptions::default() }))
        );
        assert_eq!(
            arguments(&["run", "--opt", "3", "--warnings", "f.cl", "--opt", "0"]),
            Ok(Invocation::Run(RunOptions {
                warnings: true,
                opt: Some(3),
                file: "f.cl".into(),
                args: vec!["--opt".into(), "0".into()],
                ..RunOptions::default()
            }))
        );
        assert_eq!(
            arguments(&["run", "--timeout", "1.5", "f.cl"]),
            Ok(Invocation::Run(RunOptions {
                timeout: Some(std::time::Duration::from_millis(1500)),
                file: "f.cl".into(),
                ..RunOptions::default()
            }))
        );
        for bad in
            [&["run", "--timeout", "0", "f.cl"][..], &["run", "--timeout", "soon", "f.cl"], &["run", "--timeout"]]
        {
            assert!(arguments(bad).is_err(), "{bad:?}");
        }
        assert!(arguments(&["run", "--opt", "4", "f.cl"]).is_err());
        assert!(arguments(&["run", "--opt"]).is_err());
        assert!(arguments(&["--frobnicate"]).is_err());
        assert!(arguments(&["run"]).is_err());
        assert!(arguments(&["run", "--frobnicate", "f.cl"]).is_err());
        assert!(arguments(&["f.cl"]).is_err());
    }

    #[test]
    fn the_gpu_option_comes_first_or_after_run() {
        let take = |words: &[&str]| {
            let mut words: Vec<OsString> = words.iter().map(OsString::from).collect();
            take_gpu_option(&mut words).map(|mode| (mode, words))
        };
        let rest = |words: &[&str]| words.iter().map(OsString::from).collect::<Vec<_>>();
        assert_eq!(take(&["--gpu", "sim"]), Ok((Some(quasi_lang::GpuMode::Sim { check: true }), rest(&[]))));
        assert_eq!(
            take(&["run", "--gpu", "sim-unchecked", "f.cl"]),
            Ok((Some(quasi_lang::GpuMode::Sim { check: false }), rest(&["run", "f.cl"])))
        );
        assert_eq!(
            take(&["--gpu", "device", "run", "f.cl"]),
            Ok((Some(quasi_lang::GpuMode::Device), rest(&["run", "f.cl"])))
        );
        assert_eq!(take(&["run", "f.cl"]), Ok((None, rest(&["run", "f.cl"]))));
        assert!(take(&["--gpu", "fast"]).is_err());
        assert!(take(&["--gpu"]).is_err());
    }

    #[test]
    fn margins_are_drawn_as_prompts_and_left_out_of_the_cell() {
        let buffer = "(define ((f int))\n    (ret 1))";
        assert_eq!(draw_continuation_prompts(buffer), "(define ((f int))\n.   (ret 1))");
        assert_eq!(cell_text(buffer), "(define ((f int))\n  (ret 1))");
        // A line whose margin was deleted shows no prompt and loses nothing.
        assert_eq!(draw_continuation_prompts("(f\n x)"), "(f\n x)");
        assert_eq!(cell_text("(f\n x)"), "(f\n x)");
        assert_eq!(draw_continuation_prompts("(f 1)"), "(f 1)");
    }

    #[test]
    fn the_reader_decides_when_a_cell_goes_on() {
        assert!(cell_continues("(define ((f int))"));
        assert!(!cell_continues("(add 1 2)"));
        // Never valid: submitted, so the session can point at the stray parenthesis.
        assert!(!cell_continues("(add 1 2))"));
        assert!(!cell_continues(":help"));
    }
}
