//! Programs compiled when they are saved. The server remembers the programs it ran last (each
//! with its run's request: folder, arguments, environment) and watches their folders
//! (inotify). When one is written, it forks a compiler from its prepared session, which takes
//! that request's folder, environment and `--opt`, compiles the file into the object cache as
//! `quasi run` would, and runs nothing: the run that follows the save links the stored object,
//! as a program run before does, instead of optimising and compiling it while the user waits.
//!
//! The compiler is a fork of the same prepared session a spare is, so the module it compiles is
//! the one the run compiles (the cache key is that module's IR: any difference, say another
//! environment, only makes the run compile it itself). It runs at a lower priority, and a
//! newer save of the same program replaces it.

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify, WatchDescriptor};
use quasi_lang::Session;

use super::wire::Request;

/// How long after a program's last write it is compiled: an editor's save may be several
/// writes (truncate, write, close; or a new file renamed over it).
const SAVE_SETTLE: Duration = Duration::from_millis(10);

/// How many of the programs run last are watched.
const WATCHED: usize = 16;

/// A compiler at work.
struct Compiler {
    program: PathBuf,
    pid: i32,
    /// Readable when the process has ended.
    pidfd: OwnedFd,
}

/// The programs watched, their saves, and the compilers at work.
pub(super) struct Saved {
    inotify: Option<Inotify>,
    folders: HashMap<WatchDescriptor, PathBuf>,
    /// Oldest first: a program's absolute path, and the request of its last run.
    programs: Vec<(PathBuf, Request)>,
    /// Programs written since they were last compiled, with when.
    written: HashMap<PathBuf, Instant>,
    compilers: Vec<Compiler>,
    /// Compilers started so far, for `status`.
    pub(super) compiled: u64,
}

impl Saved {
    pub(super) fn new() -> Saved {
        Saved {
            // Without inotify the server serves as well; saved programs are compiled by their runs.
            inotify: Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC).ok(),
            folders: HashMap::new(),
            programs: Vec::new(),
            written: HashMap::new(),
            compilers: Vec::new(),
            compiled: 0,
        }
    }

    /// A run was served: its program is watched from now on.
    pub(super) fn remember(&mut self, request: Request) {
        let Some(inotify) = &self.inotify else { return };
        let Some(file) = program_file(&request.arguments) else { return };
        // One name per file, however the runs spell it (the compile uses the run's spelling).
        let Ok(program) = std::fs::canonicalize(request.directory.join(file)) else { return };
        let Some(folder) = program.parent().map(Path::to_path_buf) else { return };
        let Ok(watch) = inotify.add_watch(&folder, AddWatchFlags::IN_CLOSE_WRITE | AddWatchFlags::IN_MOVED_TO) else {
            return;
        };
        self.folders.insert(watch, folder);
        // This run reads the program as it is now: a write before it needs no compile of its own.
        self.written.remove(&program);
        self.programs.retain(|(known, _)| *known != program);
        self.programs.push((program, request));
        if self.programs.len() > WATCHED {
            let (forgotten, _) = self.programs.remove(0);
            self.written.remove(&forgotten);
            let folder = forgotten.parent();
            if !self.programs.iter().any(|(program, _)| program.parent() == folder) {
                let watches: Vec<WatchDescriptor> = self
                    .folders
                    .iter()
                    .filter(|(_, watched)| Some(watched.as_path()) == folder)
                    .map(|(w, _)| *w)
                    .collect();
                for watch in watches {
                    self.folders.remove(&watch);
                    let _ = inotify.rm_watch(watch);
                }
            }
        }
    }

    /// How many programs are watched, for `status`.
    pub(super) fn watched(&self) -> usize {
        self.programs.len()
    }

    /// The descriptors the server polls for this: inotify's and the compilers'.
    pub(super) fn descriptors(&self) -> Vec<RawFd> {
        let inotify = self.inotify.iter().map(|inotify| inotify.as_fd().as_raw_fd());
        inotify.chain(self.compilers.iter().map(|compiler| compiler.pidfd.as_raw_fd())).collect()
    }

    /// How long until a written program is due to be compiled (`None`: none is written).
    pub(super) fn due_in(&self) -> Option<Duration> {
        self.written.values().map(|written| (*written + SAVE_SETTLE).saturating_duration_since(Instant::now())).min()
    }

    /// After a poll: takes note of writes and of compilers that ended.
    pub(super) fn readable(&mut self, ready: &[RawFd]) {
        if let Some(inotify) = self.inotify.as_ref().filter(|inotify| ready.contains(&inotify.as_fd().as_raw_fd())) {
            for event in inotify.read_events().unwrap_or_default() {
                let (Some(folder), Some(name)) = (self.folders.get(&event.wd), &event.name) else { continue };
                let path = folder.join(name);
                if self.programs.iter().any(|(program, _)| *program == path) {
                    self.written.insert(path, Instant::now());
                }
            }
        }
        self.compilers.retain(|compiler| {
            if !ready.contains(&compiler.pidfd.as_raw_fd()) {
                return true;
            }
            super::reap(compiler.pid);
            false
        });
    }

    /// Forks a compiler for every program written `SAVE_SETTLE` ago, in place of one still at
    /// work on an older version. `closed`: the server's descriptors, which a compiler closes.
    pub(super) fn compile_due(&mut self, prepared: &mut Option<Session>, closed: &[RawFd]) {
        let now = Instant::now();
        let due: Vec<PathBuf> =
            self.written.iter().filter(|(_, written)| now >= **written + SAVE_SETTLE).map(|(p, _)| p.clone()).collect();
        for program in due {
            self.written.remove(&program);
            self.compilers.retain(|compiler| {
                if compiler.program != program {
                    return true;
                }
                super::end_child(compiler.pid);
                false
            });
            let Some((_, request)) = self.programs.iter().find(|(known, _)| *known == program) else { continue };
            let mut closed = closed.to_vec();
            closed.extend(self.descriptors());
            match fork_compiler(prepared, request, &closed) {
                Ok((pid, pidfd)) => {
                    self.compilers.push(Compiler { program, pid, pidfd });
                    self.compiled += 1;
                }
                Err(error) => eprintln!("quasi server: cannot fork a compiler: {error}"),
            }
        }
    }

    /// The server ends: compilers at work end too.
    pub(super) fn stop(&mut self) {
        for compiler in self.compilers.drain(..) {
            super::end_child(compiler.pid);
        }
    }
}

/// The file `quasi run ARGUMENTS…` runs: the first argument after its flags (as `parse_run`
/// reads them); not standard input's `-`.
fn program_file(arguments: &[OsString]) -> Option<&OsStr> {
    let mut arguments = arguments.iter();
    while let Some(argument) = arguments.next() {
        match argument.to_str() {
            Some("--warnings") => {}
            Some("--opt") => {
                arguments.next()?;
            }
            Some("-") => return None,
            _ => return Some(argument),
        }
    }
    None
}

/// A compiler: a fork with the prepared session, which takes the request's folder, umask and
/// environment (not its streams: the server's are on /dev/null and its log), compiles the
/// program and ends without its teardown.
fn fork_compiler(
    prepared: &mut Option<Session>,
    request: &Request,
    closed: &[RawFd],
) -> std::io::Result<(i32, OwnedFd)> {
    super::fork_child(closed, || {
        // SAFETY: plain calls on this process.
        unsafe {
            libc::setpriority(libc::PRIO_PROCESS, 0, 10);
            libc::umask(request.umask as libc::mode_t);
        }
        if std::env::set_current_dir(&request.directory).is_ok() {
            super::take_environment(request);
            if let Some(session) = prepared.take() {
                crate::compile_prepared(session, request.arguments.clone());
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_program_is_the_first_argument_after_the_flags() {
        let arguments = |list: &[&str]| list.iter().map(OsString::from).collect::<Vec<_>>();
        assert_eq!(program_file(&arguments(&["a.cl", "x"])), Some(OsStr::new("a.cl")));
        assert_eq!(program_file(&arguments(&["--opt", "1", "--warnings", "b.cl"])), Some(OsStr::new("b.cl")));
        assert_eq!(program_file(&arguments(&["--opt"])), None);
        assert_eq!(program_file(&arguments(&["-"])), None);
        assert_eq!(program_file(&arguments(&[])), None);
    }
}
