//! The simulator's executor: runs a launch's threads on the CPU, the kernel compiled for the
//! host by the same codegen (`codegen::sim`), with CUDA's thread model.
//!
//! Strategy (measured; ARCHITECTURE.md explains the choice): a kernel without a barrier runs
//! its threads one after another on one fiber, a plain call per thread. A kernel with a
//! barrier runs each thread of a block on its own fiber (corosensei's stackful coroutines); a
//! barrier suspends the thread's fiber, and the block's threads are resumed in rounds, each
//! round running every thread to its next barrier, so a barrier waits for exactly the block's
//! threads. Blocks run one after another on the executor thread: faults and interrupts end a
//! guarded call on that thread only, and a block per core would at most halve the time on the
//! two-core machines this runs on.
//!
//! Checking (on unless `:gpu sim unchecked`): every load and store's address must lie in a
//! buffer, a launch's staged array, the kernel's globals, the block's shared memory or the
//! thread's own stack; buffers get red zones so that running off one end is never inside its
//! neighbour. A barrier that not every thread of a block reaches, or threads waiting at
//! different barriers, are reported too. A failed check is reported once, and the access is
//! redirected to scratch memory so that nothing is corrupted; the launch stops at the next
//! barrier or when the thread ends.
//!
//! Faults (a wild access with checking off) and interrupts leave a launch through the guard's
//! long jump, from inside a fiber; the next launch resets the fibers left behind
//! (`Run::abandoned`) without unwinding them (compiled code has nothing to drop).

use std::alloc::Layout;
use std::cell::UnsafeCell;
use std::sync::Arc;
use std::time::{Duration, Instant};

use corosensei::stack::{DefaultStack, Stack};
use corosensei::{Coroutine, CoroutineResult, Yielder};

use super::facts::Facts;
use super::proofs::{self, Shape};
use super::races::{stamp, GlobalShadow, Report, SharedShadow, NO_STAMP};
use super::warp::{self, Request, Waiting};
use crate::abi::{sim_check_site, Access, SimFrame, SimGuard};
use crate::codegen::SimSite;
use crate::source::Span;
use crate::tree::WarpOp;

/// Bytes before and after every simulated allocation that no access may touch.
const RED_ZONE: usize = 256;
/// Alignment of simulated allocations (what `cudaMalloc` promises).
const ALIGN: usize = 256;
/// The stack of a thread's fiber in a kernel with barriers, and of the one fiber that runs a
/// kernel without.
pub(crate) const THREAD_STACK: usize = 256 << 10;
const GRID_STACK: usize = 256 << 10;

extern "C" {
    /// The stack an interrupt may search for a return into compiled code: the fiber's (0: the
    /// guarded call's own stack).
    fn quasi_set_fiber_stack(top: usize);
}

/// Zeroed memory with red zones, `ALIGN`-aligned: a simulated buffer, staged array, global
/// or block's shared memory.
pub(crate) struct Allocation {
    base: *mut u8,
    layout: Layout,
    len: usize,
}

// SAFETY: plain memory owned by this value; the runtime's mutex or the launch orders its users.
unsafe impl Send for Allocation {}
// SAFETY: as for `Send`: shared references only read it, and writers hold the runtime's lock.
unsafe impl Sync for Allocation {}

impl Allocation {
    pub(crate) fn zeroed(len: usize) -> Result<Allocation, String> {
        let layout = len
            .checked_add(2 * RED_ZONE)
            .and_then(|total| Layout::from_size_align(total, ALIGN).ok())
            .ok_or_else(|| format!("cannot allocate {len} bytes"))?;
        // SAFETY: the layout is non-zero in size (red zones).
        let base = unsafe { std::alloc::alloc_zeroed(layout) };
        if base.is_null() {
            return Err(format!("the simulator could not allocate {len} bytes"));
        }
        Ok(Allocation { base, layout, len })
    }

    /// The first usable byte.
    pub(crate) fn start(&self) -> usize {
        self.base as usize + RED_ZONE
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn bytes(&self) -> &[u8] {
        // SAFETY: `len` bytes from `start` belong to this allocation.
        unsafe { std::slice::from_raw_parts(self.start() as *const u8, self.len) }
    }

    pub(crate) fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `bytes`, and `&mut self` makes the access exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.start() as *mut u8, self.len) }
    }
}

impl Drop for Allocation {
    fn drop(&mut self) {
        // SAFETY: allocated in `zeroed` with this layout.
        unsafe { std::alloc::dealloc(self.base, self.layout) }
    }
}

/// A kernel compiled for the simulator.
pub(crate) struct SimKernel {
    /// `void (ptr words, ptr frame)`.
    pub entry: usize,
    pub shared_bytes: u64,
    pub barrier: bool,
    /// Barriers and checked accesses, by the number the code passes.
    pub sites: Vec<SimSite>,
    /// The storage of its device globals (the code refers to it by address).
    pub globals: Vec<(String, Allocation)>,
    /// Each device global's symbol and address, for the proofs.
    pub global_symbols: Vec<(String, usize)>,
    /// Each shared-memory array's offset and length.
    pub shared_arrays: Vec<(u64, u64)>,
    /// What the proofs read from the optimised code (with checking on).
    pub facts: Facts,
    /// Whether the code has a warp operation.
    pub warps: bool,
}

/// Memory a thread may use, for checking: `[start, end)` and what it is.
#[derive(Clone, Debug)]
pub(crate) struct Region {
    pub start: usize,
    pub end: usize,
    pub what: String,
}

/// The first failed check or barrier of a launch.
struct Failure {
    message: String,
    site: Option<u32>,
    /// A second place the report is about (the other access of a race), and its label.
    other: Option<(u32, &'static str)>,
}

type Fiber = Coroutine<(), u32, (), DefaultStack>;

/// What a launch keeps while its code runs; compiled code reaches it through the frame.
#[derive(Default)]
struct Run {
    yielder: usize,
    regions: Vec<Region>,
    /// The region found last (accesses come in runs to the same buffer).
    last: usize,
    stack: (usize, usize),
    shared: (usize, usize),
    check_failed: Option<Failure>,
    /// The first race or uninitialised read, kept until its barrier interval ends: a barrier
    /// some thread misses (synccheck) is the cause to report, when there is one.
    race_failed: Option<Failure>,
    /// What the launch's proofs (`proofs`) cover, which racecheck and initcheck keep no shadow
    /// of: spans of shared memory (offsets), and regions by index.
    unshadowed_shared: Vec<(usize, usize)>,
    unshadowed_regions: Vec<bool>,
    /// Each site's guard (the frame points at it while the launch runs).
    guards: Vec<SimGuard>,
    /// racecheck's stamps of shared memory (`races::stamp`), and whether the kernel has warp
    /// operations (then no stamp lets anything through).
    stamps: Vec<u64>,
    warps: bool,
    scratch: Vec<u64>,
    kernel: String,
    fibers: Vec<Option<Fiber>>,
    /// Each fiber's stack, `(limit, base)`.
    fiber_stacks: Vec<(usize, usize)>,
    stacks: Vec<DefaultStack>,
    grid_stack: Option<DefaultStack>,
    /// A launch is running (set until it returns): still set at the next launch, the last one
    /// left through a long jump (a fault or interrupt) and its fibers are abandoned.
    active: bool,
    /// The block's thread whose fiber runs (its index in the block, x fastest).
    current: usize,
    /// Each thread's warp operation while it waits at one, and its result.
    requests: Vec<Option<Request>>,
    results: Vec<u64>,
    /// Each warp's count of completed warp operations (racecheck orders its lanes by it).
    warp_epochs: Vec<u32>,
    /// racecheck and initcheck (`races`): the shadow of the block's shared memory, and of the
    /// global memory of the launch.
    shared_shadow: SharedShadow,
    global_shadow: GlobalShadow,
}

/// One executor of simulated launches. The frame comes first: the frame's address, which the
/// entry of a build gets and passes to every function of it, is the executor's, so the runtime
/// functions (`runtime_sync`, `runtime_check`) find the executor from it. Each executor runs one
/// launch at a time, on one thread; several executors run launches side by side.
#[repr(C)]
pub(crate) struct Simulator {
    frame: UnsafeCell<SimFrame>,
    run: UnsafeCell<Run>,
}

// SAFETY: the frame and run state are used by the executor thread during a launch only, while
// the session thread waits for the cell; between launches nothing touches them.
unsafe impl Send for Simulator {}
// SAFETY: as for `Send`.
unsafe impl Sync for Simulator {}

/// What a finished launch reports.
pub(crate) struct Ran {
    pub duration: Duration,
}

/// Why a launch failed: the message, and the source of the access or barrier it names.
pub(crate) struct SimError {
    pub message: String,
    pub site: Option<Span>,
    /// A second place in the kernel's source (the other access of a race), with its label.
    pub also: Option<(Span, &'static str)>,
}

impl Simulator {
    pub(crate) fn new() -> Box<Simulator> {
        Box::new(Simulator {
            frame: UnsafeCell::new(SimFrame {
                index: [0; 12],
                shared: std::ptr::null_mut(),
                guards: std::ptr::null(),
                stamps: std::ptr::null(),
                shared_len: 0,
                stamp_written: NO_STAMP,
                stamp_read: NO_STAMP,
                stamp_shared: NO_STAMP,
            }),
            run: UnsafeCell::new(Run::default()),
        })
    }

    /// Whether a faulting address lies at the bottom of the stack of the simulated thread that
    /// ran last (corosensei's guard page is the stack's first page, from `limit`) or just below:
    /// a stack overflow. Read after the launch ended.
    pub(crate) fn is_stack_overflow(&self, address: usize) -> bool {
        // SAFETY: no launch runs now (the fault ended it), so nothing else uses the state.
        let (limit, _) = unsafe { (*self.run.get()).stack };
        // A frame may be as large as `build::FRAME_LIMIT`: its first access may land that far
        // below the stack.
        limit != 0 && address < limit + 4096 && address + THREAD_STACK >= limit
    }

    /// Runs `kernel` over the grid. `words` are the parameter values, `regions` the memory
    /// its threads may use besides shared memory and their stacks.
    pub(crate) fn launch(
        &self,
        name: &str,
        kernel: &Arc<SimKernel>,
        dimensions: [i64; 6],
        words: &[u64],
        mut regions: Vec<Region>,
    ) -> Result<Ran, SimError> {
        // SAFETY: only the executor thread runs launches, one at a time (see `Send`).
        let run = unsafe { &mut *self.run.get() };
        if run.active {
            run.abandon();
        }
        for (name, global) in &kernel.globals {
            regions.push(Region {
                start: global.start(),
                end: global.start() + global.len(),
                what: format!("the device copy of `{name}`"),
            });
        }
        regions.sort_by_key(|region| region.start);
        run.regions = regions;
        run.last = 0;
        run.yielder = 0;
        run.check_failed = None;
        run.race_failed = None;
        run.kernel = name.to_string();
        run.shared_shadow.begin_launch(kernel.shared_bytes as usize);
        run.global_shadow.begin_launch(run.regions.len());
        let mut shared = Allocation::zeroed(kernel.shared_bytes as usize).map_err(plain)?;
        run.shared = (shared.start(), shared.start() + kernel.shared_bytes as usize);
        // SAFETY: as above; compiled code reads the frame only while this launch runs it.
        let frame = unsafe { &mut *self.frame.get() };
        let dims: Vec<i32> = dimensions.iter().map(|&dimension| dimension as i32).collect();
        frame.index = [0; 12];
        frame.index[6..9].copy_from_slice(&dims[3..6]);
        frame.index[9..12].copy_from_slice(&dims[0..3]);
        frame.shared = shared.start() as *mut u8;
        let bounds: Vec<(usize, usize)> = run.regions.iter().map(|region| (region.start, region.end)).collect();
        let shape = Shape {
            dimensions,
            words,
            regions: &bounds,
            globals: &kernel.global_symbols,
            shared_start: shared.start(),
            shared_arrays: &kernel.shared_arrays,
            sites: kernel.sites.len(),
        };
        let plan = proofs::plan(&kernel.facts, &shape);
        run.guards = plan.guards;
        run.unshadowed_shared = plan.unshadowed_shared;
        run.unshadowed_regions = plan.unshadowed_regions;
        frame.guards = run.guards.as_ptr();
        run.stamps.clear();
        // A word past the end for each granule an access of 16 bytes may name.
        run.stamps.resize((kernel.shared_bytes as usize).div_ceil(4) + 4, 0);
        frame.stamps = run.stamps.as_ptr();
        frame.shared_len = kernel.shared_bytes;
        run.warps = kernel.warps;
        run.active = true;
        let start = Instant::now();
        let outcome = if kernel.barrier {
            self.run_blocks(kernel, &dims, words, &mut shared)
        } else {
            self.run_grid(kernel, &dims, words)
        };
        let duration = start.elapsed();
        // SAFETY: as above; the run has ended, nothing else refers to the state.
        let run = unsafe { &mut *self.run.get() };
        run.active = false;
        run.regions = Vec::new();
        // Only a launch that a fault ended leaves its thread's stack for `is_stack_overflow`.
        run.stack = (0, 0);
        outcome?;
        if let Some(failure) = run.check_failed.take() {
            return Err(self.error(kernel, failure));
        }
        Ok(Ran { duration })
    }

    fn error(&self, kernel: &SimKernel, failure: Failure) -> SimError {
        let span = |site: u32| kernel.sites.get(site as usize).map(|site| site.span);
        let also = failure.other.and_then(|(site, label)| span(site).map(|span| (span, label)));
        SimError { message: failure.message, site: failure.site.and_then(span), also }
    }

    /// A kernel without barriers: every thread, one after another, on one fiber.
    fn run_grid(&self, kernel: &SimKernel, dims: &[i32], words: &[u64]) -> Result<(), SimError> {
        // SAFETY: see `launch`.
        let run = unsafe { &mut *self.run.get() };
        let stack = match run.grid_stack.take() {
            Some(stack) => stack,
            None => {
                DefaultStack::new(GRID_STACK).map_err(|error| plain(format!("no stack for the simulator: {error}")))?
            }
        };
        run.stack = (stack.limit().get(), stack.base().get());
        let top = stack.base().get();
        let simulator = self as *const Simulator as usize;
        let entry = kernel.entry;
        let words = words.as_ptr() as usize;
        let (grid, block) = ([dims[0], dims[1], dims[2]], [dims[3], dims[4], dims[5]]);
        let mut fiber: Fiber = Coroutine::with_stack(stack, move |_, ()| {
            // SAFETY: the simulator and the words outlive the fiber's run (it ends before
            // `launch` returns, or is abandoned); the entry takes one word per parameter.
            let simulator = unsafe { &*(simulator as *const Simulator) };
            // SAFETY: `entry` is the address of the build's entry, `void (ptr words, ptr frame)`.
            let entry: extern "C" fn(*const u64, *mut SimFrame) = unsafe { std::mem::transmute(entry) };
            let frame = simulator.frame.get();
            let run = simulator.run.get();
            for bz in 0..grid[2] {
                for by in 0..grid[1] {
                    for bx in 0..grid[0] {
                        // SAFETY: the run state and shared memory are ours while the launch runs.
                        unsafe {
                            let (start, end) = (*run).shared;
                            std::ptr::write_bytes(start as *mut u8, SHARED_PATTERN, end - start);
                            (*run).shared_shadow.begin_block();
                        }
                        for tz in 0..block[2] {
                            for ty in 0..block[1] {
                                for tx in 0..block[0] {
                                    // SAFETY: the frame is ours while the launch runs.
                                    unsafe {
                                        (&mut (*frame).index)[0..6].copy_from_slice(&[tx, ty, tz, bx, by, bz]);
                                        set_stamps(&*run, &mut *frame);
                                    }
                                    entry(words as *const u64, frame);
                                    // SAFETY: as above.
                                    if unsafe { (*run).check_failed.is_some() } {
                                        return;
                                    }
                                }
                            }
                        }
                        // SAFETY: as above; the block's threads have all run.
                        unsafe {
                            if let Some(failure) = end_interval(&mut *run, &*frame) {
                                (*run).check_failed = Some(failure);
                                return;
                            }
                        }
                    }
                }
            }
        });
        // SAFETY: the guard's C code keeps the value in a thread-local.
        unsafe { quasi_set_fiber_stack(top) };
        let result = fiber.resume(());
        // SAFETY: as above.
        unsafe { quasi_set_fiber_stack(0) };
        // SAFETY: see `launch`; the fiber has stopped.
        let run = unsafe { &mut *self.run.get() };
        if let CoroutineResult::Yield(site) = result {
            // A barrier the code analysis did not see (cannot happen): never leave it suspended.
            // SAFETY: nothing on the fiber's stack needs dropping (see `Run::abandon`).
            unsafe { fiber.force_reset() };
            run.grid_stack = Some(fiber.into_stack());
            return Err(plain(format!("a barrier at site {site} in a kernel without barriers (a bug in Quasi)")));
        }
        run.grid_stack = Some(fiber.into_stack());
        Ok(())
    }

    /// A kernel with barriers: per block, a fiber per thread, resumed in rounds.
    fn run_blocks(
        &self,
        kernel: &SimKernel,
        dims: &[i32],
        words: &[u64],
        shared: &mut Allocation,
    ) -> Result<(), SimError> {
        let (grid, block) = ([dims[0], dims[1], dims[2]], [dims[3], dims[4], dims[5]]);
        let threads: Vec<[i32; 3]> = (0..block[2])
            .flat_map(|tz| (0..block[1]).flat_map(move |ty| (0..block[0]).map(move |tx| [tx, ty, tz])))
            .collect();
        for bz in 0..grid[2] {
            for by in 0..grid[1] {
                for bx in 0..grid[0] {
                    // Shared memory is uninitialised on a GPU: not zeroed here either.
                    shared.bytes_mut().fill(SHARED_PATTERN);
                    // SAFETY: see `launch`.
                    unsafe {
                        let run = &mut *self.run.get();
                        run.shared_shadow.begin_block();
                        run.warp_epochs.clear();
                        run.warp_epochs.resize(threads.len().div_ceil(warp::WARP), 0);
                        (&mut (*self.frame.get()).index)[3..6].copy_from_slice(&[bx, by, bz]);
                    }
                    self.run_block(kernel, [bx, by, bz], &threads, words)?;
                    // SAFETY: see `launch`.
                    if let Some(failure) = unsafe { (*self.run.get()).check_failed.take() } {
                        return Err(self.error(kernel, failure));
                    }
                }
            }
        }
        Ok(())
    }

    fn run_block(
        &self,
        kernel: &SimKernel,
        block: [i32; 3],
        threads: &[[i32; 3]],
        words: &[u64],
    ) -> Result<(), SimError> {
        // SAFETY: see `launch`.
        let run = unsafe { &mut *self.run.get() };
        let simulator = self as *const Simulator as usize;
        let entry = kernel.entry;
        let words = words.as_ptr() as usize;
        run.fibers.clear();
        run.fiber_stacks.clear();
        run.requests.clear();
        run.requests.resize(threads.len(), None);
        run.results.clear();
        run.results.resize(threads.len(), 0);
        for _ in threads {
            let stack = match run.stacks.pop() {
                Some(stack) => stack,
                None => DefaultStack::new(THREAD_STACK)
                    .map_err(|error| plain(format!("no stack for a simulated thread: {error}")))?,
            };
            run.fiber_stacks.push((stack.limit().get(), stack.base().get()));
            let fiber: Fiber = Coroutine::with_stack(stack, move |yielder, ()| {
                // SAFETY: as in `run_grid`.
                let simulator = unsafe { &*(simulator as *const Simulator) };
                // SAFETY: see `launch`; `runtime_sync` reads the yielder of the running fiber.
                unsafe { (*simulator.run.get()).yielder = yielder as *const Yielder<(), u32> as usize };
                // SAFETY: `entry` is the address of the build's entry, `void (ptr words, ptr frame)`.
                let entry: extern "C" fn(*const u64, *mut SimFrame) = unsafe { std::mem::transmute(entry) };
                entry(words as *const u64, simulator.frame.get());
            });
            run.fibers.push(Some(fiber));
        }
        let mut states = vec![Waiting::Runnable; threads.len()];
        let place = |thread: usize| format!("block {}, thread {}", triple(block), triple(threads[thread]));
        loop {
            // Every runnable thread runs to its next barrier or warp operation, or to its end.
            for (index, thread) in threads.iter().enumerate() {
                if states[index] != Waiting::Runnable {
                    continue;
                }
                // SAFETY: see `launch`; no fiber runs now.
                let run = unsafe { &mut *self.run.get() };
                let Some(fiber) = run.fibers[index].as_mut() else { continue };
                // SAFETY: as above, for the frame.
                unsafe {
                    let frame = &mut *self.frame.get();
                    frame.index[0..3].copy_from_slice(thread);
                    set_stamps(&*self.run.get(), frame);
                }
                run.stack = run.fiber_stacks[index];
                run.current = index;
                let top = run.stack.1;
                let fiber: *mut Fiber = fiber;
                // SAFETY: the guard keeps the value in a thread-local; the fiber lives in
                // `run.fibers`, which nothing resizes or drops while it runs.
                let result = unsafe {
                    quasi_set_fiber_stack(top);
                    let result = (*fiber).resume(());
                    quasi_set_fiber_stack(0);
                    result
                };
                // SAFETY: see `launch`; the fiber has stopped.
                let run = unsafe { &mut *self.run.get() };
                states[index] = match result {
                    CoroutineResult::Yield(site) if site & WARP_YIELD != 0 => Waiting::Warp,
                    CoroutineResult::Yield(site) => Waiting::Barrier(site),
                    CoroutineResult::Return(()) => {
                        if let Some(done) = run.fibers[index].take() {
                            run.stacks.push(done.into_stack());
                        }
                        Waiting::Done
                    }
                };
                if run.check_failed.is_some() {
                    run.abandon();
                    return Ok(());
                }
            }
            // SAFETY: see `launch`; no fiber runs now.
            let run = unsafe { &mut *self.run.get() };
            // Warp operations whose lanes have all arrived complete; their lanes run on.
            match warp::resolve(&mut states, &run.requests, &mut run.results, &mut run.warp_epochs, &place, &run.kernel)
            {
                Ok(true) => continue,
                Ok(false) => {}
                Err(stuck) => {
                    run.abandon();
                    return Err(SimError {
                        message: stuck.message,
                        site: kernel.sites.get(stuck.site as usize).map(|site| site.span),
                        also: None,
                    });
                }
            }
            if states.iter().all(|state| *state == Waiting::Done) {
                // SAFETY: as above, for the frame.
                if let Some(failure) = end_interval(run, unsafe { &*self.frame.get() }) {
                    run.check_failed = Some(failure);
                }
                return Ok(());
            }
            let line = |site: u32| site_phrase(kernel, site);
            let barrier = states.iter().enumerate().find_map(|(index, state)| match state {
                Waiting::Barrier(site) => Some((index, *site)),
                _ => None,
            });
            let Some((first, site)) = barrier else {
                // Only warp operations wait, and none can complete (cannot happen: `resolve`
                // reports why one cannot).
                run.abandon();
                return Err(plain(format!(
                    "kernel `{}`: the threads of {} are stuck (a bug in Quasi)",
                    run.kernel,
                    place(0)
                )));
            };
            let error = |message: String, site: u32| SimError {
                message,
                site: kernel.sites.get(site as usize).map(|site| site.span),
                also: None,
            };
            if let Some(done) = states.iter().position(|state| *state == Waiting::Done) {
                run.abandon();
                return Err(error(
                    format!(
                        "kernel `{}`: {} waits at {}, which {} never reaches (it finished): every thread of a block must reach each `syncthreads`",
                        run.kernel,
                        place(first),
                        line(site),
                        place(done)
                    ),
                    site,
                ));
            }
            if let Some(warp) = states.iter().position(|state| *state == Waiting::Warp) {
                let warp_site = run.requests[warp].map_or(site, |request| request.site);
                let name = run.requests[warp].map_or("a warp operation", |request| request.op.name());
                run.abandon();
                return Err(error(
                    format!(
                        "kernel `{}`: {} waits at `{name}` while {} waits at {}: a lane its MASK names never arrives",
                        run.kernel,
                        place(warp),
                        place(first),
                        line(site)
                    ),
                    warp_site,
                ));
            }
            if let Some((other, other_site)) = states.iter().enumerate().find_map(|(index, state)| match state {
                Waiting::Barrier(other) if *other != site => Some((index, *other)),
                _ => None,
            }) {
                run.abandon();
                return Err(error(
                    format!(
                        "kernel `{}`: the threads of a block wait at different barriers: {} at {}, {} at another (marked below)",
                        run.kernel,
                        place(first),
                        line(site),
                        place(other),
                    ),
                    other_site,
                ));
            }
            // Every thread waits at the same barrier: all run on, in a new interval.
            // SAFETY: as above, for the frame.
            if let Some(failure) = end_interval(run, unsafe { &*self.frame.get() }) {
                run.check_failed = Some(failure);
                run.abandon();
                return Ok(());
            }
            states.fill(Waiting::Runnable);
        }
    }
}

impl Run {
    /// Forgets the fibers of a launch that did not finish (a failed check, a barrier error,
    /// or a long jump out of it), keeping their stacks for the next launch.
    fn abandon(&mut self) {
        for fiber in self.fibers.drain(..).flatten() {
            let mut fiber = fiber;
            // SAFETY: compiled code and the fiber's closure keep nothing that needs dropping on
            // the fiber's stack.
            unsafe { fiber.force_reset() };
            self.stacks.push(fiber.into_stack());
        }
        self.active = false;
    }
}

impl Drop for Run {
    /// Fibers a long jump left suspended are reset, never unwound: unwinding would resume them
    /// in compiled code (maybe freed with the session by now) that has no unwind tables.
    fn drop(&mut self) {
        self.abandon();
    }
}

fn plain(message: String) -> SimError {
    SimError { message, site: None, also: None }
}

fn triple(index: [i32; 3]) -> String {
    format!("({}, {}, {})", index[0], index[1], index[2])
}

fn site_phrase(kernel: &SimKernel, site: u32) -> String {
    match kernel.sites.get(site as usize) {
        Some(site) => format!("the `syncthreads` in `{}`", site.function),
        None => "a `syncthreads`".to_string(),
    }
}

/// What a fiber yields at a warp operation: the flag, with the site in the low bits; a barrier
/// yields its site alone.
const WARP_YIELD: u32 = 1 << 31;

/// `SIM_WARP`: records the running thread's warp operation and suspends its fiber; the block's
/// scheduler completes the operation when the lanes its MASK names have all arrived
/// (`warp::resolve`) and resumes the thread with its result.
pub(crate) extern "C" fn runtime_warp(
    frame: *mut SimFrame,
    site: i32,
    op: i32,
    mask: i32,
    value: i64,
    operand: i32,
) -> i64 {
    // SAFETY: as in `runtime_sync`; the run state is the executor thread's during the launch,
    // and no reference to it lives across the suspension (other fibers use it meanwhile).
    unsafe {
        let simulator = &*(frame as *const Simulator);
        let run = simulator.run.get();
        let (yielder, thread) = {
            let state = &mut *run;
            (state.yielder as *const Yielder<(), u32>, state.current)
        };
        let Some(op) = WarpOp::from_code(op as u32).filter(|_| !yielder.is_null()) else { return value };
        {
            let state = &mut *run;
            if let Some(slot) = state.requests.get_mut(thread) {
                *slot = Some(Request { site: site as u32, op, mask: mask as u32, value: value as u64, operand });
            }
        }
        (*yielder).suspend(WARP_YIELD | (site as u32 & !WARP_YIELD));
        let state = &mut *run;
        state.yielder = yielder as usize;
        if let Some(slot) = state.requests.get_mut(thread) {
            *slot = None;
        }
        state.results.get(thread).copied().unwrap_or(0) as i64
    }
}

/// `SIM_SYNC`: suspends the running thread's fiber until the block's next round.
pub(crate) extern "C" fn runtime_sync(frame: *mut SimFrame, site: i32) {
    // SAFETY: compiled code passes the frame of the simulator running it (the simulator's
    // address); the yielder is the running fiber's, set when it started or last resumed.
    unsafe {
        let simulator = &*(frame as *const Simulator);
        let run = simulator.run.get();
        let yielder = (*run).yielder as *const Yielder<(), u32>;
        if yielder.is_null() {
            return;
        }
        (*yielder).suspend(site as u32);
        (*run).yielder = yielder as usize;
    }
}

/// `SIM_CHECK`: the address a load or store uses: its own when `bytes` from it lie in memory
/// the thread may use, else scratch memory, the first such access being reported.
pub(crate) extern "C" fn runtime_check(frame: *mut SimFrame, address: usize, bytes: i64, tag: i64) -> usize {
    // SAFETY: as in `runtime_sync`; the run state is the executor thread's during the launch.
    let run = unsafe { &mut *(*(frame as *const Simulator)).run.get() };
    let end = address.wrapping_add(bytes.max(0) as usize);
    let inside = |(start, stop): (usize, usize)| start <= address && end <= stop && address <= end;
    if inside(run.stack) {
        return address;
    }
    // SAFETY: as above.
    let frame = unsafe { &*frame };
    let (site, access) = sim_check_site(tag);
    let length = bytes.max(0) as usize;
    if inside(run.shared) {
        let offset = address - run.shared.0;
        // An access the launch's proofs cover has no shadow to keep (a stray access of another
        // array's site that lands there is checked for bounds only).
        if run.unshadowed_shared.iter().any(|&(start, end)| start <= offset && offset < end) {
            return address;
        }
        let thread = linear(&frame.index[0..3], &frame.index[6..9]);
        let epoch = run.warp_epochs.get(thread as usize / warp::WARP).copied().unwrap_or(0);
        if let Some(report) = run.shared_shadow.access(offset, length, thread, site, epoch, access) {
            if run.race_failed.is_none() {
                run.race_failed = Some(race_failure(run, frame, &report, None));
            }
        } else if !run.warps {
            // What this access leaves lets the next ones of its granules through inline.
            for index in offset / 4..(offset + length).div_ceil(4) {
                let stamp = run.shared_shadow.stamp(index, thread);
                if let Some(slot) = run.stamps.get_mut(index) {
                    *slot = stamp;
                }
            }
        }
        // A race's access goes through: the memory is the kernel's, and the report waits for
        // the interval's end.
        return address;
    }
    let known = run.regions.get(run.last).is_some_and(|region| inside((region.start, region.end)));
    let index = run.regions.partition_point(|region| region.start <= address);
    if known || (index > 0 && inside((run.regions[index - 1].start, run.regions[index - 1].end))) {
        if !known {
            run.last = index - 1;
        }
        if run.unshadowed_regions.get(run.last).copied().unwrap_or(false) {
            return address;
        }
        let block = linear(&frame.index[3..6], &frame.index[9..12]);
        let start = run.regions[run.last].start;
        if let Some(report) = run.global_shadow.access(run.last, address - start, length, block, site, access) {
            if run.race_failed.is_none() {
                let region = run.regions.get(run.last).map(|region| region.what.clone());
                run.race_failed = Some(race_failure(run, frame, &report, region));
            }
        }
        return address;
    }
    if run.check_failed.is_none() {
        let thread = [frame.index[0], frame.index[1], frame.index[2]];
        let block = [frame.index[3], frame.index[4], frame.index[5]];
        let message = format!(
            "out-of-bounds {} of {bytes} bytes in kernel `{}`, block {}, thread {}: {}",
            match access {
                Access::Read => "read",
                Access::Write => "write",
                Access::Atomic => "atomic",
            },
            run.kernel,
            triple(block),
            triple(thread),
            describe(run, address)
        );
        run.check_failed = Some(Failure { message, site: Some(site), other: None });
    }
    scratch(run, bytes)
}

/// `SIM_FAULT`: a check in device code failed (a division by zero): the first such failure
/// of the launch is reported when it ends, with the block and thread. The thread goes on (its
/// code uses a harmless value instead), as after an out-of-bounds access.
pub(crate) extern "C" fn runtime_fault(frame: *mut SimFrame, code: i64, site: i64) {
    use crate::abi::FaultCode;
    // SAFETY: as in `runtime_check`.
    let run = unsafe { &mut *(*(frame as *const Simulator)).run.get() };
    if run.check_failed.is_some() {
        return;
    }
    // SAFETY: as above.
    let frame = unsafe { &*frame };
    let what = match FaultCode::from_code(code as u64) {
        Some(FaultCode::DivideByZero) => "integer division by zero",
        Some(FaultCode::DivideOverflow) => "integer overflow in division",
        _ => "a failed check",
    };
    let thread = [frame.index[0], frame.index[1], frame.index[2]];
    let block = [frame.index[3], frame.index[4], frame.index[5]];
    let message = format!("{what} in kernel `{}`, block {}, thread {}", run.kernel, triple(block), triple(thread));
    run.check_failed = Some(Failure { message, site: Some(site as u32), other: None });
}

/// Scratch memory for an access that must not touch its address (a failed check).
fn scratch(run: &mut Run, bytes: i64) -> usize {
    let words = (bytes.max(8) as usize).div_ceil(8);
    if run.scratch.len() < words {
        run.scratch.resize(words, 0);
    }
    run.scratch.as_mut_ptr() as usize
}

/// The running thread's stamps in the frame (`races::stamp`), for its interval.
fn set_stamps(run: &Run, frame: &mut SimFrame) {
    let serial = run.shared_shadow.serial();
    let thread = linear(&frame.index[0..3], &frame.index[6..9]);
    // With warp operations no stamp lets anything through: a lane's access after a warp
    // operation must be recorded with its warp's new epoch.
    let (written, read, shared) = if run.warps {
        (NO_STAMP, NO_STAMP, NO_STAMP)
    } else {
        (stamp(serial, thread, 1), stamp(serial, thread, 2), stamp(serial, 0, 3))
    };
    frame.stamp_written = written;
    frame.stamp_read = read;
    frame.stamp_shared = shared;
}

/// Shared memory's bytes at the start of every block: uninitialised on a GPU, so not zero here
/// (a float of them is NaN, an int -1), and a result that depends on them differs.
const SHARED_PATTERN: u8 = 0xff;

/// An index (x, y, z) in dimensions (x, y, z), as one number, x fastest.
fn linear(index: &[i32], dimensions: &[i32]) -> u32 {
    (index[0] + dimensions[0] * (index[1] + dimensions[1] * index[2])) as u32
}

/// A linear index back in (x, y, z).
fn unlinear(value: u32, dimensions: &[i32]) -> [i32; 3] {
    let value = value as i32;
    let (x, y) = (dimensions[0].max(1), dimensions[1].max(1));
    [value % x, (value / x) % y, value / (x * y)]
}

/// The race or uninitialised read of the interval that ends, as a failure, if any.
fn end_interval(run: &mut Run, frame: &SimFrame) -> Option<Failure> {
    let uninitialised = run.shared_shadow.end_interval();
    if let Some(race) = run.race_failed.take() {
        return Some(race);
    }
    let report = uninitialised?;
    Some(race_failure(run, frame, &report, None))
}

/// A racecheck or initcheck report as a failure: `region` says what the global memory is,
/// `None` for the block's shared memory.
fn race_failure(run: &Run, frame: &SimFrame, report: &Report, region: Option<String>) -> Failure {
    let block = [frame.index[3], frame.index[4], frame.index[5]];
    let (who, site, did) = report.second;
    let shared = region.is_none();
    let name = |who: u32| {
        if shared {
            format!("thread {}", triple(unlinear(who, &frame.index[6..9])))
        } else {
            format!("block {}", triple(unlinear(who, &frame.index[9..12])))
        }
    };
    let memory = match &region {
        None => format!("byte {} of the block's shared memory", report.offset),
        Some(what) => format!("byte {} of {what}", report.offset),
    };
    let Some((first, first_site, first_did)) = report.first else {
        let message = format!(
            "uninitialised read in kernel `{}`, block {}, {}: {memory}, which no thread of the block wrote before this read's barrier interval or in it (shared memory is uninitialised on a GPU)",
            run.kernel,
            triple(block),
            name(who)
        );
        return Failure { message, site: Some(site), other: None };
    };
    let (place, why) = if shared {
        (format!(" block {},", triple(block)), "between the same two barriers, not both atomically")
    } else {
        (String::new(), "in one launch, whose blocks run concurrently on a GPU, not both atomically")
    };
    let message = format!(
        "race ({}) in kernel `{}`,{place} on {memory}: {} {first_did}, and {} {did} it, {why}",
        report.kind,
        run.kernel,
        name(first),
        name(who)
    );
    Failure { message, site: Some(site), other: Some((first_site, "the other access")) }
}

/// Where a bad address lies: past the end of, or before, the nearest memory it may use.
fn describe(run: &Run, address: usize) -> String {
    let (shared_start, shared_end) = run.shared;
    let shared_bytes = shared_end - shared_start;
    if address >= shared_start && address < shared_end + RED_ZONE {
        return format!(
            "at byte {} of the block's shared memory, which has {shared_bytes} bytes",
            address - shared_start
        );
    }
    if address < shared_start && address + RED_ZONE >= shared_start {
        return format!("{} bytes before the block's shared memory ({shared_bytes} bytes)", shared_start - address);
    }
    let index = run.regions.partition_point(|region| region.start <= address);
    if index > 0 {
        let region = &run.regions[index - 1];
        if address < region.end + RED_ZONE {
            let length = region.end - region.start;
            return format!("at byte {} of {}, which has {length} bytes", address - region.start, region.what);
        }
    }
    if let Some(region) = run.regions.get(index) {
        if region.start - address <= RED_ZONE {
            let length = region.end - region.start;
            return format!("{} bytes before {} ({length} bytes)", region.start - address, region.what);
        }
    }
    if address < 4096 {
        return format!("address {address:#x}, a null pointer");
    }
    format!("address {address:#x} is in no buffer, shared memory or memory of the thread's own")
}
