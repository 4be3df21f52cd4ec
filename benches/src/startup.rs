//! Start-up: spawning the release `quasi` until its first value comes back, and
//! `Session::new` in this process.

use std::ffi::OsStr;
use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use comfy_table::Table;
use quasi_lang::{Item, Session, SessionConfig};

use crate::stats::{ms, Samples};
use crate::{new_table, Options};

const FIRST_CELL: &str = "(add 1 2)";
const FIRST_VALUE: &str = "3 : int";

pub fn run(options: &Options) -> Result<()> {
    println!("== Start-up: median of {} runs ==", options.runs);
    let mut table = new_table(&["measurement", "median ms", "p95 ms", "best ms", "n"], &[1, 2, 3, 4]);
    in_process(options, &mut table)?;
    let quasi = quasi_binary(options)?;
    match &quasi {
        Some(path) => {
            spawned(options, path, &mut table)?;
            tiny_programs(options, path, &mut table)?;
        }
        None => println!("(the `quasi` binary was not found next to quasi-bench: build it with `cargo build --release -p quasi-repl`, or pass --quasi PATH; spawned start-up skipped)"),
    }
    println!("{table}");
    if let Some(path) = quasi {
        println!(
            "`quasi`: {} (stdin and stdout piped: pipe mode, no prompt; the first value read back marks",
            path.display()
        );
        println!("the REPL as ready). Goal < 50 ms for start-up + first trivial cell.");
    }
    println!();
    Ok(())
}

fn in_process(options: &Options, table: &mut Table) -> Result<()> {
    // The first session of the process also initialises LLVM's native target; the first cell
    // of every session also creates the target machine for its level.
    let start = Instant::now();
    let mut session = Session::new(SessionConfig::default())?;
    let cold = start.elapsed();
    let start = Instant::now();
    first_cell(&mut session)?;
    let cold_cell = start.elapsed();
    drop(session);
    let (mut news, mut cells, mut drops) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..options.runs {
        let start = Instant::now();
        let mut session = Session::new(SessionConfig::default())?;
        news.push(start.elapsed());
        let start = Instant::now();
        first_cell(&mut session)?;
        cells.push(start.elapsed());
        let start = Instant::now();
        drop(session);
        drops.push(start.elapsed());
    }
    add_row(table, "Session::new, first in this process (LLVM target initialisation)", &Samples::new(vec![cold]));
    add_row(
        table,
        "first cell `(add 1 2)` of that session (creates the target machine)",
        &Samples::new(vec![cold_cell]),
    );
    add_row(table, "Session::new, later sessions", &Samples::new(news));
    add_row(table, "first cell `(add 1 2)` of a later session", &Samples::new(cells));
    add_row(table, "dropping a session (executor thread joined, JIT disposed)", &Samples::new(drops));
    Ok(())
}

fn first_cell(session: &mut Session) -> Result<()> {
    let outcome = session.eval(FIRST_CELL);
    let ok =
        !outcome.failed() && outcome.items.iter().any(|item| matches!(item, Item::Value { text, .. } if text == "3"));
    if !ok {
        bail!("`{FIRST_CELL}` did not give 3:\n{}", quasi_repl::render(&outcome, quasi_repl::Style::Plain));
    }
    Ok(())
}

pub(crate) fn quasi_binary(options: &Options) -> Result<Option<PathBuf>> {
    if let Some(path) = &options.quasi {
        if !path.is_file() {
            bail!("--quasi / QUASI_BIN: no file at {}", path.display());
        }
        return Ok(Some(path.clone()));
    }
    let this = std::env::current_exe().context("cannot find this executable's path")?;
    Ok(this.parent().map(|directory| directory.join("quasi")).filter(|path| path.is_file()))
}

fn spawned(options: &Options, quasi: &PathBuf, table: &mut Table) -> Result<()> {
    let (mut ready, mut bare) = (Vec::new(), Vec::new());
    for _ in 0..options.runs {
        ready.push(first_value(quasi)?);
        bare.push(start_and_exit(quasi)?);
    }
    add_row(
        table,
        "spawn `quasi`, send `(add 1 2)`, until `3 : int` is read back (start-up + first trivial cell)",
        &Samples::new(ready),
    );
    add_row(table, "spawn `quasi` with stdin at EOF, until it has exited", &Samples::new(bare));
    Ok(())
}

/// From spawning until the first value is read back; exit is not counted.
fn first_value(quasi: &PathBuf) -> Result<Duration> {
    let start = Instant::now();
    let mut child = Command::new(quasi)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("cannot start {}", quasi.display()))?;
    let mut stdin = child.stdin.take().context("no stdin pipe")?;
    // Written at once: the pipe buffers it until quasi reads, as a fast typist's input would.
    stdin.write_all(format!("{FIRST_CELL}\n").as_bytes()).context("cannot write to quasi")?;
    let mut reader = BufReader::new(child.stdout.take().context("no stdout pipe")?);
    let mut line = String::new();
    let mut seen = String::new();
    let elapsed = loop {
        line.clear();
        if reader.read_line(&mut line).context("cannot read quasi's output")? == 0 {
            drop(stdin);
            let output = child.wait_with_output().context("quasi did not exit")?;
            bail!(
                "quasi ended before printing `{FIRST_VALUE}`; stdout:\n{seen}stderr:\n{}",
                String::from_utf8_lossy(&output.stderr)
            );
        }
        if line.trim_end() == FIRST_VALUE {
            break start.elapsed();
        }
        seen.push_str(&line);
    };
    drop(stdin);
    child.wait().context("quasi did not exit")?;
    Ok(elapsed)
}

fn start_and_exit(quasi: &PathBuf) -> Result<Duration> {
    let start = Instant::now();
    let status = Command::new(quasi)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .with_context(|| format!("cannot start {}", quasi.display()))?;
    let elapsed = start.elapsed();
    if !status.success() {
        bail!("quasi with empty input exited with {status}");
    }
    Ok(elapsed)
}

/// A tiny program and its C twin: `quasi run` against `tcc -run` and a clang -O0 build and run.
const TINY_CLISP: &str = "(define ((printf int) (format (ptr int8)) ...))
(define ((main int))
  (declare i int)
  (declare sum int)
  (for ((set i 0) (lt i 100) (set i (add i 1))) (set sum (add sum i)))
  (call printf \"sum %d\\n\" sum)
  (ret 0))
";
/// The tiny program with its loop bounded by `argc` (1): nothing bounds its run in its text,
/// so `quasi run` compiles it at `:opt 3` (a tiny program whose loop bound is a constant is
/// compiled at 0: docs/language.md §5.5).
const ARGC_CLISP: &str = "(define ((printf int) (format (ptr int8)) ...))
(define ((main int) (argc int) (argv (ptr (ptr int8))))
  (declare i int)
  (declare sum int)
  (for ((set i 0) (lt i (mul argc 100)) (set i (add i 1))) (set sum (add sum i)))
  (call printf \"sum %d\\n\" sum)
  (ret 0))
";
const TINY_C: &str = "#include <stdio.h>
int main(void) { int sum = 0; for (int i = 0; i < 100; i++) sum += i; printf(\"sum %d\\n\", sum); return 0; }
";
const TINY_OUTPUT: &str = "sum 4950\n";

/// How long before its run the edited program is saved.
const SAVED_BEFORE: Duration = Duration::from_millis(100);

/// Wall time of `quasi run` of a tiny program, in process and handed to a `quasi server`, side
/// by side with its C twin run by `tcc -run` and built by `clang -O0` then run, interleaved run
/// by run; each output is checked. The server is the bench's own, in a runtime folder of its
/// own, stopped at the end.
fn tiny_programs(options: &Options, quasi: &std::path::Path, table: &mut Table) -> Result<()> {
    let directory = std::env::temp_dir().join(format!("quasi-bench-startup-{}", std::process::id()));
    std::fs::create_dir_all(&directory).context("cannot make a scratch directory")?;
    let runtime = directory.join("runtime");
    std::fs::create_dir_all(&runtime).context("cannot make a runtime directory")?;
    std::fs::set_permissions(&runtime, std::os::unix::fs::PermissionsExt::from_mode(0o700))
        .context("cannot make the runtime directory private")?;
    let (clisp, c, binary) = (directory.join("tiny.cl"), directory.join("tiny.c"), directory.join("tiny"));
    std::fs::write(&clisp, TINY_CLISP).context("cannot write tiny.cl")?;
    std::fs::write(&c, TINY_C).context("cannot write tiny.c")?;
    // The bench's own object cache: the first run of the tiny program fills it.
    let cache = directory.join("object-cache");
    let quasi_command = |arguments: &[&std::ffi::OsStr], server: bool, cached: bool| {
        let mut command = Command::new(quasi);
        command
            .args(arguments)
            .env("XDG_RUNTIME_DIR", &runtime)
            .env("QUASI_SERVER", if server { "1" } else { "0" })
            .env("QUASI_CACHE", if cached { cache.as_os_str() } else { OsStr::new("off") });
        command
    };
    let started = quasi_command(&["server".as_ref(), "start".as_ref(), "--idle".as_ref(), "5".as_ref()], true, true)
        .output()
        .context("cannot run `quasi server start`")?;
    if !started.status.success() {
        bail!("`quasi server start` failed: {}", String::from_utf8_lossy(&started.stderr));
    }
    let edited = directory.join("edited.cl");
    let argc = directory.join("argc.cl");
    std::fs::write(&argc, ARGC_CLISP).context("cannot write argc.cl")?;
    let programs = Programs { tiny: &clisp, edited: &edited, argc: &argc };
    let result = tiny_rows(options, &quasi_command, &programs, &c, &binary, table);
    let _ = quasi_command(&["server".as_ref(), "stop".as_ref()], true, true).output();
    let _ = std::fs::remove_dir_all(&directory);
    result
}

/// The C-Lisp programs of the start-up rows.
struct Programs<'p> {
    tiny: &'p std::path::Path,
    edited: &'p std::path::Path,
    argc: &'p std::path::Path,
}

fn tiny_rows(
    options: &Options,
    quasi: &dyn Fn(&[&std::ffi::OsStr], bool, bool) -> Command,
    programs: &Programs<'_>,
    c: &std::path::Path,
    binary: &std::path::Path,
    table: &mut Table,
) -> Result<()> {
    let timed = |mut command: Command, checked: bool| -> Result<Option<Duration>> {
        let start = Instant::now();
        let output = match command.stdin(Stdio::null()).output() {
            Ok(output) => output,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(error) => return Err(error).with_context(|| format!("cannot run {command:?}")),
        };
        let elapsed = start.elapsed();
        if !output.status.success() {
            bail!("{command:?} failed: {}", String::from_utf8_lossy(&output.stderr));
        }
        Ok(Some(elapsed).filter(|_| !checked || output.stdout == TINY_OUTPUT.as_bytes()))
    };
    let command = |program: &std::ffi::OsStr, arguments: &[&std::ffi::OsStr]| {
        let mut command = Command::new(program);
        command.args(arguments);
        command
    };
    let (clisp, edited) = (programs.tiny, programs.edited);
    let run = ["run".as_ref(), clisp.as_os_str()];
    let run_argc = ["run".as_ref(), programs.argc.as_os_str()];
    let (mut alone, mut alone_cold, mut served, mut served_cold) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let (mut tcc, mut clang, mut served_quick) = (Vec::new(), Vec::new(), Vec::new());
    let (mut served_saved, mut tcc_paused, mut served_argc) = (Vec::new(), Vec::new(), Vec::new());
    let quick = ["run".as_ref(), "--opt".as_ref(), "1".as_ref(), clisp.as_os_str()];
    // The tiny program with one more function, whose value each edit changes: the same output,
    // other code.
    let edit = |version: usize| {
        std::fs::write(edited, format!("{TINY_CLISP}(define ((edition int)) (ret {version}))\n"))
            .context("cannot write edited.cl")
    };
    let run_edited = ["run".as_ref(), edited.as_os_str()];
    // The first run fills the object cache; the rows with it measure the program run again.
    timed(quasi(&run, false, true), true)?;
    // The server ran the edited program once: it watches it from now on.
    edit(0)?;
    timed(quasi(&run_edited, true, true), true)?;
    for _ in 0..options.runs {
        // Each served run follows a run in process, not another served run: the spare a run
        // leaves behind gets the moment it needs to prepare (`quasi server`), as between
        // commands typed or started by a build; runs back to back are slower (see the README).
        alone.push(timed(quasi(&run, false, true), true)?);
        served.push(timed(quasi(&run, true, true), true)?);
        alone_cold.push(timed(quasi(&run, false, false), true)?);
        served_cold.push(timed(quasi(&run, true, false), true)?);
        served_argc.push(timed(quasi(&run_argc, true, false), true)?);
        tcc.push(timed(command("tcc".as_ref(), &["-run".as_ref(), c.as_os_str()]), true)?);
        let start = Instant::now();
        let build = [OsStr::new("-O0"), c.as_os_str(), OsStr::new("-o"), binary.as_os_str()];
        let built = timed(command(options.clang.as_ref(), &build), false)?;
        let ran = built.and_then(|_| timed(command(binary.as_os_str(), &[]), true).ok().flatten());
        clang.push(ran.map(|_| start.elapsed()));
        served_quick.push(timed(quasi(&quick, true, false), true)?);
        // An edit saved, then run a moment later (as a person switches to the terminal): the
        // server compiled it when it was saved.
        edit(served_saved.len() + 1)?;
        std::thread::sleep(SAVED_BEFORE);
        served_saved.push(timed(quasi(&run_edited, true, true), true)?);
        // Its C twin after the same pause: an idle machine is slower to start anything.
        std::thread::sleep(SAVED_BEFORE);
        tcc_paused.push(timed(command("tcc".as_ref(), &["-run".as_ref(), c.as_os_str()]), true)?);
    }
    let collect = |runs: Vec<Option<Duration>>| runs.into_iter().collect::<Option<Vec<Duration>>>().map(Samples::new);
    let printed = "`quasi run` of the tiny program did not print `sum 4950`";
    let alone = collect(alone).context(printed)?;
    let alone_cold = collect(alone_cold).context(printed)?;
    let served = collect(served).context(printed)?;
    let served_cold = collect(served_cold).context(printed)?;
    let served_quick = collect(served_quick).context(printed)?;
    let served_saved = collect(served_saved).context(printed)?;
    let served_argc = collect(served_argc).context(printed)?;
    add_row(table, "`quasi run tiny.cl` (a loop and a printf; exits after main), run before", &alone);
    add_row(table, "`quasi run tiny.cl`, object cache off (a program's first run)", &alone_cold);
    add_row(table, "`quasi run tiny.cl` with `quasi server` running, run before", &served);
    add_row(
        table,
        "`quasi run tiny.cl` with `quasi server`, object cache off (a short run: compiled at 0)",
        &served_cold,
    );
    add_row(
        table,
        "`quasi run argc.cl` (loop bound `argc`) with `quasi server`, object cache off (at 3)",
        &served_argc,
    );
    add_row(table, "`quasi run --opt 1 tiny.cl` with `quasi server`, object cache off", &served_quick);
    add_row(
        table,
        "`quasi run edited.cl` with `quasi server`, the program edited and saved 100 ms before",
        &served_saved,
    );
    match collect(tcc).zip(collect(tcc_paused)) {
        Some((tcc, tcc_paused)) => {
            add_row(table, "`tcc -run tiny.c`, its C twin", &tcc);
            add_row(table, "`tcc -run tiny.c`, 100 ms after the last command (as the edited run)", &tcc_paused);
            let ratio = |ours: &Samples| ours.median().as_secs_f64() / tcc.median().as_secs_f64().max(1e-12);
            let paused = served_saved.median().as_secs_f64() / tcc_paused.median().as_secs_f64().max(1e-12);
            println!(
                "`quasi run` / `tcc -run` of the tiny program, medians of {} interleaved runs: with `quasi server` \
                 {:.2} run before (goal <= 1.00), {:.2} edited and saved 100 ms before (against tcc after the same \
                 pause), {:.2} first run ({:.2} at --opt 1, {:.2} for argc.cl at 3); in process {:.2} run before, \
                 {:.2} first run",
                options.runs,
                ratio(&served),
                paused,
                ratio(&served_cold),
                ratio(&served_quick),
                ratio(&served_argc),
                ratio(&alone),
                ratio(&alone_cold)
            );
        }
        None => println!("(no `tcc` on PATH: `apt-get install tcc` for the `tcc -run` row)"),
    }
    if let Some(clang) = collect(clang) {
        add_row(table, &format!("`{} -O0 tiny.c -o tiny && ./tiny`", options.clang), &clang);
    }
    Ok(())
}

fn add_row(table: &mut Table, what: &str, samples: &Samples) {
    table.add_row(vec![
        what.to_string(),
        ms(samples.median()),
        ms(samples.percentile(95.0)),
        ms(samples.best()),
        samples.len().to_string(),
    ]);
}
