//! The simulator's device workers: threads that run submissions (docs/language.md §7.8), one
//! at a time each, so that host code and simulated device work overlap for real and two
//! submissions run side by side on two cores. A submission waits in the queue while every
//! worker is busy, as work waits for a GPU's streams.
//!
//! Each worker has its own executor (a `Simulator`: its frame, fibers and stacks), an
//! alternate signal stack, and runs each command behind the fault guard: a fault or an
//! interrupt ends that command, not the worker. `stop` cancels every submission: those not
//! started never run, and a running kernel is interrupted with the guard's interrupt, sent
//! again until its worker is idle.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::executor::Simulator;
use crate::gpu::device::Fence;

/// A submission's work for a worker, given the worker's executor.
pub(super) type Job = Box<dyn FnOnce(&Simulator) + Send>;

/// How often `stop` interrupts a worker that still runs.
const STOP_POLL: Duration = Duration::from_millis(5);
/// How long an idle worker spins before it sleeps.
const IDLE_SPIN: Duration = Duration::from_micros(50);

#[derive(Default)]
struct Queue {
    jobs: VecDeque<(Arc<Fence>, Job)>,
    /// What each worker runs now.
    running: Vec<Option<Arc<Fence>>>,
    /// The workers should end (the simulator is dropped).
    closing: bool,
}

#[derive(Default)]
struct Shared {
    queue: Mutex<Queue>,
    changed: Condvar,
    /// Jobs queued and not yet taken, read without the lock by idle workers that spin.
    waiting: AtomicUsize,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

struct Worker {
    thread: JoinHandle<()>,
    pthread: libc::pthread_t,
}

/// The simulator's workers, started by the first submission.
#[derive(Default)]
pub(super) struct Workers {
    shared: Arc<Shared>,
    threads: Mutex<Vec<Worker>>,
}

impl Workers {
    /// Queues a submission's job (after `start`).
    pub(super) fn push(&self, fence: Arc<Fence>, job: Job) {
        self.shared.lock().jobs.push_back((fence, job));
        self.shared.waiting.fetch_add(1, Ordering::SeqCst);
        self.shared.changed.notify_all();
    }

    /// Starts the workers, unless they run.
    pub(super) fn start(&self) -> Result<(), String> {
        let mut threads = self.threads.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if !threads.is_empty() {
            return Ok(());
        }
        let count = std::thread::available_parallelism().map_or(2, usize::from).max(2);
        self.shared.lock().running = vec![None; count];
        for index in 0..count {
            let shared = Arc::clone(&self.shared);
            let thread = std::thread::Builder::new()
                .name(format!("quasi-sim-{index}"))
                .spawn(move || work(&shared, index))
                .map_err(|error| format!("the simulator could not start a device worker: {error}"))?;
            let pthread = std::os::unix::thread::JoinHandleExt::as_pthread_t(&thread);
            threads.push(Worker { thread, pthread });
        }
        Ok(())
    }

    /// Cancels every submission and returns when no worker runs one.
    pub(super) fn stop(&self) {
        let threads = self.threads.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut queue = self.shared.lock();
        for (fence, _) in &queue.jobs {
            fence.cancel();
        }
        loop {
            let busy: Vec<usize> = queue
                .running
                .iter()
                .enumerate()
                .filter_map(|(index, running)| running.as_ref().map(|fence| (index, fence)))
                .map(|(index, fence)| {
                    fence.cancel();
                    index
                })
                .collect();
            if busy.is_empty() && queue.jobs.is_empty() {
                return;
            }
            for index in busy {
                if let Some(worker) = threads.get(index) {
                    // SAFETY: the worker thread lives until `Drop` joins it.
                    unsafe { crate::guard::request_interrupt(worker.pthread) };
                }
            }
            queue =
                self.shared.changed.wait_timeout(queue, STOP_POLL).unwrap_or_else(std::sync::PoisonError::into_inner).0;
        }
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        self.stop();
        self.shared.lock().closing = true;
        self.shared.changed.notify_all();
        let threads = std::mem::take(self.threads.get_mut().unwrap_or_else(std::sync::PoisonError::into_inner));
        for worker in threads {
            let _ = worker.thread.join();
        }
    }
}

/// A worker's loop: takes the next job, runs it on its own executor.
fn work(shared: &Shared, index: usize) {
    crate::guard::prepare_thread();
    crate::guard::install_handlers();
    let executor = Simulator::new();
    let mut queue = shared.lock();
    loop {
        if let Some((fence, job)) = queue.jobs.pop_front() {
            shared.waiting.fetch_sub(1, Ordering::SeqCst);
            queue.running[index] = Some(fence);
            drop(queue);
            job(&executor);
            queue = shared.lock();
            queue.running[index] = None;
            shared.changed.notify_all();
            continue;
        }
        if queue.closing {
            return;
        }
        // A job that follows soon (the next submission of a loop) is taken without the tens of
        // µs a sleeping thread takes to wake.
        drop(queue);
        let spin_until = Instant::now() + IDLE_SPIN;
        while shared.waiting.load(Ordering::SeqCst) == 0 && Instant::now() < spin_until {
            std::hint::spin_loop();
        }
        queue = shared.lock();
        if queue.jobs.is_empty() && !queue.closing {
            queue = shared.changed.wait(queue).unwrap_or_else(std::sync::PoisonError::into_inner);
        }
    }
}
