//! Wire: the five ZeroMQ sockets a connection file names, and incoming messages, their HMAC
//! checked by jupyter-zmq-client before anything reads them.

use std::collections::{HashSet, VecDeque};
use std::path::Path;
use std::sync::Mutex;

use anyhow::Context as _;
use bytes::Bytes;
use jupyter_protocol::{ConnectionInfo, Header, JupyterMessage, JupyterMessageContent, UnknownMessage};
use jupyter_zmq_client::{Connection, KernelHeartbeatConnection, RawMessage, RuntimeError};
use serde_json::Value;
use zeromq::{PubSocket, RouterSocket, SocketRecv};

/// The kernel's end of the five channels.
pub struct Sockets {
    pub shell: Connection<RouterSocket>,
    pub control: Connection<RouterSocket>,
    pub iopub: Connection<PubSocket>,
    pub stdin: Connection<RouterSocket>,
    pub heartbeat: KernelHeartbeatConnection,
}

/// Reads a connection file; only HMAC-SHA256 (or no key at all) is accepted, as the key is
/// the only thing that keeps other local users from running code in this process.
pub fn read_connection_file(path: &Path) -> anyhow::Result<ConnectionInfo> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read the connection file {}", path.display()))?;
    let info: ConnectionInfo =
        serde_json::from_str(&text).with_context(|| format!("malformed connection file {}", path.display()))?;
    if !info.key.is_empty() && info.signature_scheme != "hmac-sha256" {
        anyhow::bail!("unsupported signature scheme `{}` (only hmac-sha256)", info.signature_scheme);
    }
    Ok(info)
}

/// Binds every socket; `session_id` goes into the header of every message the kernel sends.
pub async fn bind(info: &ConnectionInfo, session_id: &str) -> anyhow::Result<Sockets> {
    Ok(Sockets {
        shell: jupyter_zmq_client::create_kernel_shell_connection(info, session_id)
            .await
            .context("binding the shell socket")?,
        control: jupyter_zmq_client::create_kernel_control_connection(info, session_id)
            .await
            .context("binding the control socket")?,
        iopub: jupyter_zmq_client::create_kernel_iopub_connection(info, session_id)
            .await
            .context("binding the iopub socket")?,
        stdin: jupyter_zmq_client::create_kernel_stdin_connection(info, session_id)
            .await
            .context("binding the stdin socket")?,
        heartbeat: jupyter_zmq_client::create_kernel_heartbeat_connection(info)
            .await
            .context("binding the heartbeat socket")?,
    })
}

/// A request whose signature checked out.
#[derive(Clone, Debug)]
pub struct Request {
    /// Typed content where jupyter-protocol could parse it, else `UnknownMessage` with the
    /// raw content; the routing identities come along for the replies.
    pub message: JupyterMessage,
    /// The content as sent, for requests whose optional fields jupyter-protocol requires
    /// (`history_request` of kind `search` without `n` or `unique`).
    pub content: Value,
    /// The content was not UTF-8 (what and where): it was read with U+FFFD in place of the bad
    /// bytes, so the request is answered, but code from it must not run.
    pub not_utf8: Option<String>,
}

impl Request {
    /// The `msg_type` from the header.
    pub fn message_type(&self) -> &str {
        &self.message.header.msg_type
    }
}

/// Why a message was dropped unread.
#[derive(Debug)]
pub enum ReadError {
    /// The HMAC did not match the connection key: never executed, only logged.
    BadSignature,
    /// A signature seen before: a signed message sent again (a replay), dropped as
    /// jupyter_client's `Session` drops it.
    Duplicate,
    /// Not a Jupyter message (missing delimiter or parts, bad JSON header).
    Malformed(String),
    /// The socket itself failed; the channel is dead.
    Socket(String),
}

impl std::fmt::Display for ReadError {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReadError::BadSignature => write!(formatter, "a message with a bad signature was dropped"),
            ReadError::Duplicate => {
                write!(formatter, "a message with the signature of an earlier one (a replay) was dropped")
            }
            ReadError::Malformed(why) => write!(formatter, "a malformed message was dropped: {why}"),
            ReadError::Socket(why) => write!(formatter, "socket error: {why}"),
        }
    }
}

/// How many signatures the kernel remembers (jupyter_client's `digest_history_size`).
const SIGNATURE_HISTORY: usize = 1 << 16;

/// The signatures of the last `SIGNATURE_HISTORY` signed messages, on every channel.
#[derive(Default)]
struct Signatures {
    order: VecDeque<Bytes>,
    seen: HashSet<Bytes>,
}

impl Signatures {
    /// Remembers `signature`; false if it was seen before.
    fn first_time(&mut self, signature: Bytes) -> bool {
        if !self.seen.insert(signature.clone()) {
            return false;
        }
        self.order.push_back(signature);
        if self.order.len() > SIGNATURE_HISTORY {
            if let Some(oldest) = self.order.pop_front() {
                self.seen.remove(&oldest);
            }
        }
        true
    }
}

static SIGNATURES: Mutex<Option<Signatures>> = Mutex::new(None);

/// Receives one message and verifies its signature; a signed message whose signature was
/// seen before (a message captured and sent again) is refused.
pub async fn read<S: SocketRecv>(connection: &mut Connection<S>) -> Result<Request, ReadError> {
    let multipart = connection.socket.recv().await.map_err(|error| ReadError::Socket(error.to_string()))?;
    let delimiter = multipart.iter().position(|part| &part[..] == b"<IDS|MSG>");
    let signature = delimiter.and_then(|index| multipart.get(index + 1)).cloned();
    let raw = RawMessage::from_multipart(multipart, &connection.mac).map_err(|error| match error {
        // A signature that is not even hex is as bad as a wrong one.
        RuntimeError::VerifyError(_) | RuntimeError::DecodeError(_) => ReadError::BadSignature,
        other => ReadError::Malformed(other.to_string()),
    })?;
    // Without a key there is no signature to remember (and nothing to replay).
    if let (Some(_), Some(signature)) = (&connection.mac, signature) {
        let mut signatures = SIGNATURES.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if !signatures.get_or_insert_with(Signatures::default).first_time(signature) {
            return Err(ReadError::Duplicate);
        }
    }
    parse(raw)
}

/// Turns the verified parts into a request. jupyter-zmq-client's own conversion rejects a
/// message whose content its types do not accept; here such content is kept raw instead.
fn parse(raw: RawMessage) -> Result<Request, ReadError> {
    let [header, parent, metadata, content, buffers @ ..] = raw.jparts.as_slice() else {
        return Err(ReadError::Malformed(format!("{} parts after the signature", raw.jparts.len())));
    };
    let header: Header =
        serde_json::from_slice(header).map_err(|error| ReadError::Malformed(format!("header: {error}")))?;
    // Content that is JSON but for bytes that are not UTF-8 is still a request, to be answered
    // (an execute_request with an error): dropping it would leave the client waiting. Only
    // content that did not parse is looked at again.
    let (content, not_utf8) = match serde_json::from_slice::<Value>(content) {
        Ok(parsed) => (parsed, None),
        Err(error) => {
            let Err(bad) = std::str::from_utf8(content) else {
                return Err(ReadError::Malformed(format!("content: {error}")));
            };
            let at = bad.valid_up_to();
            let why = format!("byte 0x{:02x} at byte {at} of the request's content is not UTF-8", content[at]);
            let parsed = serde_json::from_str::<Value>(&String::from_utf8_lossy(content))
                .map_err(|error| ReadError::Malformed(format!("content: {error}")))?;
            (parsed, Some(why))
        }
    };
    let metadata: Value = serde_json::from_slice(metadata).unwrap_or_else(|_| Value::Object(Default::default()));
    // An empty parent header (`{}`) is no header.
    let parent_header = serde_json::from_slice::<Header>(parent).ok();
    let typed = JupyterMessageContent::from_type_and_content(&header.msg_type, content.clone()).unwrap_or_else(|_| {
        JupyterMessageContent::UnknownMessage(UnknownMessage {
            msg_type: header.msg_type.clone(),
            content: content.clone(),
        })
    });
    let message = JupyterMessage {
        zmq_identities: raw.zmq_identities,
        header,
        parent_header,
        metadata,
        content: typed,
        buffers: buffers.to_vec(),
        channel: None,
    };
    Ok(Request { message, content, not_utf8 })
}

/// A message for iopub: the first frame is a topic, as ipykernel sends, rather than the
/// shell client's routing identity that `as_child_of` copied from the request.
pub fn for_iopub(mut message: JupyterMessage) -> JupyterMessage {
    let topic = format!("kernel.quasi.{}", message.header.msg_type);
    message.zmq_identities = vec![Bytes::from(topic)];
    message
}
