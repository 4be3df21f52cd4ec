//! Shell: requests served one at a time in arrival order, each between a `busy` and an `idle`
//! status; cells go to the engine, their outcomes out as iopub outputs and an execute_reply.

use std::collections::HashMap;
use std::time::Duration;

use jupyter_protocol::{
    CommInfoReply, CompleteReply, CompleteRequest, DisplayData, ErrorOutput, ExecuteInput, ExecuteReply,
    ExecuteRequest, ExecuteResult, ExecutionCount, ExecutionState, HistoryReply, InspectReply, InspectRequest,
    IsCompleteReply, IsCompleteRequest, JupyterMessage, JupyterMessageContent, Media, MediaType, Payload, ReplyError,
    ReplyStatus, ShutdownReply, StreamContent, Transient, UnknownMessage, UpdateDisplayData,
};
use jupyter_zmq_client::Connection;
use quasi_lang::{Completeness, CompletionKind};
use quasi_repl::{render, Style};
use tokio::sync::mpsc;
use zeromq::{RouterRecvHalf, RouterSendHalf};

use crate::channel::{kernel_info, note_read_error, reply, shut_down};
use crate::display::Output;
use crate::engine::{Engine, EngineGone};
use crate::history::{History, Query};
use crate::html;
use crate::interrupt::Interrupter;
use crate::iopub::Publisher;
use crate::logging::{debug, warning};
use crate::wire::{self, Request};

/// Reads the shell socket into a queue, so that after a failed cell the requests that already
/// arrived can be told apart from those that come later (see `Shell::run`).
pub async fn read_shell(
    mut requests: Connection<RouterRecvHalf>,
    queue: mpsc::UnboundedSender<Request>,
    exit: mpsc::UnboundedSender<i32>,
) {
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

/// The shell's state: what the protocol keeps between cells (the session keeps the rest).
pub struct Shell {
    engine: Engine,
    publisher: Publisher,
    replies: Connection<RouterSendHalf>,
    /// Cells run with `store_history`; the number of the last one.
    execution_count: usize,
    history: History,
    interrupter: Interrupter,
    exit: mpsc::UnboundedSender<i32>,
}

/// After a failed cell, how long the execute requests already sent get to reach the queue:
/// what the socket holds arrives only when the reader task (and zeromq's own) get turns on this
/// thread, late on a loaded machine. Waited before the failure is answered, so nothing sent
/// after it can be caught; it delays only the reply of a failed cell.
const ABORT_GATHER: Duration = Duration::from_millis(25);

/// What the shell does after a request.
enum After {
    Continue,
    /// A cell failed with `stop_on_error`: these execute requests were sent before the client
    /// could know; they are answered `aborted`.
    Abort(Vec<Request>),
}

impl Shell {
    pub fn new(
        engine: Engine,
        publisher: Publisher,
        replies: Connection<RouterSendHalf>,
        interrupter: Interrupter,
        exit: mpsc::UnboundedSender<i32>,
    ) -> Shell {
        Shell { engine, publisher, replies, execution_count: 0, history: History::default(), interrupter, exit }
    }

    /// Serves the queue the reader fills until the kernel exits.
    pub async fn run(mut self, mut queued: mpsc::UnboundedReceiver<Request>) {
        while let Some(request) = queued.recv().await {
            // The cells the client sent before it saw a failure were written expecting success,
            // so, as ipykernel does, the execute requests among them are answered `aborted`;
            // other requests are served.
            if let After::Abort(stale) = self.handle(request, &mut queued, false).await {
                for request in stale {
                    self.handle(request, &mut queued, true).await;
                }
            }
        }
    }

    /// The requests already sent, gathered before a failure is answered (`ABORT_GATHER`).
    async fn gather_sent(queued: &mut mpsc::UnboundedReceiver<Request>) -> Vec<Request> {
        let mut sent = Vec::new();
        let deadline = tokio::time::Instant::now() + ABORT_GATHER;
        while let Ok(Some(request)) = tokio::time::timeout_at(deadline, queued.recv()).await {
            sent.push(request);
        }
        sent
    }

    async fn handle(
        &mut self,
        request: Request,
        queued: &mut mpsc::UnboundedReceiver<Request>,
        aborting: bool,
    ) -> After {
        let parent = &request.message;
        debug!("shell: {}", request.message_type());
        self.publisher.status(ExecutionState::Busy, parent);
        let mut after = After::Continue;
        match &parent.content {
            JupyterMessageContent::ExecuteRequest(execute) => {
                after = self.execute(execute, request.not_utf8.as_deref(), parent, queued, aborting).await
            }
            JupyterMessageContent::KernelInfoRequest(_) => reply(&mut self.replies, kernel_info(), parent).await,
            JupyterMessageContent::CompleteRequest(complete) => self.complete(complete, parent).await,
            JupyterMessageContent::IsCompleteRequest(is_complete) => self.is_complete(is_complete, parent).await,
            JupyterMessageContent::InspectRequest(inspect) => self.inspect(inspect, parent).await,
            JupyterMessageContent::CommInfoRequest(_) => {
                reply(&mut self.replies, CommInfoReply::default(), parent).await
            }
            JupyterMessageContent::ShutdownRequest(shutdown) => {
                // Old clients send it on shell; it means the same as on control.
                reply(
                    &mut self.replies,
                    ShutdownReply { restart: shutdown.restart, status: ReplyStatus::Ok, error: None },
                    parent,
                )
                .await;
                self.publisher.status(ExecutionState::Idle, parent);
                shut_down(&self.engine, &self.publisher, &self.exit).await;
                return After::Continue;
            }
            _ if request.message_type() == "history_request" => self.history(&request, parent).await,
            // A request of a known type lands here only if its content did not parse.
            JupyterMessageContent::UnknownMessage(_) if request.message_type().ends_with("_request") => {
                warning!("ignored a {} that is unsupported or malformed", request.message_type())
            }
            // Comms (widgets) are not supported; comm_info says there are none.
            _ => debug!("ignored {} on shell", request.message_type()),
        }
        self.publisher.status(ExecutionState::Idle, parent);
        after
    }

    /// Runs a cell; one whose request was not UTF-8 (`not_utf8`) fails without running, saying
    /// so, and the cells after it run.
    async fn execute(
        &mut self,
        request: &ExecuteRequest,
        not_utf8: Option<&str>,
        parent: &JupyterMessage,
        queued: &mut mpsc::UnboundedReceiver<Request>,
        aborting: bool,
    ) -> After {
        if aborting {
            // As ipykernel answers: the status alone. A count would make front ends number a
            // cell that never ran (`[3]:` instead of `[ ]:`), and the count is not spent.
            let aborted = UnknownMessage {
                msg_type: "execute_reply".to_string(),
                content: serde_json::json!({ "status": "aborted" }),
            };
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
        if let Some(why) = not_utf8 {
            let evalue = format!("{why}: the cell was not run");
            let failure = Output::Error {
                ename: "error[syntax]".to_string(),
                evalue: evalue.clone(),
                traceback: vec![format!("error[syntax]: {evalue}")],
            };
            let error = self.publish(failure, count, silent, parent);
            return self.finish_execute(request, count, error, false, parent, queued).await;
        }
        self.interrupter.set_running(true);
        // Outputs are published as the engine sends them, while the cell runs.
        let (sender, mut outputs) = mpsc::unbounded_channel::<Vec<Output>>();
        let mut error = None;
        let evaluated = {
            let execution = self.engine.execute(request.code.clone(), sender);
            tokio::pin!(execution);
            loop {
                tokio::select! {
                    Some(batch) = outputs.recv() => {
                        for output in batch {
                            error = self.publish(output, count, silent, parent).or(error);
                        }
                    }
                    evaluated = &mut execution => break evaluated,
                }
            }
        };
        self.interrupter.set_running(false);
        // The engine sends a cell's last outputs before its outcome.
        while let Ok(batch) = outputs.try_recv() {
            for output in batch {
                error = self.publish(output, count, silent, parent).or(error);
            }
        }
        let quit = match evaluated {
            Ok(outcome) => {
                if store_history {
                    self.history.push(self.execution_count, &request.code, render(&outcome, Style::Plain));
                }
                outcome.quit
            }
            Err(EngineGone) => {
                error = self.publish(internal_error(), count, silent, parent).or(error);
                false
            }
        };
        self.finish_execute(request, count, error, quit, parent, queued).await
    }

    /// Replies to an execute_request; after a failure, gathers the requests already sent to
    /// abort them (with `stop_on_error`).
    async fn finish_execute(
        &mut self,
        request: &ExecuteRequest,
        count: ExecutionCount,
        error: Option<ReplyError>,
        quit: bool,
        parent: &JupyterMessage,
        queued: &mut mpsc::UnboundedReceiver<Request>,
    ) -> After {
        let silent = request.silent;
        // `:quit`: ask the front end to leave (jupyter console does; notebooks ignore it).
        let payload = if quit { vec![Payload::AskExit { keepkernel: false }] } else { Vec::new() };
        let failed = error.is_some();
        let execute_reply = ExecuteReply {
            status: if failed { ReplyStatus::Error } else { ReplyStatus::Ok },
            execution_count: count,
            payload,
            user_expressions: Some(HashMap::new()),
            error: error.map(Box::new),
        };
        let after = if failed && request.stop_on_error && !silent {
            After::Abort(Self::gather_sent(queued).await)
        } else {
            After::Continue
        };
        reply(&mut self.replies, execute_reply, parent).await;
        after
    }

    /// Publishes one output of a cell (nothing when `silent`); an error is also returned, for the
    /// reply.
    fn publish(
        &self,
        output: Output,
        count: ExecutionCount,
        silent: bool,
        parent: &JupyterMessage,
    ) -> Option<ReplyError> {
        match output {
            Output::Stream { name, text } if !silent => self.publisher.publish(StreamContent { name, text }, parent),
            Output::Display(data) if !silent => self.publisher.publish(DisplayData::new(data), parent),
            Output::Progress { text, update } if !silent => {
                let data = Media::new(vec![MediaType::Plain(text)]);
                let id = format!("quasi-progress-{}", parent.header.msg_id);
                // Marked, so that comparing a saved notebook (`quasi test`, the notebook tests)
                // can leave it out: whether a cell shows progress depends on how long it ran.
                let mut metadata = serde_json::Map::new();
                metadata.insert("quasi".into(), serde_json::json!({ "progress": true }));
                let transient = Transient { display_id: Some(id) };
                if update {
                    self.publisher.publish(UpdateDisplayData { data, metadata, transient }, parent);
                } else {
                    self.publisher.publish(DisplayData { data, metadata, transient: Some(transient) }, parent);
                }
            }
            Output::Result(data) if !silent => {
                // `transient` is sent as `{}`: clients validate it as an object, never null.
                self.publisher.publish(
                    ExecuteResult {
                        execution_count: count,
                        data,
                        metadata: Default::default(),
                        transient: Some(Transient::default()),
                    },
                    parent,
                )
            }
            Output::Error { ename, evalue, traceback } => {
                if !silent {
                    self.publisher.publish(
                        ErrorOutput { ename: ename.clone(), evalue: evalue.clone(), traceback: traceback.clone() },
                        parent,
                    );
                }
                return Some(ReplyError { ename, evalue, traceback });
            }
            _ => {}
        }
        None
    }

    async fn complete(&mut self, request: &CompleteRequest, parent: &JupyterMessage) {
        // Jupyter counts cursor positions in code points; `lang` in bytes.
        let cursor = request.cursor_pos.min(request.code.chars().count());
        let cursor_byte = byte_offset(&request.code, cursor);
        let complete_reply = match self.engine.complete(request.code.clone(), cursor_byte).await {
            Ok((start, items)) => {
                let cursor_start = request.code.get(..start).map_or(cursor, |before| before.chars().count());
                // JupyterLab shows each candidate's kind and signature from this (the key is
                // IPython's, still "experimental" in the protocol).
                let types: Vec<serde_json::Value> = items
                    .iter()
                    .map(|item| {
                        serde_json::json!({
                            "start": cursor_start,
                            "end": cursor,
                            "text": item.text,
                            "type": completion_type(item.kind),
                            "signature": item.detail,
                        })
                    })
                    .collect();
                let mut metadata = serde_json::Map::new();
                metadata.insert("_jupyter_types_experimental".to_string(), types.into());
                let matches = items.into_iter().map(|item| item.text).collect();
                CompleteReply { matches, cursor_start, cursor_end: cursor, metadata, ..CompleteReply::default() }
            }
            Err(EngineGone) => CompleteReply {
                status: ReplyStatus::Error,
                error: Some(Box::new(engine_gone())),
                ..CompleteReply::default()
            },
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
                InspectReply {
                    found: true,
                    data: Media::new(vec![MediaType::Plain(line), MediaType::Html(html)]),
                    ..InspectReply::default()
                }
            }
            Ok(None) => InspectReply::default(),
            Err(EngineGone) => InspectReply {
                status: ReplyStatus::Error,
                error: Some(Box::new(engine_gone())),
                ..InspectReply::default()
            },
        };
        reply(&mut self.replies, inspect_reply, parent).await;
    }

    async fn history(&mut self, request: &Request, parent: &JupyterMessage) {
        let query: Query = serde_json::from_value(request.content.clone()).unwrap_or_default();
        reply(&mut self.replies, HistoryReply::new(self.history.answer(&query)), parent).await;
    }
}

/// The `type` JupyterLab shows next to a completion candidate.
fn completion_type(kind: CompletionKind) -> &'static str {
    match kind {
        CompletionKind::Function => "function",
        CompletionKind::Global => "instance",
        CompletionKind::Struct => "class",
        CompletionKind::Form => "keyword",
        CompletionKind::Command => "magic",
        CompletionKind::Header => "path",
    }
}

/// The byte offset of the `cursor`th code point (the end if there are fewer).
fn byte_offset(text: &str, cursor: usize) -> usize {
    text.char_indices().nth(cursor).map_or(text.len(), |(offset, _)| offset)
}

fn engine_gone() -> ReplyError {
    ReplyError {
        ename: "error[internal]".to_string(),
        evalue: EngineGone.to_string(),
        traceback: vec![format!("error[internal]: {EngineGone}; restart the kernel")],
    }
}

fn internal_error() -> Output {
    let error = engine_gone();
    Output::Error { ename: error.ename, evalue: error.evalue, traceback: error.traceback }
}
