//! A small Jupyter client for the smoke test and the round-trip bench: starts `quasi-kernel` on
//! loopback ports with a fresh key and speaks to it through jupyter-zmq-client, as a front end
//! would.

#![allow(dead_code)] // Each user (test, bench) needs a different part.

use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context as _};
use jupyter_protocol::{
    ConnectionInfo, ExecutionState, JupyterMessage, JupyterMessageContent, KernelInfoRequest, Transport,
};
use jupyter_zmq_client::{ClientIoPubConnection, ClientShellConnection};

pub const TIMEOUT: Duration = Duration::from_secs(20);

/// A running kernel process and the client's shell and iopub connections to it.
pub struct Kernel {
    pub process: std::process::Child,
    pub info: ConnectionInfo,
    pub session_id: String,
    pub shell: ClientShellConnection,
    pub iopub: ClientIoPubConnection,
    connection_file: PathBuf,
}

impl Kernel {
    /// Starts the kernel binary and waits until it answers on shell and publishes on iopub.
    pub async fn start(executable: &str) -> anyhow::Result<Kernel> {
        let ip = IpAddr::V4(Ipv4Addr::LOCALHOST);
        let (ports, listeners) = jupyter_zmq_client::peek_ports_with_listeners(ip, 5).await?;
        let info = ConnectionInfo {
            transport: Transport::TCP,
            ip: ip.to_string(),
            shell_port: ports[0],
            iopub_port: ports[1],
            stdin_port: ports[2],
            control_port: ports[3],
            hb_port: ports[4],
            signature_scheme: "hmac-sha256".to_string(),
            key: uuid::Uuid::new_v4().to_string(),
            kernel_name: Some("quasi".to_string()),
        };
        let connection_file =
            std::env::temp_dir().join(format!("quasi-kernel-client-{}-{}.json", std::process::id(), ports[0]));
        std::fs::write(&connection_file, serde_json::to_string(&info)?)?;
        // JPY_PARENT_PID: the kernel exits with this process even if `Drop` never runs.
        let mut process = std::process::Command::new(executable)
            .arg("--connection-file")
            .arg(&connection_file)
            .env("JPY_PARENT_PID", std::process::id().to_string())
            .spawn()
            .with_context(|| format!("starting {executable}"))?;
        // The kernel binds these ports as it starts; the listeners only kept them reserved.
        drop(listeners);
        let session_id = uuid::Uuid::new_v4().to_string();
        let connected = tokio::time::timeout(TIMEOUT, connect(&info, &session_id)).await;
        let (shell, iopub) = match connected {
            Ok(Ok(connections)) => connections,
            failed => {
                let _ = process.kill();
                let _ = process.wait();
                let _ = std::fs::remove_file(&connection_file);
                match failed {
                    Ok(Err(error)) => return Err(error),
                    _ => bail!("could not connect to the kernel"),
                }
            }
        };
        let mut kernel = Kernel { process, info, session_id, shell, iopub, connection_file };
        kernel.wait_until_ready().await?;
        Ok(kernel)
    }

    /// Sends kernel_info requests until one is answered and its idle status arrives, so the
    /// iopub subscription is known to be in place.
    async fn wait_until_ready(&mut self) -> anyhow::Result<()> {
        let deadline = tokio::time::Instant::now() + TIMEOUT;
        while tokio::time::Instant::now() < deadline {
            let request: JupyterMessage = KernelInfoRequest {}.into();
            let msg_id = request.header.msg_id.clone();
            // A pure-Rust DEALER whose connection was reset while the kernel started waits for a
            // peer forever: fail instead.
            tokio::time::timeout(TIMEOUT, self.shell.send(request)).await.context("sending kernel_info_request")??;
            if tokio::time::timeout(Duration::from_millis(500), self.reply_to(&msg_id)).await.is_err() {
                continue;
            }
            if tokio::time::timeout(Duration::from_millis(500), self.idle_after(&msg_id)).await.is_ok() {
                return Ok(());
            }
        }
        bail!("the kernel did not become ready")
    }

    /// Sends a request on shell; returns its msg_id.
    pub async fn send(&mut self, content: impl Into<JupyterMessageContent>) -> anyhow::Result<String> {
        let request = JupyterMessage::new(content.into(), None);
        let msg_id = request.header.msg_id.clone();
        self.shell.send(request).await?;
        Ok(msg_id)
    }

    /// The shell reply to `msg_id` (replies to earlier requests are skipped).
    pub async fn reply_to(&mut self, msg_id: &str) -> anyhow::Result<JupyterMessage> {
        loop {
            let reply = self.shell.read().await?;
            if reply.parent_header.as_ref().is_some_and(|parent| parent.msg_id == msg_id) {
                return Ok(reply);
            }
        }
    }

    /// The iopub messages of `msg_id` up to its idle status, which is not included.
    pub async fn idle_after(&mut self, msg_id: &str) -> anyhow::Result<Vec<JupyterMessage>> {
        let mut messages = Vec::new();
        loop {
            let message = self.iopub.read().await?;
            if message.parent_header.as_ref().is_none_or(|parent| parent.msg_id != msg_id) {
                continue;
            }
            if let JupyterMessageContent::Status(status) = &message.content {
                if status.execution_state == ExecutionState::Idle {
                    return Ok(messages);
                }
            }
            messages.push(message);
        }
    }
}

/// Connects shell and iopub, retrying while the kernel is still starting (a connection made
/// before it listens is refused or reset).
async fn connect(
    info: &ConnectionInfo,
    session_id: &str,
) -> anyhow::Result<(ClientShellConnection, ClientIoPubConnection)> {
    loop {
        let identity = jupyter_zmq_client::peer_identity_for_session(session_id)?;
        let shell = jupyter_zmq_client::create_client_shell_connection_with_identity(info, session_id, identity).await;
        let iopub = jupyter_zmq_client::create_client_iopub_connection(info, "", session_id).await;
        if let (Ok(shell), Ok(iopub)) = (shell, iopub) {
            return Ok((shell, iopub));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

impl Drop for Kernel {
    fn drop(&mut self) {
        let _ = self.process.kill();
        let _ = self.process.wait();
        let _ = std::fs::remove_file(&self.connection_file);
    }
}
