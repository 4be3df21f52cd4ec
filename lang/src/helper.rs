//! Helper processes: work that may end the process, hang or take all its memory — a library's
//! initialisers (`load-library`) — runs first in a child that executes this same binary again
//! (`/proc/self/exe`). A hook in `.init_array`, which runs before the `main` of any binary that
//! links this crate (the REPL, the kernel, tests, benches), finds `QUASI_HELPER` in its
//! environment, does the job, writes its answer on standard output and ends the process, so
//! the binary's own `main` never runs. The parent reads the answer, or how the child ended (an
//! exit, a signal), and kills it when the session is interrupted.

use std::io::Read;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// The environment variable that makes a process a helper, naming its job.
const JOB_VARIABLE: &std::ffi::CStr = c"QUASI_HELPER";
/// The job's argument.
const ARGUMENT_VARIABLE: &std::ffi::CStr = c"QUASI_HELPER_ARGUMENT";

/// The job that loads a library (`probe_library`).
pub(crate) const LOAD_LIBRARY: &str = "load-library";

/// Most bytes of a helper's standard error kept for the message.
const KEPT_ERRORS: usize = 4096;

#[used]
#[link_section = ".init_array"]
static HELPER_HOOK: extern "C" fn() = run_if_asked;

/// The hook: a helper does its job and ends here; any other process goes on to `main`.
extern "C" fn run_if_asked() {
    // SAFETY: getenv reads the environment, which the C runtime set up before any initialiser.
    let job = unsafe { libc::getenv(JOB_VARIABLE.as_ptr()) };
    if job.is_null() {
        return;
    }
    // SAFETY: as above; both are NUL-terminated strings of the environment.
    let (job, argument) = unsafe {
        let argument = libc::getenv(ARGUMENT_VARIABLE.as_ptr());
        let argument = if argument.is_null() { c"".as_ptr() } else { argument };
        (std::ffi::CStr::from_ptr(job), std::ffi::CStr::from_ptr(argument))
    };
    let status = match job.to_bytes() {
        b"load-library" => probe_library(argument),
        _ => 70,
    };
    // SAFETY: ends the helper at once: nothing of `main` is to run.
    unsafe { libc::_exit(status) }
}

/// Loads the library `path` as the session would (`RTLD_NOW | RTLD_LOCAL`); answers `ok`, or
/// `error` and the loader's message. The library's own output goes to /dev/null, so that only
/// the answer is on standard output.
fn probe_library(path: &std::ffi::CStr) -> i32 {
    // SAFETY: descriptors of this process only; dlopen runs the initialisers, which is the job.
    unsafe {
        let answer = libc::dup(1);
        let null = libc::open(c"/dev/null".as_ptr(), libc::O_WRONLY);
        if answer < 0 || null < 0 {
            return 71;
        }
        libc::dup2(null, 1);
        let handle = libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL);
        let text: Vec<u8> = if handle.is_null() {
            let error = libc::dlerror();
            let mut text = b"error\n".to_vec();
            if !error.is_null() {
                text.extend_from_slice(std::ffi::CStr::from_ptr(error).to_bytes());
            }
            text
        } else {
            b"ok\n".to_vec()
        };
        libc::write(answer, text.as_ptr().cast(), text.len());
    }
    0
}

/// Why a helper gave no answer.
#[derive(Debug)]
pub(crate) enum HelperError {
    /// It could not be started.
    Start,
    /// The session was interrupted; the helper was killed.
    Interrupted,
    /// It ended without answering: `how` ("exit(7)", "signal SIGSEGV"), and the end of what it
    /// wrote on standard error.
    Ended { how: String, errors: String },
}

/// Runs helper `job` on `argument` and returns what it wrote on standard output. `limit` bounds
/// its address space (bytes); setting `interrupt` kills it.
pub(crate) fn run(
    job: &str,
    argument: &str,
    limit: Option<u64>,
    interrupt: &AtomicBool,
) -> Result<Vec<u8>, HelperError> {
    let mut command = Command::new("/proc/self/exe");
    command
        .env(JOB_VARIABLE.to_str().unwrap_or_default(), job)
        .env(ARGUMENT_VARIABLE.to_str().unwrap_or_default(), argument)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // SAFETY: prctl and setrlimit are async-signal-safe.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut command, move || {
            // It dies with the thread that started it.
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong);
            if let Some(bytes) = limit {
                let bound = libc::rlimit { rlim_cur: bytes, rlim_max: bytes };
                libc::setrlimit(libc::RLIMIT_AS, &bound);
            }
            Ok(())
        });
    }
    let mut child = command.spawn().map_err(|_| HelperError::Start)?;
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
    let answer = drain(child.stdout.take().map(|pipe| Box::new(pipe) as Box<dyn Read + Send>), 1 << 20);
    let errors = drain(child.stderr.take().map(|pipe| Box::new(pipe) as Box<dyn Read + Send>), KEPT_ERRORS);
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if interrupt.load(Ordering::SeqCst) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(HelperError::Interrupted);
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(2)),
            Err(_) => return Err(HelperError::Start),
        }
    };
    let answer = answer.join().unwrap_or_default();
    let errors = String::from_utf8_lossy(&errors.join().unwrap_or_default()).trim_end().to_string();
    match (status.code(), answer.is_empty()) {
        (Some(0), false) => Ok(answer),
        (Some(code), _) => Err(HelperError::Ended { how: format!("exit({code})"), errors }),
        (None, _) => {
            let signal = std::os::unix::process::ExitStatusExt::signal(&status).unwrap_or(0);
            let how = match signal {
                libc::SIGABRT => "abort() (SIGABRT)".to_string(),
                other => format!("signal {}", crate::guard::signal_name(other)),
            };
            Err(HelperError::Ended { how, errors })
        }
    }
}
