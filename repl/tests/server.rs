//! `quasi server`: the real launcher and engine, a real server in a private runtime folder of
//! the test's own. Every run below is made twice, by the server and in process
//! (`QUASI_SERVER=0`), and must come out the same; the server's count of runs served proves the
//! first went through it.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// A server of its own: `XDG_RUNTIME_DIR` is a fresh folder, so no other server is reached and
/// this one is stopped (and its folder removed) when the test ends, pass or fail.
struct Server {
    runtime: tempfile::TempDir,
    work: tempfile::TempDir,
    /// The runs this test sent to the server so far.
    served: std::cell::Cell<u64>,
}

impl Server {
    fn start() -> Server {
        let server = Server::not_started();
        let started = server.quasi(&["server", "start", "--idle", "5"]).output().expect("quasi server start runs");
        assert!(started.status.success(), "{}", String::from_utf8_lossy(&started.stderr));
        assert!(String::from_utf8_lossy(&started.stdout).starts_with("quasi server: running (pid "));
        server
    }

    /// Its folders, and no server yet.
    fn not_started() -> Server {
        Server {
            runtime: tempfile::tempdir().expect("a runtime folder"),
            work: tempfile::tempdir().expect("a work folder"),
            served: std::cell::Cell::new(0),
        }
    }

    /// `quasi ARGUMENTS…` in the work folder, with this server's runtime folder.
    fn quasi(&self, arguments: &[&str]) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_quasi"));
        command
            .args(arguments)
            .current_dir(self.work.path())
            .env("XDG_RUNTIME_DIR", self.runtime.path())
            .env("NO_COLOR", "1")
            // Shared by the served run and its twin in process: the second links the first's
            // objects, and must still come out the same.
            .env("QUASI_CACHE", self.work.path().join("object-cache"))
            .env_remove("QUASI_SERVER")
            .env_remove("QUASI_GPU")
            // A loaded machine may take a while to hand a run over; falling back to running in
            // process would make the counts of runs served wrong (the fallback has its own test).
            .env("QUASI_SERVER_WAIT_MS", "60000");
        command
    }

    /// `quasi run ARGUMENTS…` as `quasi` (above), started with umask 027 and at most 200 open
    /// files, which the server was not: the worker must take both from the launcher.
    fn run(&self, arguments: &[&str]) -> Command {
        let mut run = vec!["run"];
        run.extend_from_slice(arguments);
        let mut command = self.quasi(&run);
        // SAFETY: umask and setrlimit are async-signal-safe.
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(&mut command, || {
                libc::umask(0o027);
                let limit = libc::rlimit { rlim_cur: 200, rlim_max: 200 };
                libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
                Ok(())
            });
        }
        command
    }

    fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.work.path().join(name);
        std::fs::write(&path, text).expect("a program written");
        path
    }

    /// The state lines `quasi server status` prints, as `name value` pairs.
    fn status(&self) -> String {
        let output = self.quasi(&["server", "status"]).output().expect("quasi server status runs");
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    fn count(&self, what: &str) -> u64 {
        let status = self.status();
        status
            .lines()
            .find_map(|line| line.strip_prefix(what))
            .and_then(|value| value.trim().parse().ok())
            .unwrap_or_else(|| panic!("no `{what}` in the status:\n{status}"))
    }

    /// Runs `quasi run ARGUMENTS…` with `input` on stdin through the server, then in process;
    /// both must give the same status and output. Returns the server's.
    fn run_both_ways(&self, arguments: &[&str], input: &str) -> Output {
        let served = finish(self.run(arguments), input);
        self.served.set(self.served.get() + 1);
        wait_for(self, "runs served", self.served.get());
        let mut in_process = self.run(arguments);
        in_process.env("QUASI_SERVER", "0");
        let alone = finish(in_process, input);
        // The state file is rewritten 20 ms after a change: a run it missed would show by then.
        std::thread::sleep(Duration::from_millis(100));
        assert_eq!(self.count("runs served"), self.served.get(), "QUASI_SERVER=0 went to the server");
        assert_eq!(served.status.code(), alone.status.code(), "{served:?}\n{alone:?}");
        assert_eq!(String::from_utf8_lossy(&served.stdout), String::from_utf8_lossy(&alone.stdout));
        assert_eq!(String::from_utf8_lossy(&served.stderr), String::from_utf8_lossy(&alone.stderr));
        served
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.quasi(&["server", "stop"]).output();
    }
}

/// Runs `command` with `input` on stdin; fails the test past 30 s.
fn finish(mut command: Command, input: &str) -> Output {
    let mut child =
        command.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("quasi starts");
    std::io::Write::write_all(&mut child.stdin.take().expect("stdin is piped"), input.as_bytes()).expect("input");
    let started = Instant::now();
    while child.try_wait().expect("waiting for quasi").is_none() {
        if started.elapsed() > Duration::from_secs(30) {
            let _ = child.kill();
            panic!("quasi did not finish within 30 s");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    child.wait_with_output().expect("quasi's output")
}

/// Waits until `quasi server status` shows `what` at `value` (the server rewrites its state file
/// once quiet, 20 ms after a change).
fn wait_for(server: &Server, what: &str, value: u64) {
    let started = Instant::now();
    while server.count(what) != value {
        assert!(started.elapsed() < Duration::from_secs(30), "`{what}` never became {value}:\n{}", server.status());
        std::thread::sleep(Duration::from_millis(20));
    }
}

const ECHO: &str = r#"(define ((printf int) (format (ptr int8)) ...))
(define ((getenv (ptr int8)) (name (ptr int8))))
(define ((getchar int)))
(define ((write int64) (fd int) (buffer (ptr int8)) (count int64)))
(define ((umask int) (mask int)))
(define ((sysconf int64) (name int)))
(define ((main int) (argc int) (argv (ptr (ptr int8))))
  (call printf "umask %o open files %ld\n" (call umask 0) (call sysconf 4))
  (declare i int)
  (for ((set i 0) (lt i argc) (set i (add i 1)))
    (call printf "arg %s\n" (load (ptradd argv i))))
  (call printf "env %s\n" (call getenv "QUASI_TEST_VALUE"))
  (call printf "stdin %c\n" (call getchar))
  (call write 2 "to stderr\n" (int64 10))
  (ret 3))
"#;

/// The launcher's folder, arguments, environment and three streams reach the program, and its
/// status comes back; `--opt` and `--warnings` are honoured; errors read as in process.
#[test]
fn a_served_run_is_the_run_in_process() {
    let server = Server::start();
    server.write("echo.cl", ECHO);
    // A relative path: the worker runs in the launcher's folder.
    let mut run = server.run(&["echo.cl", "one", "two words", ""]);
    run.env("QUASI_TEST_VALUE", "from the launcher");
    let served = finish(run, "xyz");
    assert_eq!(served.status.code(), Some(3));
    assert_eq!(
        String::from_utf8_lossy(&served.stdout),
        "umask 27 open files 200\narg echo.cl\narg one\narg two words\narg \nenv from the launcher\nstdin x\n"
    );
    assert_eq!(String::from_utf8_lossy(&served.stderr), "to stderr\n");
    server.served.set(1);
    wait_for(&server, "runs served", 1);
    server.run_both_ways(&["--opt", "1", "echo.cl", "a"], "q");
    server.run_both_ways(&["--warnings", "echo.cl"], "");
    // What fails fails alike: a missing file, a type error, a fault, `exit`, a bad flag.
    server.run_both_ways(&["missing.cl"], "");
    server.write("wrong.cl", "(define ((main int)) (ret 1.5))\n");
    let wrong = server.run_both_ways(&["wrong.cl"], "");
    assert!(String::from_utf8_lossy(&wrong.stderr).contains("error[type]"), "{wrong:?}");
    server.write("fault.cl", "(define ((main int)) (ret (load (inttoptr 0 (ptr int)))))\n");
    let fault = server.run_both_ways(&["fault.cl"], "");
    assert!(String::from_utf8_lossy(&fault.stderr).contains("error[runtime-fault]"), "{fault:?}");
    server.write(
        "leave.cl",
        "(define ((printf int) (f (ptr int8)) ...))\n(define ((exit void) (status int)))\n\
         (define ((main int)) (call printf \"bye\\n\") (call exit 7) (ret 0))\n",
    );
    let leave = server.run_both_ways(&["leave.cl"], "");
    assert_eq!(leave.status.code(), Some(7));
    let usage = finish(server.run(&["--opt", "9", "echo.cl"]), "");
    server.served.set(server.served.get() + 1);
    assert_eq!(usage.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&usage.stderr).contains("`--opt` takes a level 0, 1, 2 or 3, not `9`"));
    // The server still serves after all of that.
    server.run_both_ways(&["echo.cl"], "z");
    wait_for(&server, "runs running", 0);
}

/// `quasi run spin.cl`, its code running. The launcher is the leader of a process group of its
/// own, as a shell's job is: a stop signal is discarded in a group without a parent in another
/// group of its session (an orphaned one, as the test harness's may be).
fn spinning(server: &Server) -> std::process::Child {
    common::spinning(std::os::unix::process::CommandExt::process_group(&mut server.quasi(&["run", "spin.cl"]), 0))
}

/// Ctrl-C reaches the worker (the cell is interrupted, status 130, as in process); SIGTERM ends
/// it as it ends a process, and the launcher ends the same way; Ctrl-Z stops both; a launcher
/// killed outright takes its worker with it; stopping the server leaves a run in flight alone.
#[test]
fn signals_reach_the_worker_and_a_lost_launcher_ends_it() {
    use std::os::unix::process::ExitStatusExt;
    let server = Server::start();
    server.write("spin.cl", common::SPIN);
    let signal = |child: &std::process::Child, name: &str| {
        let sent = Command::new("kill").args([name, &child.id().to_string()]).status().expect("kill runs");
        assert!(sent.success());
    };
    let child = spinning(&server);
    wait_for(&server, "runs running", 1);
    signal(&child, "-INT");
    let output = child.wait_with_output().expect("quasi ends");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(130), "{stderr}");
    assert!(stderr.contains("error[interrupted]: interrupted in function `main`"), "{stderr}");
    let child = spinning(&server);
    signal(&child, "-TERM");
    let output = child.wait_with_output().expect("quasi ends");
    assert_eq!(output.status.signal(), Some(libc_sigterm()), "{output:?}");
    // Ctrl-Z stops the worker with the launcher; `fg` (SIGCONT) resumes both.
    let child = spinning(&server);
    let worker = worker_of(&server);
    signal(&child, "-TSTP");
    wait_for_state(child.id() as i32, 'T');
    wait_for_state(worker, 'T');
    signal(&child, "-CONT");
    wait_for_state(worker, 'R');
    signal(&child, "-INT");
    assert_eq!(child.wait_with_output().expect("quasi ends").status.code(), Some(130));
    let mut child = spinning(&server);
    child.kill().expect("the launcher is killed");
    let _ = child.wait();
    wait_for(&server, "runs running", 0);
    wait_for(&server, "runs served", 4);
    // A run in flight outlives `quasi server stop`.
    let child = spinning(&server);
    let stopped = server.quasi(&["server", "stop"]).output().expect("quasi server stop runs");
    assert!(String::from_utf8_lossy(&stopped.stdout).starts_with("quasi server: stopped"), "{stopped:?}");
    signal(&child, "-INT");
    let output = child.wait_with_output().expect("quasi ends");
    assert_eq!(output.status.code(), Some(130), "{output:?}");
}

/// The worker running in the server's work folder: the server's child whose folder it is.
fn worker_of(server: &Server) -> i32 {
    let pid: i32 =
        server.status().lines().find_map(|line| line.strip_prefix("pid ")).expect("a pid").parse().expect("a number");
    let folder = std::fs::canonicalize(server.work.path()).expect("the work folder");
    for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Ok(child) = entry.file_name().to_string_lossy().parse::<i32>() else { continue };
        let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
        let parent = stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse::<i32>().ok());
        if parent == Some(pid) && std::fs::read_link(entry.path().join("cwd")).ok().as_deref() == Some(folder.as_path())
        {
            return child;
        }
    }
    panic!("no worker of server {pid} runs in {}", folder.display());
}

/// Waits until process `pid` is in `state` (`R` running or sleeping, `T` stopped).
fn wait_for_state(pid: i32, state: char) {
    let started = Instant::now();
    loop {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let now = stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().next()).unwrap_or("?");
        let matches = match state {
            'R' => now == "R" || now == "S",
            _ => now.starts_with(state),
        };
        if matches {
            return;
        }
        assert!(started.elapsed() < Duration::from_secs(30), "pid {pid} stayed `{now}`, not `{state}`");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// SIGTERM's number on Linux.
fn libc_sigterm() -> i32 {
    15
}

/// The objects in the server's object cache: file names and inodes (a file written again is a
/// new inode).
fn objects(server: &Server) -> std::collections::BTreeSet<(String, u64)> {
    use std::os::unix::fs::MetadataExt;
    let Ok(entries) = std::fs::read_dir(server.work.path().join("object-cache")) else { return Default::default() };
    entries
        .flatten()
        .filter(|entry| entry.file_name().to_string_lossy().ends_with(".qo"))
        .map(|entry| (entry.file_name().to_string_lossy().into_owned(), entry.metadata().expect("metadata").ino()))
        .collect()
}

/// A program the server ran is compiled again when it is saved, at its run's `--opt`, into the
/// object cache: the next run links that object (none is written again) and prints what the
/// saved program prints.
#[test]
fn a_saved_program_is_compiled_before_its_next_run() {
    let server = Server::start();
    let tiny = |bound: u32| {
        format!(
            "(define ((printf int) (format (ptr int8)) ...))\n(define ((main int)) (declare i int) (declare sum int)\n  \
             (for ((set i 0) (lt i {bound}) (set i (add i 1))) (set sum (add sum i)))\n  \
             (call printf \"sum %d\\n\" sum) (ret 0))\n"
        )
    };
    for (arguments, bound) in [(&["tiny.cl"][..], 100), (&["--opt", "1", "tiny.cl"][..], 300)] {
        server.write("tiny.cl", &tiny(bound));
        let first = finish(server.run(arguments), "");
        assert_eq!(String::from_utf8_lossy(&first.stdout), format!("sum {}\n", bound * (bound - 1) / 2), "{first:?}");
        server.served.set(server.served.get() + 1);
        wait_for(&server, "runs served", server.served.get());
        let before = objects(&server);
        server.write("tiny.cl", &tiny(bound + 100));
        let started = Instant::now();
        let compiled = loop {
            let now = objects(&server);
            if now.len() > before.len() {
                break now;
            }
            assert!(started.elapsed() < Duration::from_secs(30), "the saved program was not compiled");
            std::thread::sleep(Duration::from_millis(20));
        };
        // `status` says so (once its state is rewritten, 20 ms after a change). The write before
        // the `--opt 1` run may have started a compile too, unless that run came first.
        let saves = if bound == 100 { 1 } else { 2 };
        let started = Instant::now();
        while server.count("compiled on save") < saves {
            assert!(started.elapsed() < Duration::from_secs(30), "{}", server.status());
            std::thread::sleep(Duration::from_millis(20));
        }
        assert_eq!(server.count("programs watched"), 1);
        let next = finish(server.run(arguments), "");
        let bound = bound + 100;
        assert_eq!(String::from_utf8_lossy(&next.stdout), format!("sum {}\n", bound * (bound - 1) / 2), "{next:?}");
        server.served.set(server.served.get() + 1);
        wait_for(&server, "runs served", server.served.get());
        assert_eq!(objects(&server), compiled, "the run after the save compiled the program again");
    }
}

/// Starts at once (as runs that find no server make): one server runs, and every start says so.
#[test]
fn starts_at_once_make_one_server() {
    let server = Server::not_started();
    let starts: Vec<std::process::Child> = (0..4)
        .map(|_| server.quasi(&["server", "start"]).stdout(Stdio::piped()).spawn().expect("quasi server start runs"))
        .collect();
    let mut pids = std::collections::BTreeSet::new();
    for start in starts {
        let output = start.wait_with_output().expect("quasi server start ends");
        assert!(output.status.success(), "{output:?}");
        let said = String::from_utf8_lossy(&output.stdout).into_owned();
        let pid = said.split("(pid ").nth(1).and_then(|rest| rest.split(')').next()).expect("a pid").to_string();
        assert!(
            said.starts_with("quasi server: running") || said.starts_with("quasi server: already running"),
            "{said}"
        );
        pids.insert(pid);
    }
    assert_eq!(pids.len(), 1, "{pids:?}");
    assert_eq!(server.status().lines().next(), Some(format!("pid {}", pids.first().expect("one pid")).as_str()));
}

/// `start` twice is one server; `stop` ends it; a run then goes back to the process and starts
/// a server in the background (idle 10 minutes), which serves the runs after it; with
/// `QUASI_SERVER=0` it starts none; a runtime folder others may enter is refused.
#[test]
fn start_stop_and_a_folder_that_is_not_private() {
    let server = Server::start();
    let again = server.quasi(&["server", "start"]).output().expect("quasi server start runs");
    assert!(String::from_utf8_lossy(&again.stdout).starts_with("quasi server: already running"), "{again:?}");
    let stopped = server.quasi(&["server", "stop"]).output().expect("quasi server stop runs");
    assert!(String::from_utf8_lossy(&stopped.stdout).starts_with("quasi server: stopped"), "{stopped:?}");
    let status = server.quasi(&["server", "status"]).output().expect("quasi server status runs");
    assert_eq!(status.status.code(), Some(1));
    assert_eq!(String::from_utf8_lossy(&status.stdout), "quasi server: not running\n");
    server.write("echo.cl", ECHO);
    let mut refusing = server.quasi(&["run", "echo.cl"]);
    refusing.env("QUASI_SERVER", "0");
    let alone = finish(refusing, "a");
    assert_eq!(alone.status.code(), Some(3), "{alone:?}");
    std::thread::sleep(Duration::from_millis(500));
    let status = server.quasi(&["server", "status"]).output().expect("quasi server status runs");
    assert_eq!(String::from_utf8_lossy(&status.stdout), "quasi server: not running\n");
    let first = finish(server.quasi(&["run", "echo.cl"]), "a");
    assert_eq!(String::from_utf8_lossy(&first.stdout), String::from_utf8_lossy(&alone.stdout));
    assert_eq!(first.status.code(), Some(3), "{first:?}");
    let started = Instant::now();
    while !server.quasi(&["server", "status"]).output().expect("quasi server status runs").status.success() {
        assert!(started.elapsed() < Duration::from_secs(30), "`quasi run` started no server");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(server.count("idle minutes"), 10);
    server.run_both_ways(&["echo.cl"], "a");

    let open = tempfile::tempdir().expect("a runtime folder");
    let folder: &Path = &open.path().join("quasi");
    std::fs::create_dir(folder).expect("the socket folder");
    std::fs::set_permissions(folder, std::os::unix::fs::PermissionsExt::from_mode(0o755)).expect("mode 0755");
    let refused = server
        .quasi(&["server", "start"])
        .env("XDG_RUNTIME_DIR", open.path())
        .output()
        .expect("quasi server start runs");
    assert_eq!(refused.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("must be a folder only you can use"), "{refused:?}");
}

impl Server {
    /// The server's socket, as `status` shows it.
    fn socket(&self) -> PathBuf {
        let status = self.status();
        PathBuf::from(status.lines().find_map(|line| line.strip_prefix("socket ")).expect("a socket in the status"))
    }

    /// The server's pid and its children's (the spare, runs).
    fn processes(&self) -> Vec<i32> {
        let pid: i32 =
            self.status().lines().find_map(|line| line.strip_prefix("pid ")).expect("a pid").parse().expect("a number");
        let mut processes = vec![pid];
        for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
            let Ok(child) = entry.file_name().to_string_lossy().parse::<i32>() else { continue };
            let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
            let parent =
                stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse::<i32>().ok());
            if parent == Some(pid) {
                processes.push(child);
            }
        }
        processes
    }
}

/// Clients that connect and send nothing, or half a request, hold up no run: the worker reads a
/// connection only once it has sent something, and gives one that stalls 2 s (issue 31: one
/// silent connection made every later `quasi run` wait for ever).
#[test]
fn silent_connections_hold_up_no_run() {
    use std::io::Write;
    use std::os::unix::net::UnixStream;
    let server = Server::start();
    server.write("echo.cl", ECHO);
    let socket = server.socket();
    let silent: Vec<UnixStream> = (0..3).map(|_| UnixStream::connect(&socket).expect("a connection")).collect();
    let mut half = UnixStream::connect(&socket).expect("a connection");
    half.write_all(&[7, 0]).expect("two bytes of a length");
    for _ in 0..3 {
        server.run_both_ways(&["echo.cl", "x"], "q");
    }
    // Still connected, and still nobody's run.
    drop(silent);
    drop(half);
    server.run_both_ways(&["echo.cl"], "z");
}

/// A server that does not answer (stopped here) leaves the run to the launcher, which runs it
/// in process after `QUASI_SERVER_WAIT_MS`; the worker that takes the abandoned request later
/// runs nothing and serves the next run.
#[test]
fn a_server_that_does_not_answer_leaves_the_run_in_process() {
    let server = Server::start();
    server.write("echo.cl", ECHO);
    let signal = |name: &str| {
        for pid in server.processes() {
            let sent = Command::new("kill").args([name, &pid.to_string()]).status().expect("kill runs");
            assert!(sent.success());
        }
    };
    signal("-STOP");
    let mut run = server.run(&["echo.cl", "alone"]);
    run.env("QUASI_SERVER_WAIT_MS", "300");
    let alone = finish(run, "a");
    signal("-CONT");
    assert_eq!(alone.status.code(), Some(3), "{alone:?}");
    assert_eq!(
        String::from_utf8_lossy(&alone.stdout),
        "umask 27 open files 200\narg echo.cl\narg alone\nenv (null)\nstdin a\n"
    );
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(server.count("runs served"), 0, "the abandoned request ran on the server");
    server.run_both_ways(&["echo.cl"], "z");
}
