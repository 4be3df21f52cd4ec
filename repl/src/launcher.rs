//! `quasi`: a small launcher in front of `quasi-engine`, the front end that links LLVM.
//!
//! Starting the engine costs milliseconds (mapping and initialising LLVM); this binary links
//! only std, libc and nix and starts in under one. `quasi run` with a `quasi server`
//! running hands the run to the server's prepared worker and relays its status; with none
//! running, it starts one in the background for the runs to come (as sccache starts its
//! server), unless `QUASI_SERVER=0`. Everything else, and a run no server took, becomes the
//! engine (`exec`, same process, same arguments).

#[macro_use]
#[path = "streams.rs"]
mod streams;

// The server's half of the protocol is unused here.
#[allow(dead_code)]
#[path = "server/wire.rs"]
mod wire;

use std::ffi::{CString, OsString};
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::Duration;

use wire::Answer;

fn main() {
    let mut arguments = std::env::args_os();
    let name = arguments.next().unwrap_or_else(|| "quasi".into());
    let arguments: Vec<OsString> = arguments.collect();
    let engine = match std::env::current_exe() {
        Ok(path) => path.with_file_name(wire::ENGINE),
        Err(error) => {
            eprintln!("quasi: cannot find this executable's path: {error}");
            std::process::exit(1);
        }
    };
    if arguments.first().is_some_and(|first| first == "run") && wire::may_use_server(&arguments[1..]) {
        match connect(&engine) {
            // A server that took the run decides its status; one that could not, or did not
            // answer in time, leaves the run to the engine here, as if no server were running.
            Server::Connected(stream) => {
                if let Some(status) = served(&stream, arguments[1..].to_vec()) {
                    std::process::exit(status);
                }
            }
            Server::Busy => {}
            Server::None => start_server_in_background(&engine),
        }
    }
    let error = std::process::Command::new(&engine).arg0(name).args(arguments).exec();
    eprintln!("quasi: cannot start {}: {error} (`quasi` runs the `quasi-engine` beside it)", engine.display());
    std::process::exit(1);
}

/// What `connect` found.
enum Server {
    Connected(UnixStream),
    /// A server whose queue of connections is full: it is not answering.
    Busy,
    None,
}

/// The server of this engine, when one is running in this user's private socket folder. The
/// connection is made without waiting: a server whose queue is full is `Busy`.
fn connect(engine: &std::path::Path) -> Server {
    use nix::sys::socket::{socket, AddressFamily, SockFlag, SockType, UnixAddr};
    let Some(path) = wire::socket_path(engine).ok() else { return Server::None };
    if !path.parent().is_some_and(wire::directory_is_private) {
        return Server::None;
    }
    let flags = SockFlag::SOCK_CLOEXEC | SockFlag::SOCK_NONBLOCK;
    let (Ok(address), Ok(fd)) = (UnixAddr::new(&path), socket(AddressFamily::Unix, SockType::Stream, flags, None))
    else {
        return Server::None;
    };
    match nix::sys::socket::connect(fd.as_raw_fd(), &address) {
        Ok(()) => {
            let stream = UnixStream::from(fd);
            match stream.set_nonblocking(false) {
                Ok(()) => Server::Connected(stream),
                Err(_) => Server::None,
            }
        }
        Err(nix::errno::Errno::EAGAIN) => Server::Busy,
        Err(_) => Server::None,
    }
}

/// How long a run waits for a server's worker to take it before it runs in process:
/// `QUASI_SERVER_WAIT_MS`, else 3 s. A worker is usually ready at once; a server that is
/// starting takes a fraction of a second.
fn worker_wait() -> Duration {
    let milliseconds = std::env::var("QUASI_SERVER_WAIT_MS").ok().and_then(|text| text.parse().ok());
    Duration::from_millis(milliseconds.unwrap_or(3000))
}

/// How long a server `quasi run` started waits for a run before it ends.
const STARTED_IDLE_MINUTES: &std::ffi::CStr = c"10";

/// No server runs: `quasi server start --idle 10` is started for the runs to come, in a
/// session of its own (Ctrl-C of this run does not reach it; it never holds the terminal),
/// its streams on /dev/null, while this run goes on in process. Not when the socket folder
/// exists and is not private (the server would refuse it, at every run). A server already
/// starting, or started meanwhile by another run, makes the new one end at once.
fn start_server_in_background(engine: &std::path::Path) {
    let directory = wire::socket_directory();
    if directory.exists() && !wire::directory_is_private(&directory) {
        return;
    }
    // Made before forking: the children call only async-signal-safe functions.
    let Ok(program) = CString::new(engine.as_os_str().as_bytes()) else { return };
    let argv = [c"quasi", c"server", c"start", c"--idle", STARTED_IDLE_MINUTES];
    let argv: Vec<*const libc::c_char> =
        argv.iter().map(|argument| argument.as_ptr()).chain(std::iter::once(std::ptr::null())).collect();
    // SAFETY: this process has one thread. The child forks again and ends at once, so the
    // starting server is nobody's child here (the engine this process becomes, and the program
    // it runs, never see it among their children); the grandchild only calls setsid,
    // `streams_to_null` (open, dup2, close), close_range, chdir and execv before it is the engine.
    unsafe {
        match libc::fork() {
            -1 => {}
            0 => {
                if libc::fork() == 0 {
                    libc::setsid();
                    wire::streams_to_null();
                    libc::close_range(3, libc::c_uint::MAX, 0);
                    libc::chdir(c"/".as_ptr());
                    libc::execv(program.as_ptr(), argv.as_ptr());
                }
                libc::_exit(0);
            }
            child => {
                libc::waitpid(child, std::ptr::null_mut(), 0);
            }
        }
    }
}

/// The worker running this launcher's request, for the signal handler.
static WORKER: AtomicI32 = AtomicI32::new(0);

extern "C" fn forward(signal: libc::c_int) {
    let worker = WORKER.load(Ordering::SeqCst);
    if worker > 0 {
        // SAFETY: kill is async-signal-safe; the worker is ours (same user), and the server
        // kills it, not another process, should it end while this runs.
        unsafe { libc::kill(worker, signal) };
    }
}

/// Ctrl-Z: the worker stops with this process, and goes on when it does (job control, which
/// the shell applies to this process only).
extern "C" fn suspend(_: libc::c_int) {
    let worker = WORKER.load(Ordering::SeqCst);
    // SAFETY: kill, signal, sigprocmask and raise are async-signal-safe. The default action
    // stops this process inside `raise` (SIGTSTP is unblocked first: it is blocked while its
    // handler runs); SIGCONT resumes it there.
    unsafe {
        if worker > 0 {
            libc::kill(worker, libc::SIGSTOP);
        }
        libc::signal(libc::SIGTSTP, libc::SIG_DFL);
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGTSTP);
        libc::sigprocmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
        libc::raise(libc::SIGTSTP);
        libc::signal(libc::SIGTSTP, suspend as *const () as libc::sighandler_t);
        if worker > 0 {
            libc::kill(worker, libc::SIGCONT);
        }
    }
}

/// Runs the request on the server: `None` if it was not taken (nothing ran), else the status
/// to exit with.
fn served(stream: &UnixStream, run_arguments: Vec<OsString>) -> Option<i32> {
    let request = wire::Request::here(run_arguments).ok()?;
    stream.set_write_timeout(Some(worker_wait())).ok()?;
    wire::send_request(stream, &request).ok()?;
    stream.set_read_timeout(Some(worker_wait())).ok()?;
    let Ok(Some(Answer::Worker(pid))) = Answer::read(stream) else {
        // Not taken in time: the worker that takes it now finds the connection closed before
        // it is told to go, and runs nothing.
        let _ = stream.shutdown(std::net::Shutdown::Both);
        return None;
    };
    stream.set_read_timeout(None).ok()?;
    // The run is this launcher's from now on: the worker may start.
    wire::send_go(stream).ok()?;
    WORKER.store(pid, Ordering::SeqCst);
    // Ctrl-C and the like reach this process (the terminal's foreground); the worker gets them.
    for signal in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT] {
        // SAFETY: `forward` only loads an atomic and calls kill, both async-signal-safe.
        unsafe { libc::signal(signal, forward as *const () as libc::sighandler_t) };
    }
    // SAFETY: as above, for `suspend`.
    unsafe { libc::signal(libc::SIGTSTP, suspend as *const () as libc::sighandler_t) };
    // read_exact goes on through signals that interrupt it.
    Some(match Answer::read(stream) {
        Ok(Some(Answer::Exited(status))) => status,
        Ok(Some(Answer::Signalled(signal))) => {
            // Ended as the worker ended, so a shell sees the same.
            // SAFETY: restoring the default action and raising a signal in this process.
            unsafe {
                libc::signal(signal, libc::SIG_DFL);
                libc::raise(signal);
            }
            128 + signal
        }
        Ok(other) => {
            eprintln!("quasi: the server ended the run without its status ({other:?})");
            1
        }
        Err(error) => {
            eprintln!("quasi: lost the server while it ran the program: {error}");
            1
        }
    })
}
