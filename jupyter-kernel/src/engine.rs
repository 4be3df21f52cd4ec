//! Engine: the session on its own thread, driven by a closed enum of events.
//!
//! The session is not a tokio task: a cell can compute for minutes, and the sockets (heartbeat,
//! control, the shell reader) must keep being served meanwhile. Each event carries a oneshot
//! sender for its answer, so the async side simply awaits it.

use std::panic::AssertUnwindSafe;
use std::sync::mpsc;
use std::time::Duration;

use quasi_lang::{completeness, Completeness, Completion, Outcome, Session, SessionConfig};
use quasi_repl::transcript::{pasted_cells, record_or_save, Recording};
use tokio::sync::oneshot;

use crate::display::{Output, Published};
use crate::logging::warning;

/// Everything the kernel asks of the session.
pub enum Event {
    /// Evaluate a cell.
    /// Evaluate a cell. Its outputs go to `outputs` as they come (the last of them before the
    /// reply), the finished outcome to `reply`.
    Execute { code: String, outputs: tokio::sync::mpsc::UnboundedSender<Vec<Output>>, reply: oneshot::Sender<Outcome> },
    /// Completion candidates at a byte offset: where the word starts, and the candidates.
    Complete { code: String, cursor: usize, reply: oneshot::Sender<(usize, Vec<Completion>)> },
    /// Whether the text is a whole cell yet.
    IsComplete { code: String, reply: oneshot::Sender<Completeness> },
    /// The definition line of the name at a byte offset, if the session defines it.
    Inspect { code: String, cursor: usize, reply: oneshot::Sender<Option<String>> },
    /// Drop the session (its JIT and executor thread) and stop.
    Shutdown { done: oneshot::Sender<()> },
}

/// The session thread is gone (it panicked outside an event, or was shut down).
#[derive(Debug)]
pub struct EngineGone;

impl std::fmt::Display for EngineGone {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(formatter, "the session thread is not running")
    }
}

/// The async side's handle on the session thread.
#[derive(Clone)]
pub struct Engine {
    events: mpsc::Sender<Event>,
    /// Interrupts the running cell's staging (Rhai) from any thread.
    pub interrupt: quasi_lang::InterruptHandle,
}

impl Engine {
    /// Starts the session thread; fails if the session cannot start (LLVM, the JIT).
    pub fn spawn() -> anyhow::Result<Engine> {
        let (events, receiver) = mpsc::channel::<Event>();
        let (started, start_result) = mpsc::channel::<Result<quasi_lang::InterruptHandle, String>>();
        std::thread::Builder::new().name("quasi-session".into()).stack_size(quasi_lang::SESSION_STACK).spawn(
            move || {
                // Created here because the session stays on the thread that made it.
                let session = Session::new(SessionConfig { capture_output: true, ..SessionConfig::default() });
                match session {
                    Ok(mut session) => {
                        session.set_tune_cache(quasi_lang::TuneCache::from_environment());
                        let _ = started.send(Ok(session.interrupt_handle()));
                        serve(session, receiver);
                    }
                    Err(error) => {
                        let _ = started.send(Err(error.to_string()));
                    }
                }
            },
        )?;
        match start_result.recv() {
            Ok(Ok(interrupt)) => Ok(Engine { events, interrupt }),
            Ok(Err(error)) => anyhow::bail!("cannot start a session: {error}"),
            Err(_) => anyhow::bail!("the session thread died while starting"),
        }
    }

    async fn ask<T>(&self, event: impl FnOnce(oneshot::Sender<T>) -> Event) -> Result<T, EngineGone> {
        let (reply, answer) = oneshot::channel();
        self.events.send(event(reply)).map_err(|_| EngineGone)?;
        answer.await.map_err(|_| EngineGone)
    }

    /// Evaluates a cell.
    pub async fn execute(
        &self,
        code: String,
        outputs: tokio::sync::mpsc::UnboundedSender<Vec<Output>>,
    ) -> Result<Outcome, EngineGone> {
        self.ask(|reply| Event::Execute { code, outputs, reply }).await
    }

    /// Completion at a byte offset.
    pub async fn complete(&self, code: String, cursor: usize) -> Result<(usize, Vec<Completion>), EngineGone> {
        self.ask(|reply| Event::Complete { code, cursor, reply }).await
    }

    /// Whether `code` is a whole cell.
    pub async fn is_complete(&self, code: String) -> Result<Completeness, EngineGone> {
        self.ask(|reply| Event::IsComplete { code, reply }).await
    }

    /// The definition line of the name at byte offset `cursor`.
    pub async fn inspect(&self, code: String, cursor: usize) -> Result<Option<String>, EngineGone> {
        self.ask(|reply| Event::Inspect { code, cursor, reply }).await
    }

    /// Stops the session, waiting at most `limit`: a cell stuck in compiled code cannot be
    /// stopped yet (no interrupt handle), and a shutdown must not hang on it.
    pub async fn shutdown(&self, limit: Duration) {
        let _ = tokio::time::timeout(limit, self.ask(|done| Event::Shutdown { done })).await;
    }
}

fn serve(mut session: Session, events: mpsc::Receiver<Event>) {
    // Every executed cell and what it showed, for `:save FILE` (a transcript `quasi test` checks).
    let mut recording = Recording::default();
    for event in events {
        if let Event::Shutdown { done } = event {
            drop(session);
            let _ = done.send(());
            return;
        }
        // As rust-analyzer guards each request: a panic in `lang` costs this event its answer
        // (the kernel reports it), not the whole kernel. Only `commit` changes the session, so a
        // cell that panicked before it leaves the session as it was.
        let handled = std::panic::catch_unwind(AssertUnwindSafe(|| handle(&mut session, &mut recording, event)));
        if handled.is_err() {
            warning!("the session panicked while handling a request; the session is kept");
        }
    }
}

fn handle(session: &mut Session, recording: &mut Recording, event: Event) {
    match event {
        Event::Execute { code, outputs, reply } => {
            // A pasted transcript runs cell by cell, up to a failure; the reply is the last
            // cell's.
            let pasted = pasted_cells(&code);
            let mut last = None;
            for cell in pasted.as_deref().unwrap_or(std::slice::from_ref(&code)) {
                // Program output streams while the cell runs; the rest follows when it ends.
                let mut published = Published::default();
                let mut outcome = session.eval_streaming(cell, &mut |partial| {
                    let new = published.take(partial, false);
                    if !new.is_empty() {
                        let _ = outputs.send(new);
                    }
                });
                record_or_save(recording, cell, &mut outcome);
                let _ = outputs.send(published.take(&outcome, true));
                let failed = outcome.failed();
                last = Some(outcome);
                if failed {
                    break;
                }
            }
            // A paste of prompts alone ran nothing: it is an empty cell.
            let outcome = last.unwrap_or_else(|| session.eval(""));
            let _ = reply.send(outcome);
        }
        Event::Complete { code, cursor, reply } => {
            let _ = reply.send(session.completion_items(&code, cursor));
        }
        Event::IsComplete { code, reply } => {
            let _ = reply.send(completeness(&code));
        }
        Event::Inspect { code, cursor, reply } => {
            let name = name_at(session, &code, cursor);
            let _ = reply.send(name.and_then(|name| session.describe(&name)));
        }
        Event::Shutdown { .. } => {}
    }
}

/// The name the cursor is on or just after. Where it starts is `lang`'s word rule, the one
/// completion uses; it ends where the symbol does (at whitespace or a bracket or quote).
fn name_at(session: &Session, code: &str, cursor: usize) -> Option<String> {
    let cursor = cursor.min(code.len());
    let (start, _) = session.completions(code, cursor);
    let rest = code.get(cursor..)?;
    let end = cursor
        + rest
            .find(|character: char| character.is_whitespace() || "()[]\"`,;".contains(character))
            .unwrap_or(rest.len());
    let name = code.get(start..end)?;
    (!name.is_empty()).then(|| name.to_string())
}
