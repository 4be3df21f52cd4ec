//! iopub: the one writer of the iopub socket, so outputs keep the order they were published in.

use std::time::Duration;

use jupyter_protocol::{ExecutionState, JupyterMessage, JupyterMessageContent, Status};
use jupyter_zmq_client::Connection;
use tokio::sync::{mpsc, oneshot};
use zeromq::PubSocket;

use crate::logging::warning;
use crate::wire;

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
    pub fn start(mut iopub: Connection<PubSocket>) -> Publisher {
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
