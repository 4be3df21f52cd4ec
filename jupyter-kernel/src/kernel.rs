//! Kernel: Jupyter protocol 5.3 on one tokio thread. Starts the engine and the tasks that
//! serve the five sockets (`shell`, `control`, the iopub `Publisher`, heartbeat, stdin), and
//! holds what they share: the kernel_info reply, replies, the interrupt seam, shutting down.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use jupyter_protocol::{
    CodeMirrorMode, ExecutionState, JupyterMessage, JupyterMessageContent, KernelInfoReply, LanguageInfo, ReplyStatus,
    Status,
};
use jupyter_zmq_client::Connection;
use tokio::sync::{mpsc, oneshot};
use zeromq::{PubSocket, RouterSendHalf, RouterSocket, SocketRecv, SocketSend};

use crate::control::Control;
use crate::engine::Engine;
use crate::logging::{debug, warning};
use crate::parent;
use crate::shell::{read_shell, Shell};
use crate::wire::{self, ReadError, Request};

/// The protocol version this kernel speaks.
const PROTOCOL_VERSION: &str = "5.3";

/// How long a shutdown waits for the session to drop before the process exits anyway.
const SESSION_SHUTDOWN_LIMIT: Duration = Duration::from_secs(2);

/// After this many socket errors in a row a channel is taken for dead and the kernel exits,
/// rather than live on deaf.
const SOCKET_ERROR_LIMIT: u32 = 50;

/// Serves one connection file until a shutdown request, the parent's death or a dead socket;
/// returns the exit status.
pub fn serve(connection_file: &Path) -> anyhow::Result<i32> {
    let info = wire::read_connection_file(connection_file)?;
    let engine = Engine::spawn()?;
    // One thread is plenty for five sockets; the session has its own.
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    runtime.block_on(async move {
        let session_id = uuid::Uuid::new_v4().to_string();
        let sockets = wire::bind(&info, &session_id).await?;
        let (exit, mut exit_status) = mpsc::unbounded_channel::<i32>();
        let publisher = Publisher::start(sockets.iopub);
        let interrupter = Interrupter::new(engine.interrupt.clone());
        tokio::spawn(heartbeat(sockets.heartbeat));
        tokio::spawn(drain_stdin(sockets.stdin, exit.clone()));
        tokio::spawn(watch_signals(interrupter.clone()));
        parent::watch(exit.clone());

        let (shell_replies, shell_requests) = sockets.shell.split();
        let (queue, queued) = mpsc::unbounded_channel::<Request>();
        tokio::spawn(read_shell(shell_requests, queue, exit.clone()));
        let shell = Shell::new(engine.clone(), publisher.clone(), shell_replies, interrupter.clone(), exit.clone());
        tokio::spawn(shell.run(queued));
        let control = Control::new(engine, publisher, interrupter, exit.clone());
        tokio::spawn(control.run(sockets.control));

        Ok(exit_status.recv().await.unwrap_or(1))
    })
}

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
            // C-Lisp is an S-expression language: Scheme's lexer and editor mode fit it best.
            pygments_lexer: Some("scheme".to_string()),
            codemirror_mode: Some(CodeMirrorMode::Simple("scheme".to_string())),
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

// ---------------------------------------------------------------------------------------------
// iopub

enum Publication {
    // Boxed: a message is hundreds of bytes, a flush a pointer.
    Message(Box<JupyterMessage>),
    /// Answered once everything queued before it went to the socket.
    Flush(oneshot::Sender<()>),
}

/// The one writer of the iopub socket, so outputs keep the order they were published in.
#[derive(Clone)]
pub struct Publisher {
    queue: mpsc::UnboundedSender<Publication>,
}

impl Publisher {
    fn start(mut iopub: Connection<PubSocket>) -> Publisher {
        let (queue, mut publications) = mpsc::unbounded_channel::<Publication>();
        tokio::spawn(async move {
            while let Some(publication) = publications.recv().await {
                match publication {
                    Publication::Message(message) => {
                        if let Err(error) = iopub.send(wire::for_iopub(*message)).await {
                            warning!("could not publish on iopub: {error}");
                        }
                    }
                    Publication::Flush(done) => {
                        let _ = done.send(());
                    }
                }
            }
        });
        Publisher { queue }
    }

    pub fn publish(&self, content: impl Into<JupyterMessageContent>, parent: &JupyterMessage) {
        let _ = self.queue.send(Publication::Message(Box::new(JupyterMessage::new(content.into(), Some(parent)))));
    }

    pub fn status(&self, state: ExecutionState, parent: &JupyterMessage) {
        self.publish(Status { execution_state: state }, parent);
    }

    /// Waits until everything published so far is on its way, before the process exits.
    pub async fn flush(&self) {
        let (done, flushed) = oneshot::channel();
        if self.queue.send(Publication::Flush(done)).is_ok() {
            let _ = flushed.await;
        }
        // zeromq's PUB socket fans messages out to subscribers from its own tasks; they need a
        // turn on this runtime to write the last status to the wire.
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

// ---------------------------------------------------------------------------------------------
// interrupt

/// Where interrupts go: the session's `InterruptHandle`, taken when the engine starts. It
/// stops Rhai expansion at once (the cell ends with `error[interrupted]`, the session is kept);
/// compiled loops do not check the flag yet, so a running loop runs to its end.
#[derive(Clone)]
pub struct Interrupter {
    /// A cell is being evaluated (set by the shell around `Engine::execute`).
    running: Arc<AtomicBool>,
    handle: quasi_lang::InterruptHandle,
}

impl Interrupter {
    pub fn new(handle: quasi_lang::InterruptHandle) -> Interrupter {
        Interrupter { running: Arc::new(AtomicBool::new(false)), handle }
    }

    pub fn interrupt(&self, source: &str) {
        if self.running.load(Ordering::Relaxed) {
            self.handle.interrupt();
            warning!("interrupt ({source}): staging stops at once; compiled code runs to its end");
        } else {
            // jupyter_client interrupts before every shutdown; with nothing running that is news
            // to no one.
            debug!("interrupt ({source}) with no cell running");
        }
    }

    pub fn set_running(&self, running: bool) {
        self.running.store(running, Ordering::Relaxed);
    }
}

/// SIGINT is an interrupt, not the end of the session and all its definitions (jupyter sends
/// interrupts as messages, per the kernelspec, but a terminal's Ctrl-C may still reach us).
async fn watch_signals(interrupter: Interrupter) {
    use tokio::signal::unix::{signal, SignalKind};
    let Ok(mut interrupts) = signal(SignalKind::interrupt()) else {
        warning!("cannot watch SIGINT");
        return;
    };
    while interrupts.recv().await.is_some() {
        interrupter.interrupt("SIGINT");
    }
}

// ---------------------------------------------------------------------------------------------
// heartbeat and stdin

/// Echoes every heartbeat back, as the protocol asks.
async fn heartbeat(mut heartbeat: jupyter_zmq_client::KernelHeartbeatConnection) {
    loop {
        match heartbeat.socket.recv().await {
            Ok(ping) => {
                if let Err(error) = heartbeat.socket.send(ping).await {
                    debug!("heartbeat reply failed: {error}");
                }
            }
            Err(error) => {
                debug!("heartbeat: {error}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// The kernel never asks for input (cells cannot read stdin), so nothing should arrive here;
/// the socket is still served so that clients can connect.
async fn drain_stdin(mut stdin: Connection<RouterSocket>, exit: mpsc::UnboundedSender<i32>) {
    let mut errors = 0;
    loop {
        match wire::read(&mut stdin).await {
            Ok(request) => debug!("ignored {} on stdin", request.message_type()),
            Err(error) => {
                if !note_read_error("stdin", &error, &mut errors, &exit).await {
                    return;
                }
                continue;
            }
        }
        errors = 0;
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
