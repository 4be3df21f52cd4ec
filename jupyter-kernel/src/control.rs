//! Control: kernel_info, interrupt and shutdown, answered at once, even while a cell runs (the
//! control task never waits for the session, except a shutdown, for a bounded time).

use jupyter_protocol::{
    ExecutionState, InterruptReply, JupyterMessageContent, ReplyStatus, ShutdownReply, ShutdownRequest,
};
use jupyter_zmq_client::Connection;
use tokio::sync::mpsc;
use zeromq::RouterSocket;

use crate::channel::{kernel_info, note_read_error, reply, shut_down};
use crate::engine::Engine;
use crate::interrupt::Interrupter;
use crate::iopub::Publisher;
use crate::logging::debug;
use crate::wire;

/// What control requests need: the engine only to shut it down.
pub struct Control {
    engine: Engine,
    publisher: Publisher,
    interrupter: Interrupter,
    exit: mpsc::UnboundedSender<i32>,
}

impl Control {
    pub fn new(
        engine: Engine,
        publisher: Publisher,
        interrupter: Interrupter,
        exit: mpsc::UnboundedSender<i32>,
    ) -> Control {
        Control { engine, publisher, interrupter, exit }
    }

    /// Serves the control socket until a shutdown.
    pub async fn run(self, control: Connection<RouterSocket>) {
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
                    reply(
                        &mut replies,
                        ShutdownReply { restart: *restart, status: ReplyStatus::Ok, error: None },
                        parent,
                    )
                    .await;
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
