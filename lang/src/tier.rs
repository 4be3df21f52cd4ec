//! Tier: background promotion. A cell is compiled at the session's quick level and answers at
//! once; its unoptimised module, as bitcode, goes to a worker thread that recompiles its bodies
//! at opt 3 under new symbols, with the bodies of the functions they call copied in so that
//! LLVM can inline them, and hands back an object file. The session links it and points the
//! functions' slots at it at a cell boundary (`session/tiering.rs`), so no half-installed
//! version ever runs.
//!
//! The worker owns an LLVM context and target machines of its own (LLVM contexts are not shared
//! between threads): only bytes cross the thread boundary. It runs at a lower priority (nice
//! 10), so on a machine with few cores the session's own work and the user's code come first.
//! Jobs are taken newest first: the function just defined is the one likely called next.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use inkwell::context::Context;
use inkwell::memory_buffer::MemoryBuffer;
use inkwell::module::{Linkage, Module};
use inkwell::values::{AsValueRef, FunctionValue};
use inkwell::AddressSpace;

use crate::backend::{Backend, BackendError, Emit, Target};
use crate::codegen;

/// The level background promotion compiles at.
pub(crate) const PROMOTED_LEVEL: u8 = 3;

/// Callee bodies larger than this (bitcode bytes of their cell) are not copied in for inlining:
/// O3 would not inline them anyway, and copying costs the worker time.
pub(crate) const CALLEE_BITCODE_LIMIT: usize = 256 << 10;

/// At most this many jobs wait; beyond, the oldest is dropped (its functions keep their quick
/// code): a burst of definitions faster than the worker must not hold every cell's module.
const QUEUE_LIMIT: usize = 256;

/// The stack of the worker thread: LLVM's passes recurse over large functions.
const WORKER_STACK: usize = 64 << 20;

/// A recompilation the worker is asked for: some bodies of one cell's module.
pub(crate) struct Job {
    pub id: u64,
    /// The cell's module before optimisation.
    pub bitcode: Arc<[u8]>,
    /// The bodies to recompile: (symbol in `bitcode`, new symbol).
    pub bodies: Vec<(String, String)>,
    /// Functions the bodies call through slots whose bodies are copied in for inlining.
    pub callees: Vec<Callee>,
    /// Set by the session when the result could no longer be used (the functions were
    /// redefined, the session reset): the worker skips the job.
    pub cancelled: Arc<AtomicBool>,
}

/// The body of a function called through its slot, made available to the promoted code.
pub(crate) struct Callee {
    /// The function's name (its slot is `name#slot`).
    pub name: String,
    pub body: CalleeBody,
}

/// Where a callee's body comes from.
pub(crate) enum CalleeBody {
    /// One of the job's own bodies, by its new symbol.
    Promoted(String),
    /// Another cell's module: its bitcode and the body's symbol in it.
    Module { bitcode: Arc<[u8]>, symbol: String },
}

/// What became of a job.
pub(crate) struct Done {
    pub id: u64,
    /// The object file, or why there is none (`None`: the job was cancelled before it ran, or
    /// dropped from a full queue).
    pub result: Option<Result<Vec<u8>, String>>,
    /// How long the worker took.
    pub compile: Duration,
}

struct Queue {
    jobs: Vec<Job>,
    /// A job is being compiled.
    busy: bool,
    stop: bool,
}

struct Shared {
    queue: Mutex<Queue>,
    wake: Condvar,
    /// Tests set it to keep a job in flight: the worker waits while it is set before compiling.
    #[cfg(test)]
    held: Mutex<bool>,
    #[cfg(test)]
    released: Condvar,
}

/// The session's background compiler: a worker thread started with the first job.
pub(crate) struct Worker {
    shared: Arc<Shared>,
    sender: Sender<Done>,
    results: Receiver<Done>,
    thread: Option<std::thread::JoinHandle<()>>,
    /// Jobs submitted and not yet reported back.
    outstanding: usize,
}

impl Default for Worker {
    fn default() -> Self {
        let (sender, results) = mpsc::channel();
        Worker {
            shared: Arc::new(Shared {
                queue: Mutex::new(Queue { jobs: Vec::new(), busy: false, stop: false }),
                wake: Condvar::new(),
                #[cfg(test)]
                held: Mutex::new(false),
                #[cfg(test)]
                released: Condvar::new(),
            }),
            sender,
            results,
            thread: None,
            outstanding: 0,
        }
    }
}

impl Worker {
    /// Queues a job; the worker takes the newest first.
    pub(crate) fn submit(&mut self, job: Job) {
        if self.thread.is_none() {
            let shared = self.shared.clone();
            let sender = self.sender.clone();
            let spawned = std::thread::Builder::new()
                .name("quasi-tier".into())
                .stack_size(WORKER_STACK)
                .spawn(move || work(&shared, &sender));
            match spawned {
                Ok(thread) => self.thread = Some(thread),
                Err(_) => {
                    // No thread: the code stays at its level; the job is reported as failed.
                    let _ = self.sender.send(Done {
                        id: job.id,
                        result: Some(Err("could not start the background compiler".into())),
                        compile: Duration::ZERO,
                    });
                    self.outstanding += 1;
                    return;
                }
            }
        }
        self.outstanding += 1;
        if let Ok(mut queue) = self.shared.queue.lock() {
            queue.jobs.push(job);
            if queue.jobs.len() > QUEUE_LIMIT {
                let oldest = queue.jobs.remove(0);
                let _ = self.sender.send(Done { id: oldest.id, result: None, compile: Duration::ZERO });
            }
        }
        self.shared.wake.notify_one();
    }

    /// The jobs finished since the last call, without waiting.
    pub(crate) fn finished(&mut self) -> Vec<Done> {
        let done: Vec<Done> = self.results.try_iter().collect();
        self.outstanding -= done.len();
        done
    }

    /// The next job to finish, waiting at most `timeout`.
    pub(crate) fn next_finished(&mut self, timeout: Duration) -> Option<Done> {
        match self.results.recv_timeout(timeout) {
            Ok(done) => {
                self.outstanding -= 1;
                Some(done)
            }
            Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => None,
        }
    }

    /// A handle that keeps the worker from starting to compile: a job it has taken stays in
    /// flight while a test holds it.
    #[cfg(test)]
    pub(crate) fn hold(&self) -> Hold {
        Hold(self.shared.clone())
    }

    /// Whether the worker has taken every queued job (and may be compiling one).
    #[cfg(test)]
    pub(crate) fn queue_taken(&self) -> bool {
        self.shared.queue.lock().is_ok_and(|queue| queue.jobs.is_empty() && queue.busy)
    }

    /// Jobs submitted whose results have not been taken.
    pub(crate) fn outstanding(&self) -> usize {
        self.outstanding
    }
}

/// See `Worker::hold`.
#[cfg(test)]
pub(crate) struct Hold(Arc<Shared>);

#[cfg(test)]
impl Hold {
    /// Holds the worker (`true`) or lets it go on (`false`).
    pub(crate) fn set(&self, held: bool) {
        *self.0.held.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = held;
        self.0.released.notify_all();
    }
}

/// A test that fails while it holds the worker lets it go, so dropping its session (which
/// joins the worker) does not wait for ever.
#[cfg(test)]
impl Drop for Hold {
    fn drop(&mut self) {
        self.set(false);
    }
}

impl Drop for Worker {
    /// Queued jobs are dropped; the one being compiled is finished, and the thread joined: a
    /// process must not exit (running LLVM's static destructors) while the thread uses LLVM.
    fn drop(&mut self) {
        if let Ok(mut queue) = self.shared.queue.lock() {
            queue.stop = true;
            queue.jobs.clear();
        }
        self.shared.wake.notify_all();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The worker thread: takes jobs, newest first, until the session drops its `Worker`.
fn work(shared: &Shared, results: &Sender<Done>) {
    // SAFETY: setpriority on this thread's own id only lowers its scheduling priority.
    unsafe {
        libc::setpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t, 10);
    }
    let backend = Backend::new();
    loop {
        let job = {
            let Ok(mut queue) = shared.queue.lock() else { return };
            queue.busy = false;
            while queue.jobs.is_empty() && !queue.stop {
                queue = match shared.wake.wait(queue) {
                    Ok(queue) => queue,
                    Err(_) => return,
                };
            }
            if queue.stop {
                return;
            }
            queue.busy = true;
            queue.jobs.pop()
        };
        let Some(job) = job else { continue };
        #[cfg(test)]
        {
            let mut held = shared.held.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            while *held {
                held = shared.released.wait(held).unwrap_or_else(std::sync::PoisonError::into_inner);
            }
        }
        let start = Instant::now();
        let result = match (&backend, job.cancelled.load(Ordering::SeqCst)) {
            (_, true) => None,
            (Ok(backend), false) => Some(promote(backend, &job)),
            (Err(message), false) => Some(Err(message.clone())),
        };
        if results.send(Done { id: job.id, result, compile: start.elapsed() }).is_err() {
            return;
        }
    }
}

/// Recompiles the job's bodies at `PROMOTED_LEVEL`: the object file.
fn promote(backend: &Backend, job: &Job) -> Result<Vec<u8>, String> {
    let context = &backend.context;
    let module = parse(context, &job.bitcode, "promoted")?;
    let renames: HashMap<&str, &str> = job.bodies.iter().map(|(old, new)| (old.as_str(), new.as_str())).collect();
    keep_only(&module, &renames);
    for (index, callee) in job.callees.iter().enumerate() {
        let body = match &callee.body {
            CalleeBody::Promoted(symbol) => module.get_function(symbol),
            CalleeBody::Module { bitcode, symbol } => {
                let other = parse(context, bitcode, "callee")?;
                let copy = format!("{}#inline.{}.{index}", callee.name, job.id);
                keep_only(&other, &HashMap::from([(symbol.as_str(), copy.as_str())]));
                if let Some(function) = other.get_function(&copy) {
                    function.set_linkage(Linkage::Private);
                }
                module.link_in_module(other).map_err(|error| error.to_string())?;
                module.get_function(&copy)
            }
        };
        if let Some(body) = body {
            call_directly(context, &module, &codegen::slot_symbol(&callee.name), body);
        }
    }
    module.verify().map_err(|error| format!("the promoted module does not verify: {error}"))?;
    match backend.compile(module, &Target::Host(PROMOTED_LEVEL), Emit::Code) {
        Ok(compiled) => Ok(compiled.code),
        Err(BackendError::Rejected(errors)) => Err(errors.into_iter().next().unwrap_or_default()),
        Err(error) => Err(error.to_string()),
    }
}

fn parse<'ctx>(context: &'ctx Context, bitcode: &[u8], name: &str) -> Result<Module<'ctx>, String> {
    let buffer = MemoryBuffer::create_from_memory_range_copy(bitcode, name);
    Module::parse_bitcode_from_buffer(&buffer, context).map_err(|error| error.to_string())
}

/// Leaves in `module` only what the renamed bodies need: each body in `renames` gets its new
/// symbol; every other definition the module exports (entries, traps, thunks, other bodies) is
/// removed, or replaced by a declaration of the linked original if code still refers to it
/// (a `fn-ptr` thunk, kept for the session, must keep its address). Private code stays (string
/// literals, inline copies; what nothing uses goes with the optimiser's dead code removal).
fn keep_only(module: &Module<'_>, renames: &HashMap<&str, &str>) {
    let mut function = module.get_first_function();
    let mut exported = Vec::new();
    while let Some(current) = function {
        function = current.get_next_function();
        if current.count_basic_blocks() == 0 {
            continue;
        }
        let name = current.get_name().to_string_lossy().into_owned();
        if let Some(new) = renames.get(name.as_str()) {
            current.as_global_value().set_name(new);
        } else if !matches!(current.get_linkage(), Linkage::Private | Linkage::Internal) {
            exported.push((name, current));
        }
    }
    for (name, definition) in exported {
        // SAFETY: the value is a live function of `module`.
        let used = unsafe { !llvm_sys::core::LLVMGetFirstUse(definition.as_value_ref()).is_null() };
        if used {
            let declaration = module.add_function(&format!("{name}#declaration"), definition.get_type(), None);
            definition.replace_all_uses_with(declaration);
            // SAFETY: nothing refers to the definition any more.
            unsafe { definition.delete() };
            declaration.as_global_value().set_name(&name);
        } else {
            // SAFETY: nothing refers to the definition.
            unsafe { definition.delete() };
        }
    }
}

/// Replaces loads of the slot `slot` with `body` itself: the slot becomes a private constant
/// holding the body's address, which the optimiser folds into direct calls it may inline.
fn call_directly<'ctx>(context: &'ctx Context, module: &Module<'ctx>, slot: &str, body: FunctionValue<'ctx>) {
    let Some(declared) = module.get_global(slot) else { return };
    if declared.get_initializer().is_some() {
        return;
    }
    let constant = module.add_global(context.ptr_type(AddressSpace::default()), None, &format!("{slot}.inline"));
    constant.set_initializer(&body.as_global_value().as_pointer_value());
    constant.set_constant(true);
    constant.set_linkage(Linkage::Private);
    declared.as_pointer_value().replace_all_uses_with(constant.as_pointer_value());
    // SAFETY: nothing refers to the declaration any more.
    unsafe { declared.delete() };
}
