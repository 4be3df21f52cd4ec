//! Kernel: Jupyter protocol 5.3 on one tokio thread. Starts the engine and the tasks that
//! serve the five sockets (`shell`, `control`, the iopub `Publisher`, heartbeat, stdin). What
//! the channels share lives below it (`channel`, `iopub`, `interrupt`), so no channel imports
//! this module.

use std::path::Path;
use std::time::Duration;

use jupyter_zmq_client::Connection;
use tokio::sync::mpsc;
use zeromq::{RouterSocket, SocketRecv, SocketSend};

use crate::channel::note_read_error;
use crate::control::Control;
use crate::engine::Engine;
use crate::interrupt::{watch_signals, Interrupter};
use crate::iopub::Publisher;
use crate::logging::debug;
use crate::parent;
use crate::shell::{read_shell, Shell};
use crate::wire::{self, Request};

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
