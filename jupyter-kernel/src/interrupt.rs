//! Interrupts: Jupyter's interrupt requests and SIGINT, routed to the session's `InterruptHandle`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::logging::{debug, warning};

/// Where interrupts go: the session's `InterruptHandle`, taken when the engine starts. It
/// stops Rhai expansion at once and compiled code where it stands (the cell ends with
/// `error[interrupted]`, the session is kept).
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
            debug!("interrupt ({source}): the running cell stops");
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
pub async fn watch_signals(interrupter: Interrupter) {
    use tokio::signal::unix::{signal, SignalKind};
    let Ok(mut interrupts) = signal(SignalKind::interrupt()) else {
        warning!("cannot watch SIGINT");
        return;
    };
    while interrupts.recv().await.is_some() {
        interrupter.interrupt("SIGINT");
    }
}
