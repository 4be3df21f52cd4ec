//! The real `quasi` binary driven through pipes: the pipe mode, `quasi run`, and the flags.

mod common;

use std::io::{Read, Write};
use std::path::Path;
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// Long enough for a debug build on a busy two-core machine, short enough that a hang fails.
const TIMEOUT: Duration = Duration::from_secs(20);

/// What one run of `quasi` left behind.
struct Finished {
    status: ExitStatus,
    stdout: String,
    stderr: String,
}

/// Runs `quasi` with `arguments`, feeding it `input` (text, or bytes that need not be UTF-8) and
/// closing stdin; a run that outlives `TIMEOUT` is killed and fails the test.
fn quasi(arguments: &[&str], input: impl AsRef<[u8]>) -> Finished {
    // The tests' own object cache, kept between test runs (warm, as a user's is).
    let cache = Path::new(env!("CARGO_TARGET_TMPDIR")).join("object-cache");
    quasi_with(arguments, input, &[("QUASI_CACHE", cache.as_os_str())])
}

/// `quasi` (above) with environment variables of the test's choosing.
fn quasi_with(arguments: &[&str], input: impl AsRef<[u8]>, environment: &[(&str, &std::ffi::OsStr)]) -> Finished {
    let mut child = Command::new(env!("CARGO_BIN_EXE_quasi"))
        .args(arguments)
        // In process: a `quasi run` would otherwise start a server for the runs after it
        // (tests/server.rs tests that, in a runtime folder of its own).
        .env("QUASI_SERVER", "0")
        .envs(environment.iter().copied())
        .env("NO_COLOR", "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the quasi binary starts");
    let mut stdin = child.stdin.take().expect("stdin is piped");
    let input = input.as_ref().to_vec();
    // Written from a thread so that a child that stops reading cannot block the test.
    let writer = std::thread::spawn(move || {
        let _ = stdin.write_all(&input);
    });
    let stdout = drain(child.stdout.take().expect("stdout is piped"));
    let stderr = drain(child.stderr.take().expect("stderr is piped"));
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("waiting for quasi") {
            break status;
        }
        if started.elapsed() > TIMEOUT {
            let _ = child.kill();
            panic!("quasi {arguments:?} did not finish within {TIMEOUT:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let _ = writer.join();
    Finished { status, stdout: stdout.join().expect("stdout reader"), stderr: stderr.join().expect("stderr reader") }
}

fn drain(mut stream: impl Read + Send + 'static) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut bytes = Vec::new();
        let _ = stream.read_to_end(&mut bytes);
        String::from_utf8_lossy(&bytes).into_owned()
    })
}

fn write_file(directory: &Path, name: &str, text: &str) -> String {
    let path = directory.join(name);
    std::fs::write(&path, text).expect("writing a test file");
    path.to_string_lossy().into_owned()
}

#[test]
fn piped_cells_print_what_the_repl_prints() {
    let finished = quasi(&[], "(define ((sq int) (x int))\n  (ret (mul x x)))\n\n(call sq 7)\n");
    assert_eq!(finished.stdout, "sq : (int) -> int\n49 : int\n");
    assert_eq!(finished.stderr, "");
    assert!(finished.status.success());
}

#[test]
fn a_type_error_shows_its_caret_and_the_session_goes_on() {
    let finished = quasi(&[], "(add 1 1.5)\n(add 1 2)\n");
    assert!(finished.stdout.starts_with("error[type]: "), "{}", finished.stdout);
    assert!(finished.stdout.contains("1 | (add 1 1.5)\n  | ^^^^^^^^^^^\n"), "{}", finished.stdout);
    assert!(finished.stdout.ends_with("3 : int\n"), "{}", finished.stdout);
    assert!(finished.status.success());
}

#[test]
fn quit_stops_reading_cells() {
    let finished = quasi(&[], "(add 1 2)\n:quit\n(add 3 4)\n");
    assert_eq!(finished.stdout, "3 : int\n");
    assert!(finished.status.success());
}

#[test]
fn version_and_help() {
    let version = quasi(&["--version"], "");
    assert_eq!(version.stdout, format!("quasi {}\n", env!("CARGO_PKG_VERSION")));
    assert!(version.status.success());
    let help = quasi(&["--help"], "");
    for expected in
        ["usage: quasi", "run [--warnings] [--opt N] [--timeout SECONDS] FILE [ARG…]", "--version", "--help"]
    {
        assert!(help.stdout.contains(expected), "{expected:?} missing from:\n{}", help.stdout);
    }
    assert!(help.status.success());
}

/// A device, a directory or a pipe is refused at once, not read until memory runs out or for
/// ever (issue 31, item 4).
#[test]
fn run_refuses_what_is_not_a_regular_file() {
    let finished = quasi(&["run", "/dev/zero"], "");
    assert_eq!(finished.status.code(), Some(1));
    assert!(
        finished.stderr.starts_with("error[io]: cannot read `/dev/zero`: not a regular file"),
        "{}",
        finished.stderr
    );
    let finished = quasi(&["run", "/"], "");
    assert_eq!(finished.status.code(), Some(1));
    assert!(finished.stderr.contains("not a regular file"), "{}", finished.stderr);
    // A named pipe called like a transcript: `quasi test` would wait on it for ever.
    let directory = tempfile::tempdir().expect("a temporary directory");
    let pipe = directory.path().join("pipe.repl");
    let made = std::process::Command::new("mkfifo").arg(&pipe).status().expect("mkfifo runs");
    assert!(made.success());
    let finished = quasi(&["test", &pipe.to_string_lossy()], "");
    assert_eq!(finished.status.code(), Some(1));
    assert!(finished.stdout.contains("not a regular file"), "{}", finished.stdout);
}

/// Output to a closed pipe or a full device is dropped, as C's stdio drops it; the status is
/// still the run's (issue 31, item 10: `quasi run … 2>&1 | head` ended with a panic, 101).
#[test]
fn closed_and_full_streams_are_not_a_panic() {
    let directory = tempfile::tempdir().expect("a temporary directory");
    let program = directory.path().join("fault.cl");
    let text = "(define ((printf int) (f (ptr int8)) ...))\n\
                (define ((main int)) (call printf \"before\\n\") (ret (load (inttoptr 0 (ptr int)))))\n";
    std::fs::write(&program, text).expect("the program is written");
    let program = program.to_string_lossy().into_owned();
    for arguments in [vec!["run", &program], vec!["--help"], vec![]] {
        let full = std::fs::OpenOptions::new().write(true).open("/dev/full").expect("/dev/full");
        let (reader, writer) = std::io::pipe().expect("a pipe");
        // Nobody reads standard output: it is closed before the run starts.
        drop(reader);
        let status = Command::new(env!("CARGO_BIN_EXE_quasi"))
            .args(&arguments)
            .env("QUASI_SERVER", "0")
            .stdin(Stdio::from(std::fs::File::open("/dev/null").expect("/dev/null")))
            .stdout(Stdio::from(writer))
            .stderr(Stdio::from(full))
            .status()
            .expect("the quasi binary starts");
        // A fault's status; 0 for --help and for an empty session.
        let expected = if arguments.first() == Some(&"run") { 2 } else { 0 };
        assert_eq!(status.code(), Some(expected), "quasi {arguments:?}");
    }
}

#[test]
fn an_unknown_flag_is_a_usage_error() {
    let finished = quasi(&["--frobnicate"], "(add 1 2)\n");
    assert_eq!(finished.status.code(), Some(2));
    assert!(finished.stderr.contains("unknown option `--frobnicate`"), "{}", finished.stderr);
    assert_eq!(finished.stdout, "");
    assert_eq!(quasi(&["run"], "").status.code(), Some(2));
}

#[test]
fn run_prints_only_program_output_and_exits_with_mains_status() {
    let directory = tempfile::tempdir().expect("a temporary directory");
    let program = "(define ((printf int) (fmt (ptr int8)) ...))\n\
                   (define ((main int))\n  (call printf \"hello %d\\n\" 42)\n  (ret 3))\n";
    let file = write_file(directory.path(), "hello.cl", program);
    let finished = quasi(&["run", &file], "");
    assert_eq!(finished.stdout, "hello 42\n");
    assert_eq!(finished.stderr, "");
    assert_eq!(finished.status.code(), Some(3));
}

#[test]
fn run_passes_arguments_to_main() {
    let directory = tempfile::tempdir().expect("a temporary directory");
    let file = write_file(directory.path(), "argc.cl", "(define ((main int) (argc int)) (ret argc))\n");
    assert_eq!(quasi(&["run", &file, "one", "--two"], "").status.code(), Some(3));
}

/// `main` with `argv` sees the arguments, and its result is the exit status (it used to be lost:
/// the call sat inside a compound statement, which has no value).
#[test]
fn run_passes_argv_and_exits_with_mains_status() {
    let directory = tempfile::tempdir().expect("a temporary directory");
    let program = "(define ((puts int) (s (ptr int8))))\n\
                   (define ((main int) (argc int) (argv (ptr (ptr int8))))\n\
                   (call puts (load (ptradd argv 2)))\n\
                   (ret (add argc 40)))\n";
    let file = write_file(directory.path(), "argv.cl", program);
    let finished = quasi(&["run", &file, "one", "two"], "");
    assert_eq!(finished.stdout, "two\n");
    assert_eq!(finished.status.code(), Some(43));
}

#[test]
fn run_of_an_ill_typed_file_fails_before_running() {
    let directory = tempfile::tempdir().expect("a temporary directory");
    let program = "(define ((printf int) (fmt (ptr int8)) ...))\n\
                   (call printf \"never printed\\n\")\n\
                   (define ((main int)) (ret (add 1 1.5)))\n";
    let file = write_file(directory.path(), "bad.cl", program);
    let finished = quasi(&["run", &file], "");
    assert_eq!(finished.status.code(), Some(1));
    assert_eq!(finished.stdout, "");
    assert!(finished.stderr.contains("error[type]"), "{}", finished.stderr);
    assert!(finished.stderr.contains("bad.cl:3:"), "{}", finished.stderr);
}

/// A `main` that `quasi run` cannot call is an error before running (status 1) at `main`'s
/// definition, not a type error in the call quasi run would have written.
#[test]
fn run_of_a_main_it_cannot_call_fails_before_running() {
    let directory = tempfile::tempdir().expect("a temporary directory");
    for (name, main) in [
        ("float.cl", "(define ((main int) (x float)) (ret 0))"),
        ("three.cl", "(define ((main int) (a int) (b int) (c int)) (ret 0))"),
        ("argv.cl", "(define ((main int) (argc int) (argv int)) (ret 0))"),
        ("ret.cl", "(define ((main float)) (ret 1.0))"),
    ] {
        let file = write_file(
            directory.path(),
            name,
            &format!("(define ((puts int) (s (ptr int8))))\n(call puts \"top\")\n{main}\n"),
        );
        let finished = quasi(&["run", &file], "");
        assert_eq!(finished.status.code(), Some(1), "{name}: {}", finished.stderr);
        assert!(finished.stderr.contains("error[type]: `quasi run` cannot call `main`"), "{name}: {}", finished.stderr);
        assert!(finished.stderr.contains(&format!("{name}:3:1")), "{name}: {}", finished.stderr);
    }
}

/// A standalone Brilisp program, `(brilisp …)` as llama.lisp's Brilisp tests are written, runs
/// unchanged: its `main` runs and its result is the exit status; a type error stops it before it
/// runs, pointing into the file.
#[test]
fn run_of_a_brilisp_program() {
    let directory = tempfile::tempdir().expect("a temporary directory");
    let program = "(brilisp\n\
                   (define ((print int) (n int)))\n\
                   (define-global (base int) (const 40))\n\
                   (define ((main int))\n\
                   (set (b int) (load base))\n\
                   (set (sum int) (add b 2))\n\
                   (set (ignored void) (call print sum))\n\
                   (ret sum)))\n";
    let file = write_file(directory.path(), "answer.sexp", program);
    let finished = quasi(&["run", &file], "");
    assert_eq!(finished.stdout, "42\n");
    assert_eq!(finished.stderr, "");
    assert_eq!(finished.status.code(), Some(42));

    let bad =
        write_file(directory.path(), "bad.sexp", "(brilisp\n(define ((main int))\n(set (b int) base)\n(ret b)))\n");
    let finished = quasi(&["run", &bad], "");
    assert_eq!(finished.status.code(), Some(1));
    assert!(finished.stderr.contains("error[unknown-name]: no variable named `base`"), "{}", finished.stderr);
    assert!(finished.stderr.contains("bad.sexp:3:"), "{}", finished.stderr);
}

#[test]
fn run_takes_an_optimisation_level_and_prints_the_same_at_each() {
    let directory = tempfile::tempdir().expect("a temporary directory");
    let program = "(define ((printf int) (format (ptr int8)) ...))\n\
                   (define ((main int))\n\
                   (declare sum int64)\n\
                   (declare i int)\n\
                   (for ((set i 0) (lt i 1000) (set i (add i 1))) (set sum (add sum (sext (mul i i) int64))))\n\
                   (call printf \"%ld %.3f\\n\" sum (fdiv (sitofp sum double) (double 7.0)))\n\
                   (ret 3))\n";
    let file = write_file(directory.path(), "sum.cl", program);
    for arguments in [&["run", &file][..], &["run", "--opt", "0", &file], &["run", "--opt", "3", "--warnings", &file]] {
        let finished = quasi(arguments, "");
        assert_eq!(finished.stdout, "332833500 47547642.857\n", "{arguments:?}");
        assert_eq!(finished.status.code(), Some(3), "{arguments:?}");
    }
    let refused = quasi(&["run", "--opt", "9", &file], "");
    assert_eq!(refused.status.code(), Some(2));
    assert!(refused.stderr.contains("`--opt` takes a level 0, 1, 2 or 3, not `9`"), "{}", refused.stderr);
}

#[test]
fn run_of_a_missing_file_says_so() {
    let finished = quasi(&["run", "/nonexistent/quasi-test.cl"], "");
    assert_eq!(finished.status.code(), Some(1));
    assert!(finished.stderr.contains("cannot read `/nonexistent/quasi-test.cl`"), "{}", finished.stderr);
}

/// Program output streams while the cell runs: each `tick` reaches the pipe when it is printed
/// (C's stdout is flushed every few tens of milliseconds while compiled code runs), not when the
/// cell ends. The cell prints three ticks 700 ms apart, then its value.
#[test]
fn output_streams_while_the_cell_runs() {
    use std::io::BufRead;
    let (mut child, mut stdin) = common::quasi_reading_cells(&[]);
    let cells = "(define ((printf int) (fmt (ptr int8)) ...))\n(define ((usleep int) (us int)))\n\
                 (declare i int)\n(for ((set i 1) (le i 3) (set i (add i 1))) (call printf \"tick %d\\n\" i) (call usleep 700000))\n\
                 (add 40 2)\n";
    stdin.write_all(cells.as_bytes()).expect("cells written");
    drop(stdin);
    let started = Instant::now();
    let mut lines = Vec::new();
    for line in std::io::BufReader::new(child.stdout.take().expect("stdout is piped")).lines() {
        let line = line.expect("a line of output");
        lines.push((started.elapsed(), line));
    }
    assert!(child.wait().expect("quasi ends").success());
    let at = |wanted: &str| {
        lines
            .iter()
            .find(|(_, line)| line == wanted)
            .map(|(when, _)| *when)
            .unwrap_or_else(|| panic!("no `{wanted}` in {lines:?}"))
    };
    // Each tick is 700 ms after the one before; had output waited for the end of the cell, all
    // three would arrive together, after the last sleep.
    assert!(at("tick 2") >= at("tick 1") + Duration::from_millis(400), "{lines:?}");
    assert!(at("tick 3") >= at("tick 2") + Duration::from_millis(400), "{lines:?}");
    assert!(at("42 : int") >= at("tick 3"), "{lines:?}");
}

/// A line of piped input that is not UTF-8 is reported and dropped; the cells after it run (they
/// used to be dropped without a word).
#[test]
fn input_that_is_not_utf8_is_reported_and_the_next_cells_run() {
    let finished = quasi(&[], b"(add 1 2)\n(add 1 \xff)\n(add 3 4)\n");
    assert!(finished.status.success());
    assert_eq!(
        finished.stdout,
        "3 : int\nerror[syntax]: line 2 of the input is not UTF-8 (byte 0xff at column 8)\n = note: the line is dropped; the cells after it run\n\n7 : int\n"
    );
}

/// The first cell of a session may stream: what it prints still reaches the terminal (the
/// duplicates of the terminal's streams are taken before any cell redirects them).
#[test]
fn the_first_cell_streams_to_the_terminal() {
    // One line, one cell: it declares what it calls and loops with sleeps, so its output streams.
    let cells = "(define ((printf int) (fmt (ptr int8)) ...)) (define ((usleep int) (us int))) (declare k int) \
                 (for ((set k 1) (le k 2) (set k (add k 1))) (call printf \"tick %d\\n\" k) (call usleep 100000))\n\
                 (add 1 2)\n";
    let finished = quasi(&[], cells);
    assert!(finished.status.success(), "{}", finished.stderr);
    assert!(finished.stdout.ends_with("tick 1\ntick 2\n3 : int\n"), "{}", finished.stdout);
}

/// `exit` in a script ends `quasi run` as it ends a C program: quietly, with its status (the
/// interactive session only loses the cell).
#[test]
fn run_exits_with_the_status_the_program_passed_to_exit() {
    let directory = tempfile::tempdir().expect("a temporary directory");
    let program = "(define ((exit void) (status int)))\n(define ((printf int) (fmt (ptr int8)) ...))\n\
                   (define ((main int)) (call printf \"bye\\n\") (call exit 7) (ret 0))\n";
    let file = write_file(directory.path(), "leave.cl", program);
    let finished = quasi(&["run", &file], "");
    assert_eq!(finished.status.code(), Some(7), "{}", finished.stderr);
    assert_eq!(finished.stdout, "bye\n");
    assert_eq!(finished.stderr, "");
}

/// SIGINT stops a running script's compiled code: `error[interrupted]`, status 130.
#[test]
fn sigint_interrupts_run_with_status_130() {
    let directory = tempfile::tempdir().expect("a temporary directory");
    let file = write_file(directory.path(), "spin.cl", common::SPIN);
    let child =
        common::spinning(Command::new(env!("CARGO_BIN_EXE_quasi")).args(["run", &file]).env("QUASI_SERVER", "0"));
    let killed = Command::new("kill").args(["-INT", &child.id().to_string()]).status().expect("kill runs");
    assert!(killed.success());
    let output = child.wait_with_output().expect("quasi ends");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(130), "{stderr}");
    assert!(stderr.contains("error[interrupted]: interrupted in function `main`"), "{stderr}");
}

/// An interrupt that lands while compiled code is inside libc (malloc, free, printf holding
/// their locks) never cuts libc short: the cell stops as the call returns, and the process's
/// heap and stdio work afterwards.
#[test]
fn an_interrupt_inside_libc_leaves_the_heap_and_stdio_working() {
    use std::io::BufRead;
    let (mut child, mut stdin) = common::quasi_reading_cells(&[]);
    let cells = "(define ((printf int) (fmt (ptr int8)) ...))\n(define ((malloc (ptr int8)) (n int64)))\n\
                 (define ((free void) (p (ptr int8))))\n\
                 (define ((churn void)) (call printf \"churning\\n\") (while #t (call free (call malloc (int64 100))) (call printf \"\")))\n\
                 (call churn)\n";
    stdin.write_all(cells.as_bytes()).expect("cells written");
    let mut lines = std::io::BufReader::new(child.stdout.take().expect("stdout is piped")).lines();
    for line in lines.by_ref() {
        if line.expect("a line of output") == "churning" {
            break;
        }
    }
    std::thread::sleep(Duration::from_millis(300));
    let killed = Command::new("kill").args(["-INT", &child.id().to_string()]).status().expect("kill runs");
    assert!(killed.success());
    stdin
        .write_all(b"(call free (call malloc (int64 100000)))\n(call printf \"after %d\\n\" 42)\n")
        .expect("cells written");
    drop(stdin);
    let rest: Vec<String> = lines.map(|line| line.expect("a line of output")).collect();
    assert!(child.wait().expect("quasi ends").success());
    let rest = rest.join("\n");
    assert!(rest.contains("error[interrupted]: interrupted in function `churn`"), "{rest}");
    assert!(rest.contains("after 42\n9 : int"), "{rest}");
}

/// A library whose initialisers never return (a loop, a sleep) is stopped by Ctrl-C: its
/// initialisers run in a helper process, which the interrupt kills (issue 31, item 2: the REPL
/// hung, Ctrl-C ignored); the session goes on.
#[test]
fn an_interrupt_stops_a_library_that_never_loads() {
    let directory = tempfile::tempdir().expect("a temporary directory");
    let mut libraries = Vec::new();
    for (name, body) in [("spin", "for (;;) {}"), ("nap", "sleep(1000);")] {
        let source = write_file(
            directory.path(),
            &format!("{name}.c"),
            &format!("#include <unistd.h>\n__attribute__((constructor)) static void start(void) {{ {body} }}\n"),
        );
        let library = directory.path().join(format!("lib{name}.so"));
        let built = Command::new("clang-19")
            .args(["-shared", "-fPIC", "-o"])
            .arg(&library)
            .arg(&source)
            .status()
            .expect("clang-19 runs");
        assert!(built.success());
        libraries.push(library.to_string_lossy().into_owned());
    }
    let (child, mut stdin) = common::quasi_reading_cells(&[]);
    for library in &libraries {
        stdin.write_all(format!("(load-library \"{library}\")\n").as_bytes()).expect("a cell written");
        std::thread::sleep(Duration::from_millis(500));
        let killed = Command::new("kill").args(["-INT", &child.id().to_string()]).status().expect("kill runs");
        assert!(killed.success());
    }
    stdin.write_all(b"(add 1 2)\n").expect("a cell written");
    let output = common::output_at_end(child, stdin);
    for library in &libraries {
        assert!(
            output.contains(&format!("error[interrupted]: interrupted while loading library `{library}`")),
            "{output}"
        );
    }
    assert!(output.ends_with("3 : int\n"), "{output}");
}

/// The children of process `parent` that are helpers of job `job` (their environment says so).
fn helpers(parent: u32, job: &str) -> Vec<String> {
    let wanted = format!("QUASI_HELPER={job}");
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
        let ppid = stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse::<u32>().ok());
        let environment = std::fs::read(entry.path().join("environ")).unwrap_or_default();
        if ppid == Some(parent) && environment.split(|byte| *byte == 0).any(|variable| variable == wanted.as_bytes()) {
            found.push(entry.file_name().to_string_lossy().into_owned());
        }
    }
    found
}

/// Ctrl-C stops an include wherever it is: libclang's parse of a header that expands
/// exponentially (its helper process is killed, nothing parses on in the background), and the
/// compilation of 50,000 declarations (between its steps); the session goes on (issue 31, item
/// 3: the parse went on and killed the REPL later, and Ctrl-C was swallowed for 10 s).
#[test]
fn an_interrupt_stops_an_include() {
    use std::io::Read;
    let directory = tempfile::tempdir().expect("a temporary directory");
    let exponential = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/ffi/headers/exponential.h");
    let declarations: String = (0..50_000).map(|index| format!("int quasi_many_{index}(int a, double b);\n")).collect();
    let many = write_file(directory.path(), "many.h", &declarations);
    let (mut child, mut stdin) = common::quasi_reading_cells(&[]);
    for header in [exponential.to_string_lossy().into_owned(), many.clone()] {
        stdin.write_all(format!("(include \"{header}\")\n").as_bytes()).expect("a cell written");
        std::thread::sleep(Duration::from_millis(1500));
        let killed = Command::new("kill").args(["-INT", &child.id().to_string()]).status().expect("kill runs");
        assert!(killed.success());
    }
    stdin.write_all(b"(add 1 2)\n").expect("a cell written");
    let mut stdout = child.stdout.take().expect("stdout is piped");
    let mut output = Vec::new();
    let mut chunk = [0; 4096];
    while !output.ends_with(b"3 : int\n") {
        let count = stdout.read(&mut chunk).expect("the output");
        assert!(count > 0, "{}", String::from_utf8_lossy(&output));
        output.extend_from_slice(&chunk[..count]);
    }
    // The session has answered the next cell: nothing parses on in the background.
    assert_eq!(helpers(child.id(), "include"), Vec::<String>::new(), "a parse goes on after the interrupt");
    drop(stdin);
    assert!(child.wait().expect("quasi ends").success());
    let output = String::from_utf8_lossy(&output);
    assert!(output.contains("error[interrupted]: interrupted while libclang parsed"), "{output}");
    assert_eq!(output.matches("error[interrupted]: interrupted while").count(), 2, "{output}");
}

/// docs/language.md §4 at every level: a recursion that never ends overflows the stack at
/// `--opt 1` (a runtime fault) and is a loop at `--opt 3`, which `--timeout` stops (status 124,
/// as timeout(1)) instead of hanging (issue 31, item 5); a store through null faults at every
/// level.
#[test]
fn run_never_hangs_silently_and_faults_alike_at_every_level() {
    let directory = tempfile::tempdir().expect("a temporary directory");
    let endless = write_file(
        directory.path(),
        "endless.cl",
        "(define ((inf int) (n int)) (ret (add 1 (call inf (add n 1)))))\n(define ((main int)) (ret (call inf 0)))\n",
    );
    let overflow = quasi(&["run", "--opt", "1", &endless], "");
    assert_eq!(overflow.status.code(), Some(2), "{}", overflow.stderr);
    assert!(
        overflow.stderr.starts_with("error[runtime-fault]: stack overflow in function `inf`"),
        "{}",
        overflow.stderr
    );
    let stopped = quasi(&["run", "--opt", "3", "--timeout", "1", &endless], "");
    assert_eq!(stopped.status.code(), Some(124), "{}", stopped.stderr);
    assert!(stopped.stderr.starts_with("error[interrupted]: interrupted in function `"), "{}", stopped.stderr);
    assert!(
        stopped.stderr.ends_with("quasi: the run took longer than --timeout 1 s and was stopped\n"),
        "{}",
        stopped.stderr
    );
    // A run that ends in time is not touched by its timeout.
    let quick = write_file(directory.path(), "quick.cl", "(define ((main int)) (ret 5))\n");
    assert_eq!(quasi(&["run", "--timeout", "30", &quick], "").status.code(), Some(5));
    let null = write_file(
        directory.path(),
        "null.cl",
        "(declare g int)\n(define ((main int)) (set g 1) (store (inttoptr 0 (ptr int)) 7) (ret g))\n",
    );
    for level in ["0", "1", "2", "3"] {
        let faulted = quasi(&["run", "--opt", level, &null], "");
        assert_eq!(faulted.status.code(), Some(2), "--opt {level}: {}", faulted.stderr);
        assert!(
            faulted
                .stderr
                .starts_with("error[runtime-fault]: segmentation fault in function `main`: write to address 0x0"),
            "--opt {level}: {}",
            faulted.stderr
        );
    }
}

/// `quasi run` loads libraries and passes callbacks like a cell does (docs/language.md §9): a
/// file that loads libm, and sorts with libc's `qsort` through `(fn-ptr …)`.
#[test]
fn run_loads_libraries_and_passes_callbacks() {
    let directory = tempfile::tempdir().expect("a temporary directory");
    let program = "(load-library \"libm.so.6\")\n\
                   (define ((cbrt double) (x double)))\n\
                   (define ((printf int) (fmt (ptr int8)) ...))\n\
                   (define ((qsort void) (base (ptr int8)) (n int64) (size int64) (compare (ptr int8))))\n\
                   (define ((descending int) (a (ptr int)) (b (ptr int))) (ret (sub (load b) (load a))))\n\
                   (define ((main int))\n\
                   (declare xs (arr 3 int))\n\
                   (store (aptradd (ptr-to xs) 0) 1) (store (aptradd (ptr-to xs) 1) 3) (store (aptradd (ptr-to xs) 2) 2)\n\
                   (call qsort (bitcast (ptr-to xs) (ptr int8)) (int64 3) (int64 4) (fn-ptr descending))\n\
                   (call printf \"%d %d %d %.1f\\n\" (load (aptradd (ptr-to xs) 0)) (load (aptradd (ptr-to xs) 1))\n\
                   (load (aptradd (ptr-to xs) 2)) (call cbrt (double 8.0)))\n\
                   (ret 0))\n";
    let file = write_file(directory.path(), "ffi.cl", program);
    let finished = quasi(&["run", &file], "");
    assert_eq!(finished.stderr, "");
    assert_eq!(finished.stdout, "3 2 1 2.0\n");
    assert_eq!(finished.status.code(), Some(0));
}

#[test]
fn run_of_a_file_whose_library_does_not_load_fails_before_running() {
    let directory = tempfile::tempdir().expect("a temporary directory");
    let file = write_file(
        directory.path(),
        "nolib.cl",
        "(load-library \"libquasi-none.so\")\n(define ((main int)) (ret 5))\n",
    );
    let finished = quasi(&["run", &file], "");
    assert_eq!(finished.status.code(), Some(1));
    assert!(finished.stderr.contains("error[ffi]: cannot load library `libquasi-none.so`"), "{}", finished.stderr);
    assert!(finished.stderr.contains("nolib.cl:1:"), "{}", finished.stderr);
}

/// `quasi run` keeps compiled objects in its cache and links them when a program runs again.
/// The key is the code a program generates, not its text: a change in a C header it includes
/// is compiled again, never run stale; so is another `--opt`. A damaged entry is compiled
/// again; a folder others may write to is not used (a warning says so); `quasi cache` counts
/// the objects and `clear` removes them.
#[test]
fn run_keeps_objects_in_its_cache_and_never_runs_a_stale_one() {
    let directory = tempfile::tempdir().expect("a scratch folder");
    let cache = directory.path().join("cache");
    let environment = [("QUASI_CACHE", cache.as_os_str())];
    let header = write_file(directory.path(), "answer.h", "#define ANSWER 3\n");
    let program = write_file(
        directory.path(),
        "answer.cl",
        "(include \"stdio.h\" (functions printf))\n(include \"answer.h\" (typedefs ANSWER))\n\
         (define ((main int)) (call printf \"answer %d\\n\" ,ANSWER) (ret 0))\n",
    );
    let run = |arguments: &[&str], expected: &str| {
        let finished = quasi_with(arguments, "", &environment);
        assert!(finished.status.success(), "{arguments:?}: {}", finished.stderr);
        assert_eq!(finished.stdout, expected, "{arguments:?}: {}", finished.stderr);
        finished.stderr
    };
    let objects = || {
        let listed = quasi_with(&["cache"], "", &environment);
        assert!(listed.status.success(), "{}", listed.stderr);
        let prefix = format!("quasi cache: {}: ", cache.display());
        let rest = listed.stdout.strip_prefix(&prefix).unwrap_or_else(|| panic!("{}", listed.stdout));
        rest.split(' ').next().and_then(|count| count.parse::<usize>().ok()).expect("a count of objects")
    };
    run(&["run", &program], "answer 3\n");
    assert_eq!(objects(), 1);
    run(&["run", &program], "answer 3\n");
    assert_eq!(objects(), 1, "the second run linked the object the first stored");
    std::fs::write(&header, "#define ANSWER 4\n").expect("the header changed");
    run(&["run", &program], "answer 4\n");
    assert_eq!(objects(), 2);
    // (Without `--opt` this short program compiles at 0: level 2 is another.)
    run(&["run", "--opt", "2", &program], "answer 4\n");
    assert_eq!(objects(), 3);
    for entry in std::fs::read_dir(&cache).expect("the cache folder") {
        let path = entry.expect("an entry").path();
        let bytes = std::fs::read(&path).expect("an entry read");
        std::fs::write(&path, &bytes[..bytes.len() / 2]).expect("an entry damaged");
    }
    run(&["run", &program], "answer 4\n");
    let cleared = quasi_with(&["cache", "clear"], "", &environment);
    assert!(cleared.stdout.starts_with("quasi cache: removed 3 objects ("), "{}", cleared.stdout);
    assert_eq!(objects(), 0);
    // Off: nothing is kept.
    let off = quasi_with(&["run", &program], "", &[("QUASI_CACHE", "off".as_ref())]);
    assert_eq!(off.stdout, "answer 4\n");
    assert_eq!(objects(), 0);
    // A folder others may write to: not used, and `--warnings` says why.
    std::fs::set_permissions(&cache, std::os::unix::fs::PermissionsExt::from_mode(0o777)).expect("chmod");
    assert_eq!(run(&["run", &program], "answer 4\n"), "");
    let warned = run(&["run", "--warnings", &program], "answer 4\n");
    assert!(warned.contains("is not used: others may write to it"), "{warned}");
    assert_eq!(objects(), 0);
}

/// The seconds of `bench: N runs in T s` lines, in order.
fn bench_seconds(stdout: &str) -> Vec<f64> {
    stdout
        .lines()
        .filter_map(|line| line.strip_prefix("bench: ")?.split(" runs in ").nth(1)?.split(' ').next()?.parse().ok())
        .collect()
}

#[test]
fn bench_fills_its_time_budget() {
    // A 5 ns call once stopped at the sample buffer (0.8 s of 1 s) and a calibration from one
    // sample ran a 1 s budget for 0.1 s or 2.5 s: the budget now ends the timing, whatever
    // the run's length. The bounds are wide: a busy machine stretches the last sample only.
    let cells = "(define ((work int) (n int)) (declare s int) (declare i int) (set s 0)
                   (for ((set i 0) (lt i n) (set i (add i 1))) (set s (add s (mul i (xor i s))))) (ret s))
                 (bench (call work 1) (time 0.4))
                 (bench (call work 100000) (time 0.4))\n";
    let finished = quasi(&[], cells);
    let seconds = bench_seconds(&finished.stdout);
    assert_eq!(seconds.len(), 2, "{}", finished.stdout);
    for elapsed in seconds {
        assert!((0.4..1.2).contains(&elapsed), "a 0.4 s budget ran {elapsed} s:\n{}", finished.stdout);
    }
}

#[test]
fn a_bench_whose_runs_are_noisy_says_so() {
    // The tenth of twenty runs takes milliseconds, the others nanoseconds: the mean is far above
    // the median, as %timeit flags. A steady bench says nothing.
    let cells = "(define-global (count int)) (define-global (sink int))
                 (define ((sometimes_slow int)) (declare i int) (set count (add count 1))
                   (if (eq count 10) (for ((set i 0) (lt i 3000000) (set i (add i 1))) (set sink (xor (mul sink 3) i))))
                   (ret 0))
                 (bench (call sometimes_slow) (iters 20) (warmup 0))
                 (bench (add 1 2) (iters 20))\n";
    let finished = quasi(&[], cells);
    let warnings: Vec<&str> = finished.stdout.lines().filter(|line| line.starts_with("  warning: noisy: ")).collect();
    assert_eq!(warnings.len(), 1, "{}", finished.stdout);
    assert!(warnings[0].contains("the median is the typical run"), "{}", warnings[0]);
    let noisy = finished.stdout.find("  warning: noisy").expect("a warning");
    let second = finished.stdout.rfind("bench: 20 runs").expect("the second bench");
    assert!(noisy < second, "the warning follows the noisy bench:\n{}", finished.stdout);
}
