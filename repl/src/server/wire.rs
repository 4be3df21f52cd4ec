//! What the `quasi` launcher and `quasi server` share: where the server's socket is, and the
//! messages of one run. Included by both binaries (`#[path]`), so it uses only std, libc and nix:
//! the launcher must not link LLVM, or it would start as slowly as the engine.
//!
//! A run, on one Unix stream connection:
//! 1. the launcher sends its standard input, output and error (SCM_RIGHTS) with a request: the
//!    current directory, umask, resource limits, the arguments after `run`, the environment;
//! 2. the worker that takes it answers `P` and its process id (where to forward signals);
//! 3. the worker answers `X` and its exit status once the program's output is out; a worker that
//!    ends otherwise is reported by the server: `X` and its status, or `S` and the signal.
//!    The launcher reads the first of these.

use std::ffi::{OsStr, OsString};
use std::io::{self, IoSlice, IoSliceMut, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};

use nix::sys::socket::{recvmsg, sendmsg, ControlMessage, ControlMessageOwned, MsgFlags};

/// The engine binary, beside the launcher.
pub const ENGINE: &str = "quasi-engine";

/// Set to `0`, `quasi run` never asks a server.
pub const SERVER_VARIABLE: &str = "QUASI_SERVER";

/// The largest request: arguments and environment (Linux's own limit on both is 2 MiB).
const MAX_REQUEST: usize = 4 << 20;

/// This process's real user id.
pub fn uid() -> u32 {
    // SAFETY: getuid has no preconditions and cannot fail.
    unsafe { libc::getuid() }
}

/// The folder of this user's server sockets: `$XDG_RUNTIME_DIR/quasi`, else `/tmp/quasi-UID`.
pub fn socket_directory() -> PathBuf {
    match std::env::var_os("XDG_RUNTIME_DIR").filter(|value| !value.is_empty()).map(PathBuf::from) {
        Some(runtime) if runtime.is_absolute() => runtime.join("quasi"),
        _ => std::env::temp_dir().join(format!("quasi-{}", uid())),
    }
}

/// Whether `directory` can be trusted with this user's files: a real folder (not a link) that
/// the user owns and nobody else may write to or enter.
pub fn directory_is_private(directory: &Path) -> bool {
    std::fs::symlink_metadata(directory).is_ok_and(|metadata| {
        metadata.is_dir() && metadata.uid() == uid() && metadata.permissions().mode() & 0o077 == 0
    })
}

/// The socket of the server running `engine`: named after the engine file itself (device,
/// inode, size, modification time), so a rebuilt engine is never served by an older server.
pub fn socket_path(engine: &Path) -> io::Result<PathBuf> {
    let metadata = std::fs::metadata(engine)?;
    // FNV-1a: stable across builds, unlike std's hasher, and enough to tell builds apart.
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for value in
        [metadata.dev(), metadata.ino(), metadata.size(), metadata.mtime() as u64, metadata.mtime_nsec() as u64]
    {
        for byte in value.to_le_bytes() {
            hash = (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3);
        }
    }
    Ok(socket_directory().join(format!("server-{hash:016x}.sock")))
}

/// What a launcher asks a server to run: `quasi run`'s arguments in the launcher's directory
/// and environment.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Request {
    pub directory: PathBuf,
    /// The file mode creation mask.
    pub umask: u32,
    /// Resource limits (`LIMITS`): resource, soft, hard.
    pub limits: Vec<(u32, u64, u64)>,
    /// The arguments after `run`.
    pub arguments: Vec<OsString>,
    pub environment: Vec<(OsString, OsString)>,
}

/// The resource limits a launcher passes on. Not the stack's: a worker runs its session on its
/// main thread, under the larger limit the server set.
pub const LIMITS: [u32; 7] = [
    libc::RLIMIT_AS,
    libc::RLIMIT_CORE,
    libc::RLIMIT_CPU,
    libc::RLIMIT_DATA,
    libc::RLIMIT_FSIZE,
    libc::RLIMIT_NOFILE,
    libc::RLIMIT_MEMLOCK,
];

impl Request {
    /// This process's request for `arguments`.
    pub fn here(arguments: Vec<OsString>) -> io::Result<Request> {
        // SAFETY: umask only swaps the mask; it is put back at once (one thread).
        let umask = unsafe {
            let mask = libc::umask(0o022);
            libc::umask(mask);
            mask
        };
        let limits = LIMITS
            .iter()
            .filter_map(|&resource| {
                let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
                // SAFETY: getrlimit writes the struct given.
                (unsafe { libc::getrlimit(resource, &mut limit) } == 0).then_some((
                    resource,
                    limit.rlim_cur,
                    limit.rlim_max,
                ))
            })
            .collect();
        Ok(Request {
            directory: std::env::current_dir()?,
            umask,
            limits,
            arguments,
            environment: std::env::vars_os().collect(),
        })
    }

    /// Takes this request's mask and limits (as far as this process may: a limit above its own
    /// hard limit stays at that).
    pub fn apply_limits(&self) {
        // SAFETY: umask and setrlimit take plain values.
        unsafe {
            libc::umask(self.umask as libc::mode_t);
            for &(resource, soft, hard) in self.limits.iter().filter(|(resource, ..)| LIMITS.contains(resource)) {
                let mut own = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
                if libc::getrlimit(resource, &mut own) == 0 {
                    let hard = hard.min(own.rlim_max);
                    let limit = libc::rlimit { rlim_cur: soft.min(hard), rlim_max: hard };
                    libc::setrlimit(resource, &limit);
                }
            }
        }
    }

    fn encode(&self) -> Vec<u8> {
        let mut bytes = Vec::new();
        let mut put = |item: &[u8]| {
            bytes.extend_from_slice(&(item.len() as u32).to_le_bytes());
            bytes.extend_from_slice(item);
        };
        put(self.directory.as_os_str().as_bytes());
        put(&self.umask.to_le_bytes());
        put(&(self.limits.len() as u32).to_le_bytes());
        for (resource, soft, hard) in &self.limits {
            let mut limit = resource.to_le_bytes().to_vec();
            limit.extend_from_slice(&soft.to_le_bytes());
            limit.extend_from_slice(&hard.to_le_bytes());
            put(&limit);
        }
        put(&(self.arguments.len() as u32).to_le_bytes());
        for argument in &self.arguments {
            put(argument.as_bytes());
        }
        for (name, value) in &self.environment {
            put(name.as_bytes());
            put(value.as_bytes());
        }
        bytes
    }

    fn decode(mut bytes: &[u8]) -> Option<Request> {
        let mut take = || -> Option<Vec<u8>> {
            let length = u32::from_le_bytes(bytes.get(..4)?.try_into().ok()?) as usize;
            let item = bytes.get(4..4 + length)?.to_vec();
            bytes = &bytes[4 + length..];
            Some(item)
        };
        let directory = PathBuf::from(OsString::from_vec(take()?));
        let umask = u32::from_le_bytes(take()?.try_into().ok()?);
        let limits = (0..u32::from_le_bytes(take()?.try_into().ok()?))
            .map(|_| {
                let limit = take()?;
                let resource = u32::from_le_bytes(limit.get(..4)?.try_into().ok()?);
                let soft = u64::from_le_bytes(limit.get(4..12)?.try_into().ok()?);
                let hard = u64::from_le_bytes(limit.get(12..20)?.try_into().ok()?);
                Some((resource, soft, hard))
            })
            .collect::<Option<Vec<_>>>()?;
        let count = u32::from_le_bytes(take()?.try_into().ok()?);
        let arguments = (0..count).map(|_| take().map(OsString::from_vec)).collect::<Option<Vec<_>>>()?;
        let mut environment = Vec::new();
        while let Some(name) = take() {
            environment.push((OsString::from_vec(name), OsString::from_vec(take()?)));
        }
        Some(Request { directory, umask, limits, arguments, environment })
    }
}

/// The launcher's word that the worker that answered may run its request, sent with the
/// launcher's three standard streams: until then the launcher may still give up on the server
/// and run the program itself, and no stream of its is held by a server that does not answer.
const GO: u8 = b'G';

/// Sends `request` (plain data: the streams follow with the go).
pub fn send_request(mut stream: &UnixStream, request: &Request) -> io::Result<()> {
    let body = request.encode();
    let mut message = (body.len() as u32).to_le_bytes().to_vec();
    message.extend_from_slice(&body);
    stream.write_all(&message)
}

/// Receives a request.
pub fn receive_request(mut stream: &UnixStream) -> io::Result<Request> {
    let mut length = [0; 4];
    stream.read_exact(&mut length)?;
    read_request(stream, u32::from_le_bytes(length) as usize)
}

/// Tells the worker to run the request, with this process's standard streams.
pub fn send_go(stream: &UnixStream) -> io::Result<()> {
    let streams = [0, 1, 2];
    sendmsg::<()>(
        stream.as_raw_fd(),
        &[IoSlice::new(&[GO])],
        &[ControlMessage::ScmRights(&streams)],
        MsgFlags::empty(),
        None,
    )?;
    Ok(())
}

/// Waits for the launcher's go (`send_go`) and the three streams that come with it; an error
/// if the launcher closed the connection.
pub fn receive_go(stream: &UnixStream) -> io::Result<[OwnedFd; 3]> {
    let (streams, byte) = receive_fds::<3>(stream, 1)?;
    match byte[0] {
        GO => Ok(streams),
        other => Err(io::Error::new(io::ErrorKind::InvalidData, format!("a go tagged {other}"))),
    }
}

/// Reads a request's body of `length` bytes.
fn read_request(stream: &UnixStream, length: usize) -> io::Result<Request> {
    if length > MAX_REQUEST {
        return Err(io::Error::new(io::ErrorKind::InvalidData, "a request larger than 4 MiB"));
    }
    let mut body = vec![0; length];
    (&*stream).read_exact(&mut body)?;
    Request::decode(&body).ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "a request that is not one"))
}

/// The worker's hand-over to the server: the launcher's connection, the worker's pid and the
/// run's request (which the server keeps, to compile the program again when it is saved). One
/// `sendmsg`, so the server never waits for the rest of a message.
pub fn send_hand_over(stream: &UnixStream, fd: RawFd, pid: i32, request: &Request) -> io::Result<()> {
    let body = request.encode();
    let length = (body.len() as u32).to_le_bytes();
    let pid = pid.to_le_bytes();
    let slices = [IoSlice::new(&pid), IoSlice::new(&length), IoSlice::new(&body)];
    let sent =
        sendmsg::<()>(stream.as_raw_fd(), &slices, &[ControlMessage::ScmRights(&[fd])], MsgFlags::empty(), None)?;
    let whole = 8 + body.len();
    if sent < whole {
        // Larger than the socket's buffer: the rest follows as plain data.
        let mut rest = pid.to_vec();
        rest.extend_from_slice(&length);
        rest.extend_from_slice(&body);
        (&*stream).write_all(&rest[sent..])?;
    }
    Ok(())
}

/// Receives what `send_hand_over` sent: the connection, the pid and the request.
pub fn receive_hand_over(stream: &UnixStream) -> io::Result<(OwnedFd, i32, Request)> {
    let ([fd], bytes) = receive_fds::<1>(stream, 8)?;
    let pid = i32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
    let length = u32::from_le_bytes([bytes[4], bytes[5], bytes[6], bytes[7]]) as usize;
    Ok((fd, pid, read_request(stream, length)?))
}

/// Receives `N` descriptors with the `length` bytes they came with.
fn receive_fds<const N: usize>(stream: &UnixStream, length: usize) -> io::Result<([OwnedFd; N], Vec<u8>)> {
    let mut bytes = vec![0; length];
    let mut space = nix::cmsg_space!([RawFd; 3]);
    let mut received = Vec::new();
    let read = {
        let mut iov = [IoSliceMut::new(&mut bytes)];
        let message = recvmsg::<()>(stream.as_raw_fd(), &mut iov, Some(&mut space), MsgFlags::MSG_CMSG_CLOEXEC)?;
        for control in message.cmsgs()? {
            if let ControlMessageOwned::ScmRights(fds) = control {
                // SAFETY: the kernel just installed these descriptors in this process; nothing
                // else owns them.
                received.extend(fds.into_iter().map(|fd| unsafe { OwnedFd::from_raw_fd(fd) }));
            }
        }
        message.bytes
    };
    if read == 0 {
        return Err(io::ErrorKind::UnexpectedEof.into());
    }
    (&*stream).read_exact(&mut bytes[read..])?;
    let fds: [OwnedFd; N] = received
        .try_into()
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, format!("a message without its {N} descriptors")))?;
    Ok((fds, bytes))
}

/// One of the three answers: the worker's pid, an exit status, a signal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    Worker(i32),
    Exited(i32),
    Signalled(i32),
}

impl Answer {
    pub fn write(self, mut stream: &UnixStream) -> io::Result<()> {
        let (tag, value) = match self {
            Answer::Worker(pid) => (b'P', pid),
            Answer::Exited(status) => (b'X', status),
            Answer::Signalled(signal) => (b'S', signal),
        };
        let mut bytes = [tag, 0, 0, 0, 0];
        bytes[1..].copy_from_slice(&value.to_le_bytes());
        stream.write_all(&bytes)
    }

    /// The next answer, or `None` at the end of the connection.
    pub fn read(mut stream: &UnixStream) -> io::Result<Option<Answer>> {
        let mut bytes = [0; 5];
        match stream.read_exact(&mut bytes) {
            Ok(()) => {}
            Err(error) if error.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
            Err(error) => return Err(error),
        }
        let value = i32::from_le_bytes([bytes[1], bytes[2], bytes[3], bytes[4]]);
        match bytes[0] {
            b'P' => Ok(Some(Answer::Worker(value))),
            b'X' => Ok(Some(Answer::Exited(value))),
            b'S' => Ok(Some(Answer::Signalled(value))),
            other => Err(io::Error::new(io::ErrorKind::InvalidData, format!("an answer tagged {other}"))),
        }
    }
}

/// Points the standard streams at /dev/null, closing what they were (a worker letting the
/// launcher's go; the launcher's child that starts a server; the server itself). A stream that
/// was closed gets /dev/null too (the descriptor opened may be one of them, and stays open).
/// Async-signal-safe.
pub fn streams_to_null() {
    // SAFETY: plain descriptor calls; /dev/null replaces each standard stream in one step.
    unsafe {
        let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR);
        if null >= 0 {
            for target in 0..3 {
                libc::dup2(null, target);
            }
            if null > 2 {
                libc::close(null);
            }
        }
    }
}

/// Whether `quasi run ARGUMENTS…` may go to a server: not when the user said no, and not for
/// GPU modes (a server's sessions start in the default one).
pub fn may_use_server(run_arguments: &[OsString]) -> bool {
    let set = |name: &str| std::env::var_os(name).is_some_and(|value| !value.is_empty());
    let refused = std::env::var_os(SERVER_VARIABLE).is_some_and(|value| value == "0");
    !refused && !set("QUASI_GPU") && run_arguments.first().map(OsString::as_os_str) != Some(OsStr::new("--gpu"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_round_trip() {
        let request = Request {
            directory: PathBuf::from("/tmp/x y"),
            umask: 0o027,
            limits: vec![(libc::RLIMIT_NOFILE, 1024, u64::MAX)],
            arguments: vec!["--opt".into(), "1".into(), "f.cl".into(), "".into(), OsString::from_vec(vec![0xff, b'a'])],
            environment: vec![("A".into(), "1".into()), ("EMPTY".into(), "".into()), ("B".into(), "x=y".into())],
        };
        assert_eq!(Request::decode(&request.encode()), Some(request));
        assert_eq!(Request::decode(&[1, 0]), None);
    }

    #[test]
    fn a_hand_over_carries_the_connection_pid_and_request() {
        let (left, right) = UnixStream::pair().expect("a socket pair");
        let small = Request { directory: "/work".into(), arguments: vec!["a.cl".into()], ..Request::default() };
        // Larger than a socket's buffer: the rest follows the first message.
        let large = Request { environment: vec![("BIG".into(), "x".repeat(1 << 20).into())], ..small.clone() };
        for request in [small, large] {
            let sent = request.clone();
            let fd = left.as_raw_fd();
            let sender = std::thread::spawn(move || {
                // SAFETY: `left` outlives the thread (joined below).
                let left = std::mem::ManuallyDrop::new(unsafe { UnixStream::from_raw_fd(fd) });
                send_hand_over(&left, 0, 42, &sent).expect("sent");
            });
            let (connection, pid, received) = receive_hand_over(&right).expect("received");
            sender.join().expect("the sender ends");
            assert!(connection.as_raw_fd() > 2);
            assert_eq!((pid, received), (42, request));
        }
    }

    #[test]
    fn streams_and_answers_cross_a_socket() {
        let (left, right) = UnixStream::pair().expect("a socket pair");
        let request = Request { directory: "/".into(), arguments: vec!["f.cl".into()], ..Request::default() };
        send_request(&left, &request).expect("sent");
        assert_eq!(receive_request(&right).expect("received"), request);
        send_go(&left).expect("sent");
        assert_eq!(receive_go(&right).expect("received").len(), 3);
        for answer in [Answer::Worker(42), Answer::Exited(3), Answer::Signalled(9)] {
            answer.write(&right).expect("written");
            assert_eq!(Answer::read(&left).expect("read"), Some(answer));
        }
        drop(right);
        assert_eq!(Answer::read(&left).expect("read"), None);
    }
}
