//! Kernel: Jupyter protocol 5.3. Tokio serves the sockets; every request that needs the
//! language becomes an engine event. Shell requests run one at a time in arrival order, each
//! between a `busy` and an `idle` status on iopub; control requests (kernel_info, interrupt,
//! shutdown) are answered at once, even while a cell runs.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use jupyter_protocol::{
    CodeMirrorMode, CommInfoReply, CompleteReply, CompleteRequest, DisplayData, ErrorOutput, ExecuteInput, ExecuteReply, ExecuteRequest, ExecuteResult, ExecutionCount, ExecutionState, HistoryReply, InspectReply, InspectRequest, InterruptReply,
    IsCompleteReply, IsCompleteRequest, JupyterMessage, JupyterMessageContent, KernelInfoReply, LanguageInfo, Media, MediaType, Payload, ReplyError, ReplyStatus, ShutdownReply, ShutdownRequest, Status, StreamContent, Transient,
};
use jupyter_zmq_client::Connection;
use quasi_lang::Completeness;
use quasi_repl::{render, Style};
use tokio::sync::{mpsc, oneshot};
use zeromq::{PubSocket, RouterRecvHalf, RouterSendHalf, RouterSocket, SocketRecv, SocketSend};

use crate::display::{self, Output};
use crate::engine::{Engine, EngineGone};
use crate::history::{History, Query};
use crate::logging::{debug, warning};
use crate::wire::{self, ReadError, Request};
use crate::{html, parent};

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
        let interrupter = Interrupter::default();
        tokio::spawn(heartbeat(sockets.heartbeat));
        tokio::spawn(drain_stdin(sockets.stdin, exit.clone()));
        tokio::spawn(watch_signals(interrupter.clone()));
        parent::watch(exit.clone());

        let (shell_replies, shell_requests) = sockets.shell.split();
        let (queue, queued) = mpsc::unbounded_channel::<Request>();
        tokio::spawn(read_shell(shell_requests, queue, exit.clone()));
        let shell = Shell {
            engine: engine.clone(),
            publisher: publisher.clone(),
            replies: shell_replies,
            execution_count: 0,
            history: History::default(),
            interrupter: interrupter.clone(),
            exit: exit.clone(),
        };
        tokio::spawn(shell.run(queued));
        let control = Control { engine, publisher, interrupter, exit: exit.clone() };
        tokio::spawn(control.run(sockets.control));

        Ok(exit_status.recv().await.unwrap_or(1))
    })
}

/// The kernel_info reply, the same on shell and control.
fn kernel_info() -> KernelInfoReply {
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
        banner: format!("Quasi {}: C-Lisp, compiled with LLVM as you type. `:help` lists the commands.", env!("CARGO_PKG_VERSION")),
        help_links: Vec::new(),
        debugger: false,
        error: None,
    }
}

/// Sends a reply on a ROUTER socket to the client that sent `parent`.
async fn reply(replies: &mut Connection<RouterSendHalf>, content: impl Into<JupyterMessageContent>, parent: &JupyterMessage) {
    let message = JupyterMessage::new(content.into(), Some(parent));
    if let Err(error) = replies.send(message).await {
        warning!("could not send a reply to {}: {error}", parent.header.msg_type);
    }
}

// ---------------------------------------------------------------------------------------------
// iopub

enum Publication {
    Message(JupyterMessage),
    /// Answered once everything queued before it went to the socket.
    Flush(oneshot::Sender<()>),
}

/// The one writer of the iopub socket, so outputs keep the order they were published in.
#[derive(Clone)]
struct Publisher {
    queue: mpsc::UnboundedSender<Publication>,
}

impl Publisher {
    fn start(mut iopub: Connection<PubSocket>) -> Publisher {
        let (queue, mut publications) = mpsc::unbounded_channel::<Publication>();
        tokio::spawn(async move {
            while let Some(publication) = publications.recv().await {
                match publication {
                    Publication::Message(message) => {
                        if let Err(error) = iopub.send(wire::for_iopub(message)).await {
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

    fn publish(&self, content: impl Into<JupyterMessageContent>, parent: &JupyterMessage) {
        let _ = self.queue.send(Publication::Message(JupyterMessage::new(content.into(), Some(parent))));
    }

    fn status(&self, state: ExecutionState, parent: &JupyterMessage) {
        self.publish(Status { execution_state: state }, parent);
    }

    /// Waits until everything published so far is on its way, before the process exits.
    async fn flush(&self) {
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

/// Where interrupts go. `lang` checks an interrupt flag on loop back edges, but its public API
/// has no `InterruptHandle` yet; until it does, an interrupt is acknowledged and logged, and a
/// running cell runs to its end. When the handle exists it lives here (it is `Send`), taken
/// from the session when the engine starts, and `interrupt` calls it.
#[derive(Clone, Default)]
struct Interrupter {
    /// A cell is being evaluated (set by the shell around `Engine::execute`).
    running: Arc<AtomicBool>,
}

impl Interrupter {
    fn interrupt(&self, source: &str) {
        if self.running.load(Ordering::Relaxed) {
            warning!("interrupt ({source}): a running cell cannot be interrupted yet; it runs to its end");
        } else {
            // jupyter_client interrupts before every shutdown; with nothing running that is news
            // to no one.
            debug!("interrupt ({source}) with no cell running");
        }
    }

    fn set_running(&self, running: bool) {
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
async fn note_read_error(channel: &str, error: &ReadError, errors: &mut u32, exit: &mpsc::UnboundedSender<i32>) -> bool {
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

// ---------------------------------------------------------------------------------------------
// shell

/// Reads the shell socket into a queue, so that after a failed cell the requests that already
/// arrived can be told apart from those that come later (see `Shell::run`).
async fn read_shell(mut requests: Connection<RouterRecvHalf>, queue: mpsc::UnboundedSender<Request>, exit: mpsc::UnboundedSender<i32>) {
    let mut errors = 0;
    loop {
        match wire::read(&mut requests).await {
            Ok(request) => {
                errors = 0;
                if queue.send(request).is_err() {
                    return;
                }
            }
            Err(error) => {
                if !note_read_error("shell", &error, &mut errors, &exit).await {
                    return;
                }
            }
        }
    }
}

struct Shell {
    engine: Engine,
    publisher: Publisher,
    replies: Connection<RouterSendHalf>,
    /// Cells run with `store_history`; the number of the last one.
    execution_count: usize,
    history: History,
    interrupter: Interrupter,
    exit: mpsc::UnboundedSender<i32>,
}

/// Whether a request asks for the execute requests queued behind it to be aborted.
#[derive(Clone, Copy, PartialEq, Eq)]
enum After {
    Continue,
    AbortQueued,
}

impl Shell {
    async fn run(mut self, mut queued: mpsc::UnboundedReceiver<Request>) {
        while let Some(request) = queued.recv().await {
            if self.handle(request, false).await == After::Continue {
                continue;
            }
            // A cell failed with `stop_on_error`: the cells the client already sent were
            // written expecting it to succeed, so, as ipykernel does, the execute requests
            // that arrived before now are answered `aborted`; other requests are served.
            let mut arrived = Vec::new();
            while let Ok(request) = queued.try_recv() {
                arrived.push(request);
            }
            for request in arrived {
                self.handle(request, true).await;
            }
        }
    }

    async fn handle(&mut self, request: Request, aborting: bool) -> After {
        let parent = &request.message;
        debug!("shell: {}", request.message_type());
        self.publisher.status(ExecutionState::Busy, parent);
        let mut after = After::Continue;
        match &parent.content {
            JupyterMessageContent::ExecuteRequest(execute) => after = self.execute(execute, parent, aborting).await,
            JupyterMessageContent::KernelInfoRequest(_) => reply(&mut self.replies, kernel_info(), parent).await,
            JupyterMessageContent::CompleteRequest(complete) => self.complete(complete, parent).await,
            JupyterMessageContent::IsCompleteRequest(is_complete) => self.is_complete(is_complete, parent).await,
            JupyterMessageContent::InspectRequest(inspect) => self.inspect(inspect, parent).await,
            JupyterMessageContent::CommInfoRequest(_) => reply(&mut self.replies, CommInfoReply::default(), parent).await,
            JupyterMessageContent::ShutdownRequest(shutdown) => {
                // Old clients send it on shell; it means the same as on control.
                reply(&mut self.replies, ShutdownReply { restart: shutdown.restart, status: ReplyStatus::Ok, error: None }, parent).await;
                self.publisher.status(ExecutionState::Idle, parent);
                shut_down(&self.engine, &self.publisher, &self.exit).await;
                return After::Continue;
            }
            _ if request.message_type() == "history_request" => self.history(&request, parent).await,
            // A request of a known type lands here only if its content did not parse.
            JupyterMessageContent::UnknownMessage(_) if request.message_type().ends_with("_request") => warning!("ignored a {} that is unsupported or malformed", request.message_type()),
            // Comms (widgets) are not supported; comm_info says there are none.
            _ => debug!("ignored {} on shell", request.message_type()),
        }
        self.publisher.status(ExecutionState::Idle, parent);
        after
    }

    async fn execute(&mut self, request: &ExecuteRequest, parent: &JupyterMessage, aborting: bool) -> After {
        if aborting {
            let aborted = ExecuteReply { status: ReplyStatus::Aborted, execution_count: ExecutionCount::new(self.execution_count), user_expressions: Some(HashMap::new()), ..ExecuteReply::default() };
            reply(&mut self.replies, aborted, parent).await;
            return After::Continue;
        }
        // `silent` means no broadcast, no result and no history.
        let silent = request.silent;
        let store_history = request.store_history && !silent;
        if store_history {
            self.execution_count += 1;
        }
        let count = ExecutionCount::new(self.execution_count);
        if !silent {
            self.publisher.publish(ExecuteInput { code: request.code.clone(), execution_count: count }, parent);
        }
        self.interrupter.set_running(true);
        let evaluated = self.engine.execute(request.code.clone()).await;
        self.interrupter.set_running(false);
        let (outputs, quit) = match evaluated {
            Ok(outcome) => {
                if store_history {
                    self.history.push(self.execution_count, &request.code, render(&outcome, Style::Plain));
                }
                (display::outputs(&outcome), outcome.quit)
            }
            Err(EngineGone) => (vec![internal_error()], false),
        };
        let mut error = None;
        // `:quit`: ask the front end to leave (jupyter console does; notebooks ignore it).
        let payload = if quit { vec![Payload::AskExit { keepkernel: false }] } else { Vec::new() };
        for output in outputs {
            match output {
                Output::Stream { name, text } if !silent => self.publisher.publish(StreamContent { name, text }, parent),
                Output::Display(data) if !silent => self.publisher.publish(DisplayData::new(data), parent),
                Output::Result(data) if !silent => {
                    // `transient` is sent as `{}`: clients validate it as an object, never null.
                    self.publisher.publish(ExecuteResult { execution_count: count, data, metadata: Default::default(), transient: Some(Transient::default()) }, parent)
                }
                Output::Error { ename, evalue, traceback } => {
                    if !silent {
                        self.publisher.publish(ErrorOutput { ename: ename.clone(), evalue: evalue.clone(), traceback: traceback.clone() }, parent);
                    }
                    error = Some(ReplyError { ename, evalue, traceback });
                }
                _ => {}
            }
        }
        let failed = error.is_some();
        let execute_reply = ExecuteReply {
            status: if failed { ReplyStatus::Error } else { ReplyStatus::Ok },
            execution_count: count,
            payload,
            user_expressions: Some(HashMap::new()),
            error: error.map(Box::new),
        };
        reply(&mut self.replies, execute_reply, parent).await;
        if failed && request.stop_on_error && !silent {
            After::AbortQueued
        } else {
            After::Continue
        }
    }

    async fn complete(&mut self, request: &CompleteRequest, parent: &JupyterMessage) {
        // Jupyter counts cursor positions in code points; `lang` in bytes.
        let cursor = request.cursor_pos.min(request.code.chars().count());
        let cursor_byte = byte_offset(&request.code, cursor);
        let complete_reply = match self.engine.complete(request.code.clone(), cursor_byte).await {
            Ok((start, matches)) => {
                let cursor_start = request.code.get(..start).map_or(cursor, |before| before.chars().count());
                CompleteReply { matches, cursor_start, cursor_end: cursor, ..CompleteReply::default() }
            }
            Err(EngineGone) => CompleteReply { status: ReplyStatus::Error, error: Some(Box::new(engine_gone())), ..CompleteReply::default() },
        };
        reply(&mut self.replies, complete_reply, parent).await;
    }

    async fn is_complete(&mut self, request: &IsCompleteRequest, parent: &JupyterMessage) {
        let is_complete_reply = match self.engine.is_complete(request.code.clone()).await {
            Ok(Completeness::Complete) => IsCompleteReply::complete(),
            // Two spaces per open list, as the examples are indented.
            Ok(Completeness::Incomplete { depth }) => IsCompleteReply::incomplete("  ".repeat(depth)),
            Ok(Completeness::Invalid) => IsCompleteReply::invalid(),
            Err(EngineGone) => IsCompleteReply::unknown(),
        };
        reply(&mut self.replies, is_complete_reply, parent).await;
    }

    async fn inspect(&mut self, request: &InspectRequest, parent: &JupyterMessage) {
        let cursor = byte_offset(&request.code, request.cursor_pos.min(request.code.chars().count()));
        let inspect_reply = match self.engine.inspect(request.code.clone(), cursor).await {
            Ok(Some(line)) => {
                let html = format!("<pre class=\"quasi-inspect\">{}</pre>", html::escape(&line));
                InspectReply { found: true, data: Media::new(vec![MediaType::Plain(line), MediaType::Html(html)]), ..InspectReply::default() }
            }
            Ok(None) => InspectReply::default(),
            Err(EngineGone) => InspectReply { status: ReplyStatus::Error, error: Some(Box::new(engine_gone())), ..InspectReply::default() },
        };
        reply(&mut self.replies, inspect_reply, parent).await;
    }

    async fn history(&mut self, request: &Request, parent: &JupyterMessage) {
        let query: Query = serde_json::from_value(request.content.clone()).unwrap_or_default();
        reply(&mut self.replies, HistoryReply::new(self.history.answer(&query)), parent).await;
    }
}

/// The byte offset of the `cursor`th code point (the end if there are fewer).
fn byte_offset(text: &str, cursor: usize) -> usize {
    text.char_indices().nth(cursor).map_or(text.len(), |(offset, _)| offset)
}

fn engine_gone() -> ReplyError {
    ReplyError { ename: "error[internal]".to_string(), evalue: EngineGone.to_string(), traceback: vec![format!("error[internal]: {EngineGone}; restart the kernel")] }
}

fn internal_error() -> Output {
    let error = engine_gone();
    Output::Error { ename: error.ename, evalue: error.evalue, traceback: error.traceback }
}

// ---------------------------------------------------------------------------------------------
// control

struct Control {
    engine: Engine,
    publisher: Publisher,
    interrupter: Interrupter,
    exit: mpsc::UnboundedSender<i32>,
}

impl Control {
    async fn run(self, control: Connection<RouterSocket>) {
        let (mut replies, mut requests) = control.split();
        let mut errors = 0;
        loop {
            let request = match wire::read(&mut requests).await {
                Ok(request) => request,
                Err(error) => {
                    if !note_read_error("control", &error, &mut errors, &self.exit).await {
                        return;
                    }
                    continue;
                }
            };
            errors = 0;
            let parent = &request.message;
            debug!("control: {}", request.message_type());
            self.publisher.status(ExecutionState::Busy, parent);
            match &parent.content {
                JupyterMessageContent::KernelInfoRequest(_) => reply(&mut replies, kernel_info(), parent).await,
                JupyterMessageContent::InterruptRequest(_) => {
                    self.interrupter.interrupt("interrupt_request");
                    reply(&mut replies, InterruptReply::new(), parent).await;
                }
                JupyterMessageContent::ShutdownRequest(ShutdownRequest { restart }) => {
                    // A restart is the kernel manager's job: it starts a new process (with a
                    // fresh session) once this one has exited, so both kinds end this process.
                    reply(&mut replies, ShutdownReply { restart: *restart, status: ReplyStatus::Ok, error: None }, parent).await;
                    self.publisher.status(ExecutionState::Idle, parent);
                    shut_down(&self.engine, &self.publisher, &self.exit).await;
                    return;
                }
                _ => debug!("ignored {} on control", request.message_type()),
            }
            self.publisher.status(ExecutionState::Idle, parent);
        }
    }
}

/// Ends the kernel: the last statuses go out, the session is dropped (if it is not stuck in a
/// cell), and the process exits.
async fn shut_down(engine: &Engine, publisher: &Publisher, exit: &mpsc::UnboundedSender<i32>) {
    publisher.flush().await;
    engine.shutdown(SESSION_SHUTDOWN_LIMIT).await;
    let _ = exit.send(0);
}
