//! Helper processes: work that may end the process, hang or take all its memory — a library's
//! initialisers (`load-library`), libclang's parse of a header (`include`) — runs in a child
//! that executes this same binary again (`/proc/self/exe`). A job's hook (`helper_job!`) in
//! `.init_array`, which runs before the `main` of any binary that links this crate (the REPL,
//! the kernel, tests, benches), finds `QUASI_HELPER` naming it in the environment, does the
//! job, writes its answer on standard output and ends the process, so the binary's own `main`
//! never runs. The parent reads the answer, or how the child ended (an exit, a signal), within
//! limits of memory and processor time it sets, and kills it when the session is interrupted.

use std::io::Read;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// The environment variable that makes a process a helper, naming its job.
const JOB_VARIABLE: &std::ffi::CStr = c"QUASI_HELPER";
/// The job's argument.
const ARGUMENT_VARIABLE: &std::ffi::CStr = c"QUASI_HELPER_ARGUMENT";

/// The parent's pid: the helper ends if it has another (its parent died before it could ask
/// to die with it).
const PARENT_VARIABLE: &std::ffi::CStr = c"QUASI_HELPER_PARENT";
/// Its address space, in bytes.
const MEMORY_VARIABLE: &std::ffi::CStr = c"QUASI_HELPER_MEMORY";
/// Its processor time, in seconds.
const SECONDS_VARIABLE: &std::ffi::CStr = c"QUASI_HELPER_SECONDS";

/// In a helper, before its job: it dies with its parent, and takes the limits `run` gave it
/// (the job cannot undo them: it runs after, and a hard limit is never raised again).
pub(crate) fn bound_self() {
    let number = |variable: &std::ffi::CStr| -> Option<u64> {
        // SAFETY: as in `asked`.
        let value = unsafe { libc::getenv(variable.as_ptr()) };
        // SAFETY: a NUL-terminated string of the environment.
        (!value.is_null()).then(|| unsafe { std::ffi::CStr::from_ptr(value) }.to_str().ok()?.parse().ok()).flatten()
    };
    // SAFETY: prctl, getppid and setrlimit with plain values; _exit ends the process.
    unsafe {
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong);
        if number(PARENT_VARIABLE).is_some_and(|parent| parent != libc::getppid() as u64) {
            libc::_exit(75);
        }
        if let Some(bytes) = number(MEMORY_VARIABLE) {
            let bound = libc::rlimit { rlim_cur: bytes, rlim_max: bytes };
            libc::setrlimit(libc::RLIMIT_AS, &bound);
        }
        if let Some(seconds) = number(SECONDS_VARIABLE) {
            // SIGXCPU at the soft limit, SIGKILL a second later.
            let bound = libc::rlimit { rlim_cur: seconds, rlim_max: seconds + 1 };
            libc::setrlimit(libc::RLIMIT_CPU, &bound);
        }
    }
}

/// Most bytes of a helper's standard error kept for the message.
const KEPT_ERRORS: usize = 4096;

/// A helper job's hook: in `.init_array` (before `main`), `helper_job!(NAME, job)` runs
/// `job(argument)` and ends the process with its status when this process is helper NAME.
macro_rules! helper_job {
    ($name:expr, $job:path) => {
        const _: () = {
            extern "C" fn run_if_asked() {
                if let Some(argument) = $crate::helper::asked($name) {
                    $crate::helper::bound_self();
                    let status = $job(argument);
                    // SAFETY: ends the helper at once: nothing of `main` is to run.
                    unsafe { libc::_exit(status) }
                }
            }
            #[used]
            #[link_section = ".init_array"]
            static HOOK: extern "C" fn() = run_if_asked;
        };
    };
}
pub(crate) use helper_job;

/// When this process is helper `job`: its argument.
pub(crate) fn asked(job: &str) -> Option<&'static std::ffi::CStr> {
    // SAFETY: getenv reads the environment, which the C runtime set up before any initialiser;
    // its strings live as long as the environment is not changed, which a helper never does.
    unsafe {
        let named = libc::getenv(JOB_VARIABLE.as_ptr());
        if named.is_null() || std::ffi::CStr::from_ptr(named).to_bytes() != job.as_bytes() {
            return None;
        }
        let argument = libc::getenv(ARGUMENT_VARIABLE.as_ptr());
        Some(if argument.is_null() { c"" } else { std::ffi::CStr::from_ptr(argument) })
    }
}

/// Writes `answer` on the descriptor that was standard output when the helper started; while
/// `work` runs, standard output goes to standard error, so that only the answer is on it (a
/// library's initialisers, libclang may print). Returns the helper's status.
pub(crate) fn answer_with(work: impl FnOnce() -> Vec<u8>) -> i32 {
    // SAFETY: descriptors of this process only.
    let saved = unsafe {
        let saved = libc::dup(1);
        if saved < 0 || libc::dup2(2, 1) < 0 {
            return 71;
        }
        saved
    };
    let answer = work();
    let mut written = 0;
    while written < answer.len() {
        // SAFETY: writes from a live buffer of its length.
        let count = unsafe { libc::write(saved, answer[written..].as_ptr().cast(), answer.len() - written) };
        if count <= 0 {
            return 74;
        }
        written += count as usize;
    }
    0
}

/// What bounds a helper: its address space, its processor time, its answer's size.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Limits {
    pub memory: Option<u64>,
    pub cpu_seconds: Option<u64>,
    pub answer: usize,
}

/// Why a helper gave no answer.
#[derive(Debug)]
pub(crate) enum HelperError {
    /// It could not be started.
    Start,
    /// The session was interrupted; the helper was killed.
    Interrupted,
    /// It ended without answering: how, and the end of what it wrote on standard error.
    Ended { end: HelperEnd, errors: String },
}

/// How a helper's process ended without an answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) enum HelperEnd {
    /// It exited with this status.
    Exit(i32),
    /// A signal ended it.
    Signal(i32),
}

impl std::fmt::Display for HelperEnd {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            HelperEnd::Exit(code) => write!(formatter, "exit({code})"),
            HelperEnd::Signal(libc::SIGABRT) => write!(formatter, "abort() (SIGABRT)"),
            HelperEnd::Signal(signal) => write!(formatter, "signal {}", crate::guard::signal_name(signal)),
        }
    }
}

/// Whether the child `pid` has ended, without reaping it (until it is reaped its pid, and the
/// id of a process group it leads, cannot be anybody else's). `quasi test` uses it too.
pub fn has_ended(pid: i32) -> bool {
    // SAFETY: waitid writes the siginfo it is given; WNOWAIT leaves the child to be reaped.
    unsafe {
        let mut info: libc::siginfo_t = std::mem::zeroed();
        let found =
            libc::waitid(libc::P_PID, pid as libc::id_t, &mut info, libc::WEXITED | libc::WNOHANG | libc::WNOWAIT);
        // An error (no such child) counts as ended: `wait` then says why.
        found != 0 || info.si_pid() != 0
    }
}

/// Runs helper `job` on `argument` within `limits` and returns what it wrote on standard
/// output; setting `interrupt` kills it.
pub(crate) fn run(job: &str, argument: &str, limits: Limits, interrupt: &AtomicBool) -> Result<Vec<u8>, HelperError> {
    let mut command = Command::new("/proc/self/exe");
    command
        .env(JOB_VARIABLE.to_str().unwrap_or_default(), job)
        .env(ARGUMENT_VARIABLE.to_str().unwrap_or_default(), argument)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // The helper sets its own limits before its job (`bound_self`): without a `pre_exec`, the
    // child is spawned without copying this process's pages (posix_spawn), a third of a first
    // include's time in a large process.
    command.env(PARENT_VARIABLE.to_str().unwrap_or_default(), std::process::id().to_string());
    if let Some(bytes) = limits.memory {
        command.env(MEMORY_VARIABLE.to_str().unwrap_or_default(), bytes.to_string());
    }
    if let Some(seconds) = limits.cpu_seconds {
        command.env(SECONDS_VARIABLE.to_str().unwrap_or_default(), seconds.to_string());
    }
    // A group of its own: what its job forks (a library's constructor may) is killed with it,
    // and cannot keep its output open.
    std::os::unix::process::CommandExt::process_group(&mut command, 0);
    let mut child = command.spawn().map_err(|_| HelperError::Start)?;
    let group = child.id() as i32;
    // SAFETY: kill of the helper's process group, before the helper is reaped (until then its
    // pid, the group's id, cannot be anybody else's).
    let kill_group = || unsafe { libc::kill(-group, libc::SIGKILL) };
    let drain = |pipe: Option<Box<dyn Read + Send>>, keep: usize| {
        std::thread::spawn(move || {
            let mut kept = Vec::new();
            if let Some(mut pipe) = pipe {
                // Read to the end (a helper must never wait on a full pipe); keep the first
                // `keep` bytes.
                let _ = (&mut pipe).take(keep as u64).read_to_end(&mut kept);
                let _ = std::io::copy(&mut pipe, &mut std::io::sink());
            }
            kept
        })
    };
    let answer = drain(child.stdout.take().map(|pipe| Box::new(pipe) as Box<dyn Read + Send>), limits.answer);
    let errors = drain(child.stderr.take().map(|pipe| Box::new(pipe) as Box<dyn Read + Send>), KEPT_ERRORS);
    while !has_ended(group) {
        if interrupt.load(Ordering::SeqCst) {
            kill_group();
            let _ = child.wait();
            return Err(HelperError::Interrupted);
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    kill_group();
    let status = child.wait().map_err(|_| HelperError::Start)?;
    let answer = answer.join().unwrap_or_default();
    let errors = String::from_utf8_lossy(&errors.join().unwrap_or_default()).trim_end().to_string();
    match (status.code(), answer.is_empty()) {
        (Some(0), false) => Ok(answer),
        (Some(code), _) => Err(HelperError::Ended { end: HelperEnd::Exit(code), errors }),
        (None, _) => {
            let signal = std::os::unix::process::ExitStatusExt::signal(&status).unwrap_or(0);
            Err(HelperError::Ended { end: HelperEnd::Signal(signal), errors })
        }
    }
}
