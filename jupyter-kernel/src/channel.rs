//! What the shell and control channels share: the kernel_info reply, sending replies, giving up
//! on a failing socket, and shutting down.

use std::time::Duration;

use jupyter_protocol::{
    CodeMirrorMode, JupyterMessage, JupyterMessageContent, KernelInfoReply, LanguageInfo, ReplyStatus,
};
use jupyter_zmq_client::Connection;
use tokio::sync::mpsc;
use zeromq::RouterSendHalf;

use crate::engine::Engine;
use crate::iopub::Publisher;
use crate::logging::warning;
use crate::wire::ReadError;

/// The protocol version this kernel speaks.
const PROTOCOL_VERSION: &str = "5.3";

/// How long a shutdown waits for the session to drop before the process exits anyway.
const SESSION_SHUTDOWN_LIMIT: Duration = Duration::from_secs(2);

/// After this many socket errors in a row a channel is taken for dead and the kernel exits,
/// rather than live on deaf.
const SOCKET_ERROR_LIMIT: u32 = 50;

/// The kernel_info reply, the same on shell and control.
pub fn kernel_info() -> KernelInfoReply {
    let version = env!("CARGO_PKG_VERSION").to_string();
    KernelInfoReply {
        status: ReplyStatus::Ok,
        protocol_version: PROTOCOL_VERSION.to_string(),
        implementation: "quasi".to_string(),
        implementation_version: version.clone(),
        language_info: LanguageInfo {
            name: "c-lisp".to_string(),
            version,
            mimetype: Some("text/x-c-lisp".to_string()),
            file_extension: Some(".cl".to_string()),
            // nbconvert has no C-Lisp lexer; Scheme's fits an S-expression language best.
            pygments_lexer: Some("scheme".to_string()),
            // JupyterLab picks the editor language by `codemirror_mode` first, by name: "c-lisp"
            // is the language the quasi-jupyterlab extension registers (`quasi-kernel install`
            // writes it), which knows C-Lisp's forms, opcodes, types and comments. "scheme" would
            // win over it and colour little more than `define` and `if`. Without the extension,
            // JupyterLab finds no such language and shows plain text.
            codemirror_mode: Some(CodeMirrorMode::Simple("c-lisp".to_string())),
            nbconvert_exporter: None,
        },
        banner: format!(
            "Quasi {}: C-Lisp, compiled with LLVM as you type. `:help` lists the commands.",
            env!("CARGO_PKG_VERSION")
        ),
        help_links: Vec::new(),
        debugger: false,
        error: None,
    }
}

/// Sends a reply on a ROUTER socket to the client that sent `parent`.
pub async fn reply(
    replies: &mut Connection<RouterSendHalf>,
    content: impl Into<JupyterMessageContent>,
    parent: &JupyterMessage,
) {
    let message = JupyterMessage::new(content.into(), Some(parent));
    if let Err(error) = replies.send(message).await {
        warning!("could not send a reply to {}: {error}", parent.header.msg_type);
    }
}

/// Logs a dropped message. Returns false when the channel is to be given up.
pub async fn note_read_error(
    channel: &str,
    error: &ReadError,
    errors: &mut u32,
    exit: &mpsc::UnboundedSender<i32>,
) -> bool {
    warning!("{channel}: {error}");
    if let ReadError::Socket(_) = error {
        *errors += 1;
        if *errors >= SOCKET_ERROR_LIMIT {
            warning!("{channel}: the socket keeps failing; exiting");
            let _ = exit.send(1);
            return false;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    true
}

/// Ends the kernel: the last statuses go out, the session is dropped (if it is not stuck in a
/// cell), and the process exits.
pub async fn shut_down(engine: &Engine, publisher: &Publisher, exit: &mpsc::UnboundedSender<i32>) {
    publisher.flush().await;
    engine.shutdown(SESSION_SHUTDOWN_LIMIT).await;
    let _ = exit.send(0);
}
