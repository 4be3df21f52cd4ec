//! `quasi server start|stop|status`: a resident process that keeps a worker ready for the
//! next `quasi run`, so that a run costs what its program costs to compile and run, not what
//! starting LLVM costs.
//!
//! The server makes one session at start-up and prepares it (`Session::prepare`: target
//! machine, pass pipelines, `main`'s call trampolines), after a throwaway session has compiled
//! and run a small program (pages, allocator, LLVM's lazily made tables). That session is never
//! run, so it has no threads (`SessionConfig::defer_device`, the executor starts with the first
//! call), and the server stays single-threaded, which makes forking it sound (checked before
//! every fork). Each spare worker is a fork: it prepares its copy once more (the pages a run
//! writes are copied now, not while the user waits; after the run it replaces has had the two
//! cores for a moment), starts its executor and waits in `accept` on the server's socket. The
//! worker reads the first connection to send a whole request (`next_request`: silent ones hold
//! up nobody), reports its pid to the launcher and waits for its go, which brings the
//! launcher's streams (a launcher that waited too long runs the program itself and never says
//! go); it then hands the connection to the server (over a socket pair, SCM_RIGHTS), becomes
//! the run (the launcher's streams, folder,
//! environment, umask and limits, then `run_prepared`) and reports its exit status itself before
//! its slow teardown. The server forks the next spare once every run has ended or run
//! `SPARE_DELAY`, and reports any other end (a signal, a crash) from the worker's pidfd; a
//! launcher that goes away takes its worker with it (SIGKILL).
//!
//! Files, in the private folder `wire::socket_directory`: `server-ID.sock`, `server-ID.state`
//! (what `status` prints), `server-ID.lock` (held while the server runs) and `server-ID.log`
//! (what went wrong outside runs), where ID names the engine binary's build.

// The launcher's half of the protocol is unused here.
#[allow(dead_code)]
pub mod wire;

mod saved;

use std::io::Write;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::fs::DirBuilderExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use quasi_lang::{Session, SessionConfig};

use self::wire::Answer;

const DEFAULT_IDLE_MINUTES: u64 = 30;

/// How long a new spare waits before preparing its copy, leaving the cores to the launcher and
/// worker of the run it replaces while they end (it is forked once that run is over or 5 ms in).
/// Short, so that the next run, seldom sooner than milliseconds later, finds it prepared; 15 ms
/// had the next run of a bench that spaces its runs by ~20 ms arrive while the spare prepared.
const SETTLE_MS: i32 = 3;

/// How long the next spare waits for a run that just started: forking copies the server's page
/// tables (half a millisecond of a core), which a short run on two cores would wait for. Once
/// every run has ended or run this long, the spare is forked.
const SPARE_DELAY: Duration = Duration::from_millis(5);

/// A spare that ends before taking a run this many times in a row ends the server: something
/// is wrong with every session, and forking more would only spin.
const SPARE_FAILURES: u32 = 3;

/// `quasi server …`: the arguments after `server`. Runs on the process's main thread, before
/// any other thread exists.
pub fn main(arguments: &[String]) -> i32 {
    let paths = match Paths::of_this_engine() {
        Ok(paths) => paths,
        Err(message) => {
            eprintln!("quasi server: {message}");
            return 1;
        }
    };
    match arguments {
        [start] if start == "start" => start_server(&paths, Duration::from_secs(DEFAULT_IDLE_MINUTES * 60)),
        [start, flag, minutes] if start == "start" && flag == "--idle" => match minutes.parse::<u64>() {
            Ok(minutes) if minutes > 0 => start_server(&paths, Duration::from_secs(minutes * 60)),
            _ => usage(&format!("`--idle` takes a number of minutes, not `{minutes}`")),
        },
        [stop] if stop == "stop" => stop_server(&paths),
        [status] if status == "status" => server_status(&paths),
        _ => usage("`server` takes start [--idle MINUTES], stop or status"),
    }
}

fn usage(message: &str) -> i32 {
    eprintln!("quasi: {message}\n{}", crate::USAGE);
    2
}

/// Where the server of this engine keeps its files.
struct Paths {
    socket: PathBuf,
    state: PathBuf,
    log: PathBuf,
    /// Locked by the server for as long as it runs: whether a server runs does not depend on a
    /// pid, which the system may have given to another process since.
    lock: PathBuf,
}

impl Paths {
    fn of_this_engine() -> Result<Paths, String> {
        let engine = std::env::current_exe().map_err(|error| format!("cannot find this executable's path: {error}"))?;
        let socket =
            wire::socket_path(&engine).map_err(|error| format!("cannot read {}: {error}", engine.display()))?;
        Ok(Paths {
            state: socket.with_extension("state"),
            log: socket.with_extension("log"),
            lock: socket.with_extension("lock"),
            socket,
        })
    }

    /// The lock file, locked (exclusively) if nobody else holds it.
    fn try_lock(&self) -> Option<std::fs::File> {
        let file =
            std::fs::OpenOptions::new().read(true).write(true).create(true).truncate(false).open(&self.lock).ok()?;
        // SAFETY: flock on a descriptor this function owns.
        (unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0).then_some(file)
    }

    /// The server's pid once the server that holds the lock has written it (a start that lost
    /// the race to another can ask before the winner wrote its state): waits up to 5 s while
    /// the lock is held.
    fn running_soon(&self) -> Option<i32> {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let running = self.running();
            let held = self.lock.exists() && self.try_lock().is_none();
            if running.is_some() || !held || Instant::now() >= deadline {
                return running;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// The server's pid, when one runs (holds the lock).
    fn running(&self) -> Option<i32> {
        if !self.lock.exists() || self.try_lock().is_some() {
            return None;
        }
        let text = std::fs::read_to_string(&self.state).ok()?;
        text.lines().find_map(|line| line.strip_prefix("pid "))?.trim().parse().ok()
    }
}

fn start_server(paths: &Paths, idle: Duration) -> i32 {
    if let Some(pid) = paths.running() {
        println!("quasi server: already running (pid {pid}), socket {}", paths.socket.display());
        return 0;
    }
    let directory = wire::socket_directory();
    let made = std::fs::DirBuilder::new().recursive(true).mode(0o700).create(&directory);
    if let Err(error) = made {
        eprintln!("quasi server: cannot make {}: {error}", directory.display());
        return 1;
    }
    if !wire::directory_is_private(&directory) {
        eprintln!(
            "quasi server: {} must be a folder only you can use (mode 0700, yours); not starting",
            directory.display()
        );
        return 1;
    }
    let (ready_read, ready_write) = match pipe() {
        Ok(pipe) => pipe,
        Err(error) => {
            eprintln!("quasi server: cannot make a pipe: {error}");
            return 1;
        }
    };
    // SAFETY: this process has one thread (server commands run before any other starts).
    match unsafe { libc::fork() } {
        -1 => {
            eprintln!("quasi server: cannot fork: {}", std::io::Error::last_os_error());
            1
        }
        0 => {
            drop(ready_read);
            // SAFETY: still one thread; a new session leaves the terminal's, and the second
            // fork's child can never get a controlling terminal back.
            unsafe {
                libc::setsid();
                match libc::fork() {
                    0 => {}
                    -1 => libc::_exit(1),
                    _ => libc::_exit(0),
                }
            }
            let code = serve(paths, idle, ready_write);
            std::process::exit(code);
        }
        child => {
            drop(ready_write);
            // SAFETY: reaping the intermediate child, which exits at once.
            unsafe { libc::waitpid(child, std::ptr::null_mut(), 0) };
            let mut answer = Vec::new();
            let _ = std::io::Read::read_to_end(&mut std::fs::File::from(ready_read), &mut answer);
            if answer == b"ready" {
                let pid = paths.running().map_or_else(|| "?".to_string(), |pid| pid.to_string());
                println!("quasi server: running (pid {pid}), socket {}", paths.socket.display());
                0
            } else if let Some(pid) = paths.running_soon() {
                // Another start won the race.
                println!("quasi server: already running (pid {pid}), socket {}", paths.socket.display());
                0
            } else {
                let log = std::fs::read_to_string(&paths.log).unwrap_or_default();
                eprintln!(
                    "quasi server: did not start{}",
                    if log.is_empty() { String::new() } else { format!(":\n{log}") }
                );
                1
            }
        }
    }
}

fn stop_server(paths: &Paths) -> i32 {
    let Some(pid) = paths.running() else {
        println!("quasi server: not running");
        return 0;
    };
    // SAFETY: asking our own server to end.
    unsafe { libc::kill(pid, libc::SIGTERM) };
    let deadline = Instant::now() + Duration::from_secs(10);
    while paths.running() == Some(pid) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    if paths.running() == Some(pid) {
        eprintln!("quasi server: pid {pid} did not end within 10 s");
        return 1;
    }
    println!("quasi server: stopped (pid {pid})");
    0
}

fn server_status(paths: &Paths) -> i32 {
    match paths.running() {
        Some(_) => {
            print!("{}", std::fs::read_to_string(&paths.state).unwrap_or_default());
            0
        }
        None => {
            println!("quasi server: not running");
            1
        }
    }
}

fn pipe() -> std::io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for the two descriptors pipe2 writes.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: pipe2 just opened both; nothing else owns them.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Closes every descriptor of this process above 2 except `keep`.
fn close_other_descriptors(keep: &[RawFd]) {
    let mut keep = keep.to_vec();
    keep.sort_unstable();
    let mut from = 3;
    for fd in keep.into_iter().filter(|&fd| fd >= 3) {
        if fd > from {
            // SAFETY: closes descriptors nothing in this freshly forked process uses.
            unsafe { libc::close_range(from as libc::c_uint, (fd - 1) as libc::c_uint, 0) };
        }
        from = fd + 1;
    }
    // SAFETY: as above.
    unsafe { libc::close_range(from as libc::c_uint, libc::c_uint::MAX, 0) };
}

/// A worker process: the spare, or one running a request.
struct Worker {
    pid: i32,
    /// Readable when the process has ended.
    pidfd: OwnedFd,
    /// The launcher's connection, once the worker took one.
    connection: Option<UnixStream>,
    /// When it was forked, then when it took its run.
    since: Instant,
}

/// What `status` shows.
struct Counts {
    served: u64,
    failed_spares: u32,
}

/// The daemon: binds the socket, tells `ready` it listens, keeps a spare, reports ends.
fn serve(paths: &Paths, idle: Duration, ready: OwnedFd) -> i32 {
    // Nothing of the caller's stays: not its streams (a test harness reading them would wait
    // for this process), not its other descriptors, not its folder.
    close_other_descriptors(&[ready.as_raw_fd()]);
    let _ = std::env::set_current_dir("/");
    // SAFETY: sets this process's file mode creation mask.
    unsafe { libc::umask(0o077) };
    // Not truncated until this server holds the lock: one that loses a race to start (runs
    // racing to start a server do that) must leave the winner's log alone.
    let log = std::fs::OpenOptions::new().create(true).append(true).open(&paths.log);
    wire::streams_to_null();
    if let Ok(log) = &log {
        // SAFETY: standard error becomes the log, which this process owns.
        unsafe { libc::dup2(log.as_raw_fd(), 2) };
    }
    drop(log);
    set_stop_signals(stop_requested as *const () as libc::sighandler_t);
    // Blocked except while the server waits in `ppoll`: a stop that comes while the server
    // works (forks a spare, compiles) is taken by the next wait at once, not after it (a stop
    // between the `STOP` check and a plain `poll` waited out its 10 s timeout).
    let waiting_mask = block_stop_signals();
    // Another server won the race to start: it is the server (`start` says so).
    let Some(lock) = paths.try_lock() else { return 1 };
    // The log is this server's from now on (standard error is the log, or /dev/null).
    // SAFETY: truncates the file behind descriptor 2, which this process owns.
    unsafe { libc::ftruncate(2, 0) };
    // Bound under a temporary name and renamed: a stale socket of a server that died is
    // replaced in one step.
    let bound = paths.socket.with_extension(format!("{}.new", std::process::id()));
    let listener = match UnixListener::bind(&bound).and_then(|listener| {
        std::fs::rename(&bound, &paths.socket)?;
        Ok(listener)
    }) {
        Ok(listener) => listener,
        Err(error) => {
            eprintln!("quasi server: cannot listen on {}: {error}", paths.socket.display());
            let _ = std::fs::remove_file(&bound);
            return 1;
        }
    };
    // The socket as bound: a server whose socket was removed (its folder cleaned up) or
    // replaced serves nobody any more.
    let bound_socket = socket_identity(&paths.socket);
    let (notify_server, notify_worker) = match UnixStream::pair() {
        Ok(pair) => pair,
        Err(error) => {
            eprintln!("quasi server: cannot make a socket pair: {error}");
            return 1;
        }
    };
    // `status` and `stop` see the server while it prepares (a `quasi run` may have started it
    // just before a `stop`).
    let mut counts = Counts { served: 0, failed_spares: 0 };
    write_state(paths, idle, (0, 0, 0, 0));
    let mut prepared = match prepare() {
        Ok(session) => Some(session),
        Err(message) => {
            eprintln!("quasi server: {message}");
            let _ = std::fs::remove_file(&paths.socket);
            let _ = std::fs::remove_file(&paths.state);
            return 1;
        }
    };
    let _ = std::fs::File::from(ready).write_all(b"ready");
    let mut spare: Option<Worker> = None;
    let mut runs: Vec<Worker> = Vec::new();
    let mut saved = saved::Saved::new();
    let mut last_run = Instant::now();
    // What the state file says: runs served and running, programs watched and compiled on save.
    let mut shown = (0, 0, 0, 0);
    while !STOP.load(Ordering::SeqCst) {
        // The next spare prepares while the last run runs, once that run is past its start:
        // back-to-back runs find it ready.
        if spare.is_none() && spare_due_in(&runs).is_zero() {
            if counts.failed_spares >= SPARE_FAILURES {
                eprintln!("quasi server: {SPARE_FAILURES} prepared workers in a row ended before a run; stopping");
                break;
            }
            let server_owned = server_owned(&[notify_server.as_raw_fd(), lock.as_raw_fd()], &runs, &saved);
            match fork_spare(&listener, &notify_worker, &mut prepared, &server_owned) {
                Ok(worker) => spare = Some(worker),
                Err(error) => {
                    eprintln!("quasi server: cannot fork a worker: {error}");
                    break;
                }
            }
        }
        if runs.is_empty() && last_run.elapsed() >= idle {
            break;
        }
        // Polled: the hand-over socket, every worker's pidfd, every launcher's connection, and
        // what watches saved programs.
        let mut polled = vec![libc::pollfd { fd: notify_server.as_raw_fd(), events: libc::POLLIN, revents: 0 }];
        for fd in saved.descriptors() {
            polled.push(libc::pollfd { fd, events: libc::POLLIN, revents: 0 });
        }
        for worker in spare.iter().chain(&runs) {
            polled.push(libc::pollfd { fd: worker.pidfd.as_raw_fd(), events: libc::POLLIN, revents: 0 });
            if let Some(connection) = &worker.connection {
                polled.push(libc::pollfd { fd: connection.as_raw_fd(), events: libc::POLLIN, revents: 0 });
            }
        }
        // The state file is rewritten once things are quiet for a moment, not while a run starts.
        let now_showing = (counts.served, runs.len(), saved.watched(), saved.compiled);
        let stale = now_showing != shown;
        let mut wait = match stale {
            true => Duration::from_millis(20),
            false => idle.saturating_sub(last_run.elapsed()).min(Duration::from_secs(10)),
        };
        if spare.is_none() {
            wait = wait.min(spare_due_in(&runs));
        }
        if let Some(due) = saved.due_in() {
            wait = wait.min(due);
        }
        let wait = wait + Duration::from_millis(1);
        let timeout = libc::timespec { tv_sec: wait.as_secs() as libc::time_t, tv_nsec: wait.subsec_nanos().into() };
        // SAFETY: `polled` is a live array of its length; the timeout and mask are live values.
        let count = unsafe { libc::ppoll(polled.as_mut_ptr(), polled.len() as libc::nfds_t, &timeout, &waiting_mask) };
        let ready_fds: Vec<RawFd> = polled.iter().filter(|poll| poll.revents != 0).map(|poll| poll.fd).collect();
        saved.readable(&ready_fds);
        if saved.due_in().is_some_and(|due| due.is_zero()) {
            let mut server_owned = server_owned(&[notify_server.as_raw_fd(), lock.as_raw_fd()], &runs, &saved);
            server_owned.extend([listener.as_raw_fd(), notify_worker.as_raw_fd()]);
            server_owned.extend(spare.iter().map(|worker| worker.pidfd.as_raw_fd()));
            saved.compile_due(&mut prepared, &server_owned);
        }
        if count <= 0 {
            if stale {
                shown = now_showing;
                write_state(paths, idle, shown);
            }
            // Quiet: a server whose engine was rebuilt or removed, or whose socket is gone,
            // serves nobody any more.
            if runs.is_empty() && (!engine_unchanged(paths) || socket_identity(&paths.socket) != bound_socket) {
                break;
            }
            continue;
        }
        // A hand-over first: the worker that took a run may also have ended already.
        if ready_fds.contains(&notify_server.as_raw_fd()) {
            match wire::receive_hand_over(&notify_server) {
                Ok((connection, pid, request)) if spare.as_ref().is_some_and(|worker| worker.pid == pid) => {
                    saved.remember(request);
                    let mut worker = spare.take().expect("just matched");
                    worker.connection = Some(UnixStream::from(connection));
                    worker.since = Instant::now();
                    runs.push(worker);
                    counts.served += 1;
                    counts.failed_spares = 0;
                    last_run = Instant::now();
                }
                Ok((_, pid, _)) => eprintln!("quasi server: a hand-over from pid {pid}, which is not the spare"),
                Err(error) => eprintln!("quasi server: a hand-over failed: {error}"),
            }
        }
        if let Some(worker) = spare.take_if(|worker| ready_fds.contains(&worker.pidfd.as_raw_fd())) {
            let status = reap(worker.pid);
            eprintln!("quasi server: the prepared worker (pid {}) ended before a run: {status:?}", worker.pid);
            counts.failed_spares += 1;
        }
        runs.retain_mut(|worker| {
            if ready_fds.contains(&worker.pidfd.as_raw_fd()) {
                let answer = reap(worker.pid);
                if let Some(connection) = &worker.connection {
                    // A launcher that went away is told nothing.
                    let _ = answer.write(connection);
                }
                return false;
            }
            if worker.connection.as_ref().is_some_and(|connection| ready_fds.contains(&connection.as_raw_fd())) {
                // The launcher sends nothing after its request: readable means it is gone (after
                // the worker reported its status, this only cuts its teardown short).
                // SAFETY: the worker is our child, not yet reaped, so the pid is still its.
                unsafe { libc::kill(worker.pid, libc::SIGKILL) };
                worker.connection = None;
            }
            true
        });
    }
    saved.stop();
    // Runs in flight go on (they report their own status); the spare would serve nobody.
    if let Some(worker) = spare {
        end_child(worker.pid);
    }
    if socket_identity(&paths.socket) == bound_socket {
        let _ = std::fs::remove_file(&paths.socket);
        let _ = std::fs::remove_file(&paths.state);
    }
    0
}

/// The server's own descriptors, which a worker or compiler must not keep: `fixed`, every
/// run's pidfd and launcher connection, and what watches saved programs.
fn server_owned(fixed: &[RawFd], runs: &[Worker], saved: &saved::Saved) -> Vec<RawFd> {
    let runs = runs.iter().flat_map(|worker| {
        std::iter::once(worker.pidfd.as_raw_fd()).chain(worker.connection.as_ref().map(AsRawFd::as_raw_fd))
    });
    fixed.iter().copied().chain(runs).chain(saved.descriptors()).collect()
}

/// How long until the next spare may be forked: until every run still connected to its
/// launcher has run `SPARE_DELAY` (zero when none has less).
fn spare_due_in(runs: &[Worker]) -> Duration {
    runs.iter()
        .filter(|worker| worker.connection.is_some())
        .map(|worker| SPARE_DELAY.saturating_sub(worker.since.elapsed()))
        .max()
        .unwrap_or(Duration::ZERO)
}

/// Whether the engine file this server runs is still the one its socket is named after (a
/// launcher beside a rebuilt engine looks for another socket).
fn engine_unchanged(paths: &Paths) -> bool {
    Paths::of_this_engine().is_ok_and(|now| now.socket == paths.socket)
}

/// The device and inode of the socket file, if it is there.
fn socket_identity(socket: &std::path::Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::symlink_metadata(socket).ok().map(|metadata| (metadata.dev(), metadata.ino()))
}

/// Kills the child `pid`, not yet reaped (so the pid is still its), and reaps it.
fn end_child(pid: i32) {
    // SAFETY: kill of our own child, whose pid no other process can have until it is reaped.
    unsafe { libc::kill(pid, libc::SIGKILL) };
    reap(pid);
}

/// Waits for the child `pid` and says how it ended.
fn reap(pid: i32) -> Answer {
    let mut status = 0;
    // SAFETY: `pid` is a child of this process; `status` is written by waitpid.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    if libc::WIFSIGNALED(status) {
        Answer::Signalled(libc::WTERMSIG(status))
    } else {
        Answer::Exited(libc::WEXITSTATUS(status))
    }
}

/// Writes what `status` prints; `shown`: runs served and running, programs watched, and
/// compiles of saved programs started.
fn write_state(paths: &Paths, idle: Duration, shown: (u64, usize, usize, u64)) {
    let engine = std::env::current_exe().map(|path| path.display().to_string()).unwrap_or_default();
    let (served, running, watched, compiled) = shown;
    let text = format!(
        "pid {}\nsocket {}\nengine {engine}\nruns served {served}\nruns running {running}\nidle minutes {}\n\
         programs watched {watched}\ncompiled on save {compiled}\n",
        std::process::id(),
        paths.socket.display(),
        idle.as_secs() / 60
    );
    let temporary = paths.state.with_extension("state.new");
    if std::fs::write(&temporary, text).and_then(|()| std::fs::rename(&temporary, &paths.state)).is_err() {
        eprintln!("quasi server: cannot write {}", paths.state.display());
    }
}

/// The signals that end the server.
const STOP_SIGNALS: [libc::c_int; 3] = [libc::SIGTERM, libc::SIGINT, libc::SIGHUP];

/// Set by SIGTERM, SIGINT and SIGHUP: the server ends.
static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn stop_requested(_: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

/// The action of the signals that end the server: `stop_requested` in the server, the default
/// in its workers (a worker ends as a program would).
fn set_stop_signals(action: libc::sighandler_t) {
    for signal in STOP_SIGNALS {
        // SAFETY: `stop_requested` only stores to an atomic; SIG_DFL is always valid.
        unsafe { libc::signal(signal, action) };
    }
}

/// The signal set of `set_stop_signals`.
fn stop_signals() -> libc::sigset_t {
    // SAFETY: sigemptyset and sigaddset fill the set they are given.
    unsafe {
        let mut set = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for signal in STOP_SIGNALS {
            libc::sigaddset(&mut set, signal);
        }
        set
    }
}

/// Blocks the stop signals in this (single-threaded) process; returns the mask to wait with,
/// in which they are not blocked.
fn block_stop_signals() -> libc::sigset_t {
    // SAFETY: sigprocmask with live sets.
    unsafe {
        let mut waiting = std::mem::zeroed();
        libc::sigprocmask(libc::SIG_BLOCK, &stop_signals(), &mut waiting);
        for signal in STOP_SIGNALS {
            libc::sigdelset(&mut waiting, signal);
        }
        waiting
    }
}

/// A throwaway program: compiled and run once in the server, it touches the paths a run takes
/// (pages, allocator, LLVM's lazily made tables) before the prepared session is made.
const WARM_UP: &str = "(define ((quasi-warm-up int) (n int))
  (declare sum int)
  (set sum 0)
  (for ((declare i int) (set i 0) (lt i n) (set i (add i 1))) (set sum (add sum i)))
  (ret sum))
(define ((main int)) (ret (call quasi-warm-up 10)))";

/// The session every worker starts from: made once, prepared, never run, so that it has no
/// threads and the server stays forkable. Also raises the stack limit, since sessions run on
/// this process's main thread here (its stack grows on demand up to the limit).
fn prepare() -> Result<Session, String> {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit and setrlimit read and write the struct given.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_STACK, &mut limit) == 0 && limit.rlim_cur != libc::RLIM_INFINITY {
            limit.rlim_cur = (quasi_lang::SESSION_STACK as libc::rlim_t).min(limit.rlim_max).max(limit.rlim_cur);
            libc::setrlimit(libc::RLIMIT_STACK, &limit);
        }
    }
    let config = SessionConfig { defer_device: true, ..crate::run_config(None) };
    let mut scratch = Session::new(config.clone()).map_err(|error| format!("cannot start a session: {error}"))?;
    let _ = scratch.run_file("<warm-up>", WARM_UP.to_string(), &[]);
    drop(scratch);
    let mut session = Session::new(config).map_err(|error| format!("cannot start a session: {error}"))?;
    session.prepare().map_err(|error| format!("cannot prepare a session: {error}"))?;
    // Levels 0 (short runs, §5.5) and 1 too, once, here: a short program's first run, or `quasi
    // run --opt 1` of a program being edited, then starts about as fast as `tcc -run`. (A spare
    // prepares its copy at the batch level only, so that a run coming soon after the last one
    // waits for as little as may be.)
    for level in [quasi_lang::DEFAULT_OPT_LEVEL, quasi_lang::tools::SHORT_RUN_LEVEL] {
        session.prepare_level(level).map_err(|error| format!("cannot prepare a session: {error}"))?;
    }
    match threads() {
        1 => Ok(session),
        count => Err(format!("a prepared session left {count} threads; forking it would not be sound")),
    }
}

/// The threads of this process.
fn threads() -> usize {
    std::fs::read_dir("/proc/self/task").map_or(0, Iterator::count)
}

/// Forks the spare worker, which gets `prepared` (the server keeps its own copy, untouched).
fn fork_spare(
    listener: &UnixListener,
    notify: &UnixStream,
    prepared: &mut Option<Session>,
    server_owned: &[RawFd],
) -> std::io::Result<Worker> {
    let (pid, pidfd) = fork_child(server_owned, || {
        let code = match prepared.take() {
            Some(session) => take_one_run(listener, notify, session),
            None => 70,
        };
        // As a `quasi run` process ends: C's streams flushed, `atexit` handlers run.
        std::process::exit(code)
    })?;
    Ok(Worker { pid, pidfd, connection: None, since: Instant::now() })
}

/// Forks a child of the server (a spare, or a compiler of a saved program): it dies with the
/// server (nobody else could reach it), keeps none of `server_owned`, ends as signals end a
/// process, runs `child` and then ends without its teardown. Returns its pid and pidfd.
fn fork_child(server_owned: &[RawFd], child: impl FnOnce()) -> std::io::Result<(i32, OwnedFd)> {
    if threads() != 1 {
        return Err(std::io::Error::other("the server has more than one thread; it cannot fork"));
    }
    // SAFETY: the process has one thread (checked above).
    match unsafe { libc::fork() } {
        -1 => Err(std::io::Error::last_os_error()),
        0 => {
            // SAFETY: prctl with plain values; getppid cannot fail.
            unsafe {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong);
                if libc::getppid() == 1 {
                    libc::_exit(0);
                }
            }
            for &fd in server_owned {
                // SAFETY: the server's descriptors, copied by fork; the child never uses them.
                unsafe { libc::close(fd) };
            }
            set_stop_signals(libc::SIG_DFL);
            // SAFETY: unblocks what the server blocked (`block_stop_signals`), as a program has it.
            unsafe { libc::sigprocmask(libc::SIG_UNBLOCK, &stop_signals(), std::ptr::null_mut()) };
            child();
            // SAFETY: ends this process at once; its teardown would only take time.
            unsafe { libc::_exit(0) }
        }
        pid => {
            // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
            let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) } as RawFd;
            if fd < 0 {
                let error = std::io::Error::last_os_error();
                end_child(pid);
                return Err(error);
            }
            // SAFETY: pidfd_open just opened it.
            Ok((pid, unsafe { OwnedFd::from_raw_fd(fd) }))
        }
    }
}

/// The spare: waits for a run, takes it, runs it, returns its status.
fn take_one_run(listener: &UnixListener, notify: &UnixStream, mut session: Session) -> i32 {
    // This process forks no more: the executor's threads start now (a tenth of a millisecond),
    // so even a run that comes at once finds them waiting.
    let _ = session.start_executor();
    // Once more in this process: what the run will write of the shared pages is copied now,
    // and the code it runs is mapped, while nobody waits. Not at once: the run this spare
    // replaces may still be ending, and two cores are few; a run that comes meanwhile is
    // taken as the spare stands.
    let mut waiting = libc::pollfd { fd: listener.as_raw_fd(), events: libc::POLLIN, revents: 0 };
    // SAFETY: poll on one live descriptor.
    if unsafe { libc::poll(&mut waiting, 1, SETTLE_MS) } == 0 {
        let _ = session.prepare();
    }
    let Some((connection, request, streams)) = next_request(listener) else { return 1 };
    let pid = std::process::id() as i32;
    if wire::send_hand_over(notify, connection.as_raw_fd(), pid, &request).is_err() {
        // The server does not know this worker took the run; ending lets it fork another.
        return 1;
    }
    // Kept: the worker reports its own status (below); the server reports any other end. A run
    // goes on should the server end now.
    // SAFETY: prctl with plain values.
    unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, 0 as libc::c_ulong) };
    // SAFETY: the listening socket is the server's; this process no longer accepts.
    unsafe { libc::close(listener.as_raw_fd()) };
    adopt(&request, streams);
    request.apply_limits();
    // Sound: the only other threads are the session's executor and its interrupter, if
    // started, waiting idle for the run; nothing reads the environment while it changes.
    take_environment(&request);
    let code = crate::run_prepared(session, request.arguments);
    let _ = std::io::stdout().flush();
    let _ = std::io::stderr().flush();
    // Everything the program wrote is out (its C streams too): the launcher may end now,
    // before this process's teardown (static destructors, unmapping), which takes milliseconds.
    // SAFETY: fflush(NULL) flushes every open C stream.
    unsafe { libc::fflush(std::ptr::null_mut()) };
    // And the launcher's streams are let go: whoever reads the launcher's output (a pipe, `$(…)`)
    // sees its end when the launcher ends, not after this process's teardown.
    wire::streams_to_null();
    let _ = Answer::Exited(code).write(&connection);
    code
}

/// How long a connection may take to send its request: a launcher sends it as it connects.
/// One that sends nothing for this long is closed; it never holds up another.
const REQUEST_WAIT: Duration = Duration::from_secs(2);

/// How many connections may wait for their requests at once; the oldest goes first.
const PENDING_LIMIT: usize = 64;

/// The first request that arrives whole and whose launcher, told this worker's pid, says go:
/// its connection and streams. Connections are accepted as they come and read only when they
/// have sent something, so a client that connects and sends nothing (or stops half-way, for
/// `REQUEST_WAIT` at most) holds up no launcher. A launcher that gave up waiting (it runs the
/// program itself) closed its connection and never says go: this worker, still untouched,
/// waits for the next. `None` if the socket failed.
fn next_request(listener: &UnixListener) -> Option<(UnixStream, wire::Request, [OwnedFd; 3])> {
    let mut pending: Vec<(UnixStream, Instant)> = Vec::new();
    loop {
        pending.retain(|(_, since)| since.elapsed() < REQUEST_WAIT);
        let mut polled = vec![libc::pollfd { fd: listener.as_raw_fd(), events: libc::POLLIN, revents: 0 }];
        polled.extend(pending.iter().map(|(connection, _)| libc::pollfd {
            fd: connection.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        }));
        let wait = pending.iter().map(|(_, since)| REQUEST_WAIT.saturating_sub(since.elapsed())).min();
        let timeout = wait.map_or(-1, |wait| wait.as_millis() as i32 + 1);
        // SAFETY: `polled` is a live array of its length.
        if unsafe { libc::poll(polled.as_mut_ptr(), polled.len() as libc::nfds_t, timeout) } <= 0 {
            continue;
        }
        // A connection that sent something (or closed): its request should be whole by now.
        let ready = polled[1..].iter().position(|poll| poll.revents != 0);
        if let Some(index) = ready {
            let (connection, since) = pending.swap_remove(index);
            let _ = connection
                .set_read_timeout(Some(REQUEST_WAIT.saturating_sub(since.elapsed()).max(Duration::from_millis(1))));
            let Ok(request) = wire::receive_request(&connection) else {
                // Not a launcher, one that went away, or too slow: the next may be one.
                continue;
            };
            let pid = std::process::id() as i32;
            let _ = connection.set_read_timeout(Some(REQUEST_WAIT));
            if Answer::Worker(pid).write(&connection).is_err() {
                continue;
            }
            if let Ok(streams) = wire::receive_go(&connection) {
                let _ = connection.set_read_timeout(None);
                return Some((connection, request, streams));
            }
        }
        if polled[0].revents == 0 {
            continue;
        }
        let connection = match listener.accept() {
            Ok((connection, _)) => connection,
            Err(error) if error.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(error) => {
                eprintln!("quasi server: accept failed: {error}");
                return None;
            }
        };
        // The folder is private; the peer's user is checked all the same.
        let same_user = nix::sys::socket::getsockopt(&connection, nix::sys::socket::sockopt::PeerCredentials)
            .is_ok_and(|credentials| credentials.uid() == wire::uid());
        if same_user {
            if pending.len() == PENDING_LIMIT {
                pending.remove(0);
            }
            pending.push((connection, Instant::now()));
        }
    }
}

/// The launcher's environment replaces this process's (no other thread may read it meanwhile).
fn take_environment(request: &wire::Request) {
    for (name, _) in std::env::vars_os() {
        std::env::remove_var(name);
    }
    for (name, value) in &request.environment {
        if !name.is_empty() && !name.as_encoded_bytes().contains(&b'=') {
            std::env::set_var(name, value);
        }
    }
}

/// Takes the launcher's streams and folder.
fn adopt(request: &wire::Request, streams: [OwnedFd; 3]) {
    for (target, stream) in streams.iter().enumerate() {
        // SAFETY: replaces standard streams with the launcher's; the originals are closed after.
        unsafe { libc::dup2(stream.as_raw_fd(), target as RawFd) };
    }
    drop(streams);
    if let Err(error) = std::env::set_current_dir(&request.directory) {
        eprintln!("quasi: cannot enter {}: {error}", request.directory.display());
    }
}
