//! The runtime ABI: what compiled code and the Rust runtime agree on, defined once and read by
//! both sides — `codegen` writes it into the code, `run`, `gpu` and `jit` read it at run time
//! (as wasmtime's `VMOffsets` is read by its compiler and its runtime alike).
//!
//! - the link names of the runtime's symbols (`quasi#…`: a name C-Lisp cannot write, so a
//!   program never defines one by accident);
//! - the codes a failed check passes to `RT_FAULT` (`FaultCode`), and the fault guard's own
//!   codes (`GuardCode`, which `csrc/guard.c` spells the same);
//! - the launch descriptor host code hands to `RT_GPU_LAUNCH` (`LaunchArg`, `#[repr(C)]`), and
//!   the copy directions of `RT_GPU_COPY`;
//! - the simulator's frame (`SimFrame`, `#[repr(C)]`) and the tag of a checked access.
//!
//! It imports nothing of the crate: every stage may read it.

/// The prefix of every runtime symbol.
const PREFIX: &str = "quasi#";

/// `void (i64 code, i64 site)`: a failed check; the code is a `FaultCode`.
pub(crate) const RT_FAULT: &str = "quasi#fault";
/// `ptr (i64 bytes)`: session memory for `alloc` in top-level code (kept for the session).
pub(crate) const RT_SESSION_ALLOC: &str = "quasi#session_alloc";
/// `void (ptr value, i64 bytes)`: a top-level item of batched code finished with its value.
pub(crate) const RT_ITEM_DONE: &str = "quasi#item_done";
/// `i64 ()`: monotonic nanoseconds (the bench loop reads it).
pub(crate) const RT_CLOCK: &str = "quasi#now";

/// The GPU runtime's own address: host code passes it to the `RT_GPU_*` functions. Every one
/// returns a status (0: done) or a value; a failure faults with `FaultCode::Gpu`, and the
/// runtime keeps the message.
pub(crate) const RT_GPU: &str = "quasi#gpu";
/// `i64 (ptr gpu, i64 element_size, i64 count)`: a buffer's handle (0: failed).
pub(crate) const RT_GPU_ALLOC: &str = "quasi#gpu_alloc";
/// `i32 (ptr gpu, i64 handle)`.
pub(crate) const RT_GPU_FREE: &str = "quasi#gpu_free";
/// `i64 (ptr gpu, i64 handle)`: the buffer's length in elements (-1: failed).
pub(crate) const RT_GPU_LEN: &str = "quasi#gpu_len";
/// `i32 (ptr gpu, i64 direction, i64 destination, i64 source, i64 count, i64 element_size)`,
/// the direction a `CopyDirection`.
pub(crate) const RT_GPU_COPY: &str = "quasi#gpu_copy";
/// `i32 (ptr gpu, ptr name, i64 name_length, ptr dimensions, ptr args, i64 arg_count)`: six
/// dimensions (`LAUNCH_DIMENSIONS`) and `arg_count` `LaunchArg`s.
pub(crate) const RT_GPU_LAUNCH: &str = "quasi#gpu_launch";

/// `i64 (ptr gpu)`: a new encoder's handle (0: failed).
pub(crate) const RT_GPU_ENCODE_BEGIN: &str = "quasi#gpu_encode_begin";
/// `i32 (ptr gpu, i64 encoder, i64 direction, i64 destination, i64 source, i64 count, i64
/// element_size)`: a copy recorded, as `RT_GPU_COPY` makes one.
pub(crate) const RT_GPU_ENCODE_COPY: &str = "quasi#gpu_encode_copy";
/// `i32 (ptr gpu, i64 encoder, ptr name, i64 name_length, ptr dimensions, ptr args, i64
/// arg_count)`: a launch recorded, described as for `RT_GPU_LAUNCH`.
pub(crate) const RT_GPU_ENCODE_CALL: &str = "quasi#gpu_encode_call";
/// `i64 (ptr gpu, i64 encoder)`: the encoder's commands start; the fence's handle (0: failed).
pub(crate) const RT_GPU_SUBMIT: &str = "quasi#gpu_submit";
/// `i32 (ptr gpu, i64 fence)`: waits for the fence's submission.
pub(crate) const RT_GPU_AWAIT: &str = "quasi#gpu_await";
/// `i32 (ptr gpu, i64 fence)`: 1 if the submission finished, 0 if it runs (-1: failed).
pub(crate) const RT_GPU_FENCE_DONE: &str = "quasi#gpu_fence_done";
/// `i64 (ptr gpu, i64 element_size, i64 count)`: page-locked host memory (0: failed).
pub(crate) const RT_GPU_HOST_ALLOC: &str = "quasi#gpu_host_alloc";

/// `void (ptr frame, i32 site)`: a barrier.
pub(crate) const SIM_SYNC: &str = "quasi#sim_sync";
/// `ptr (ptr frame, ptr address, i64 bytes, i64 tag)`: the address a checked access uses
/// (`sim_check_tag`).
pub(crate) const SIM_CHECK: &str = "quasi#sim_check";
/// `i64 (ptr frame, i32 site, i32 op, i32 mask, i64 value, i32 operand)`: a collective warp
/// operation (`tree::WarpOp::code`): the lanes of MASK meet, and each gets its result as 64 bits
/// (a shuffled value, a ballot's bits, a vote as 0 or 1).
pub(crate) const SIM_WARP: &str = "quasi#sim_warp";
/// `void (ptr frame, i64 code, i64 site)`: a failed check in device code (an `abi::FaultCode`,
/// at simulator site SITE): the launch fails with it once it has ended.
pub(crate) const SIM_FAULT: &str = "quasi#sim_fault";

/// The link name of a function the runtime provides under a C name (`print`, `exit`…).
pub(crate) fn runtime_symbol(name: &str) -> String {
    format!("{PREFIX}{name}")
}

/// The runtime's link name for a declaration, if the runtime provides it: llama.lisp's test
/// runtime (`print`…), and the functions that would end the process (`exit`, `abort`…), which
/// end the running cell instead.
pub(crate) fn runtime_function(name: &str) -> Option<String> {
    let provided = matches!(name, "print" | "fprint" | "dprint" | "ptr_print" | "int64_print" | "abort");
    (provided || EXITS.contains(&name)).then(|| runtime_symbol(name))
}

/// What a failed check in compiled code reports (`RT_FAULT`'s first argument).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u64)]
pub(crate) enum FaultCode {
    /// An integer division or remainder by zero.
    DivideByZero = 1,
    /// `INT_MIN / -1` and its kin.
    DivideOverflow = 2,
    /// A call of a declaration nothing defines (its slot holds this trap).
    Unresolved = 3,
    /// A call of a function a redefinition invalidated.
    Invalidated = 4,
    /// A host GPU form failed; the GPU runtime keeps the message.
    Gpu = 5,
    /// Host code compiled earlier called a function that is device code now.
    DeviceOnly = 6,
    /// A call through an `fn-ptr` made for the callee's old type.
    StalePointer = 7,
}

impl FaultCode {
    /// The code as compiled code passes it.
    pub(crate) const fn code(self) -> u64 {
        self as u64
    }

    /// The fault a code stands for, if it is one.
    pub(crate) fn from_code(code: u64) -> Option<FaultCode> {
        [
            FaultCode::DivideByZero,
            FaultCode::DivideOverflow,
            FaultCode::Unresolved,
            FaultCode::Invalidated,
            FaultCode::Gpu,
            FaultCode::DeviceOnly,
            FaultCode::StalePointer,
        ]
        .into_iter()
        .find(|fault| fault.code() == code)
    }
}

/// How a guarded call ended when it did not return (`csrc/guard.c`'s `CODE_*`, the same numbers).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(i64)]
pub(crate) enum GuardCode {
    /// A signal (SIGSEGV…) in compiled code.
    Signal = 100,
    /// An interrupt stopped compiled code.
    Interrupt = 101,
    /// The program called one of `EXITS`.
    Exit = 102,
    /// The program called `abort`.
    Abort = 103,
}

impl GuardCode {
    /// The guard's code, if `code` is one.
    pub(crate) fn from_code(code: i64) -> Option<GuardCode> {
        [GuardCode::Signal, GuardCode::Interrupt, GuardCode::Exit, GuardCode::Abort]
            .into_iter()
            .find(|guard| *guard as i64 == code)
    }
}

/// The functions that end a C program, which user code reaches through `quasi#NAME`, in the
/// order of the guard's `which`.
pub(crate) const EXITS: [&str; 4] = ["exit", "_exit", "_Exit", "quick_exit"];

/// The six launch dimensions host code passes: grid x, y, z, then block x, y, z.
pub(crate) const LAUNCH_DIMENSIONS: usize = 6;

/// One argument of a launch as host code describes it to `RT_GPU_LAUNCH`: five 64-bit words,
/// which codegen stores one by one (`LaunchArg::KIND`…) and the runtime reads as this struct.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct LaunchArg {
    /// An `ArgKind`.
    pub kind: i64,
    /// The scalar, the device pointer, the buffer's handle or the host address.
    pub value: i64,
    /// The element count of a Lapis annotation (`in N`…); -1 without one.
    pub count: i64,
    /// The bytes of one element the argument points to.
    pub element_size: i64,
    /// A `Direction`.
    pub direction: i64,
}

/// Words per `LaunchArg`.
pub(crate) const LAUNCH_ARG_WORDS: usize = std::mem::size_of::<LaunchArg>() / 8;

impl LaunchArg {
    /// The word of each field, for code that stores them one by one.
    pub(crate) const KIND: usize = std::mem::offset_of!(LaunchArg, kind) / 8;
    pub(crate) const VALUE: usize = std::mem::offset_of!(LaunchArg, value) / 8;
    pub(crate) const COUNT: usize = std::mem::offset_of!(LaunchArg, count) / 8;
    pub(crate) const ELEMENT_SIZE: usize = std::mem::offset_of!(LaunchArg, element_size) / 8;
    pub(crate) const DIRECTION: usize = std::mem::offset_of!(LaunchArg, direction) / 8;

    /// The element count of its annotation, if it has one.
    pub(crate) fn annotated_count(&self) -> Option<u64> {
        u64::try_from(self.count).ok()
    }

    /// The size of one element, at least 1.
    pub(crate) fn element_bytes(&self) -> u64 {
        self.element_size.max(1) as u64
    }
}

/// What a launch argument is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(i64)]
pub(crate) enum ArgKind {
    /// A number, passed as it is.
    Scalar = 0,
    /// A pointer into device memory, passed as it is.
    DevicePointer = 1,
    /// A `gpu-buf` handle: the buffer's device pointer is passed.
    Buffer = 2,
    /// Host memory with a Lapis annotation: staged through device memory for the launch.
    Host = 3,
}

impl ArgKind {
    /// The kind a descriptor's word stands for, if it is one.
    pub(crate) fn from_code(code: i64) -> Option<ArgKind> {
        [ArgKind::Scalar, ArgKind::DevicePointer, ArgKind::Buffer, ArgKind::Host]
            .into_iter()
            .find(|kind| *kind as i64 == code)
    }
}

/// Which way a Lapis-annotated argument's data moves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(i64)]
pub(crate) enum Direction {
    /// No annotation.
    None = 0,
    /// `in`: copied to the device before the launch.
    In = 1,
    /// `out`: copied back after it.
    Out = 2,
    /// `inout`: both.
    InOut = 3,
}

impl Direction {
    /// The direction a descriptor's word stands for (an unknown word: none).
    pub(crate) fn from_code(code: i64) -> Direction {
        match code {
            1 => Direction::In,
            2 => Direction::Out,
            3 => Direction::InOut,
            _ => Direction::None,
        }
    }

    /// Whether the data goes to the device before the launch.
    pub(crate) fn reads(self) -> bool {
        matches!(self, Direction::In | Direction::InOut)
    }

    /// Whether the data comes back after the launch.
    pub(crate) fn writes(self) -> bool {
        matches!(self, Direction::Out | Direction::InOut)
    }
}

/// The direction of a `gpu-copy` (`RT_GPU_COPY`'s first argument).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(i64)]
pub(crate) enum CopyDirection {
    /// Host memory into a buffer.
    HostToDevice = 0,
    /// A buffer into host memory.
    DeviceToHost = 1,
    /// A buffer into a buffer.
    DeviceToDevice = 2,
}

impl CopyDirection {
    /// The direction a code stands for, if it is one.
    pub(crate) fn from_code(code: i64) -> Option<CopyDirection> {
        [CopyDirection::HostToDevice, CopyDirection::DeviceToHost, CopyDirection::DeviceToDevice]
            .into_iter()
            .find(|direction| *direction as i64 == code)
    }
}

/// The frame compiled simulator code reads: the running thread's indices and its block's
/// shared memory. Every function of a simulator build takes its address as its last parameter
/// (an executor passes its own); the executor writes it before it runs or resumes a thread.
#[repr(C)]
pub(crate) struct SimFrame {
    /// `tid.x y z`, `ctaid.x y z` (block), `ntid.x y z` (block size), `nctaid.x y z` (grid).
    pub index: [i32; 12],
    /// The running block's shared memory.
    pub shared: *mut u8,
    /// With checking on, each site's guard (`SimGuard`), by site number.
    pub guards: *const SimGuard,
    /// racecheck's stamps of shared memory, one per 4-byte granule (`gpu::sim::races`): an
    /// aligned read or write of whole granules whose stamps let it through skips `SIM_CHECK`.
    pub stamps: *const u64,
    /// The block's shared memory's length in bytes.
    pub shared_len: u64,
    /// The stamps that let the running thread through in this interval: a granule it alone
    /// wrote (read or write), it alone read (read), several threads read and none wrote (read).
    pub stamp_written: u64,
    pub stamp_read: u64,
    pub stamp_shared: u64,
}

/// What a checked access tests inline before it calls `SIM_CHECK` (docs/language.md §7.7): an
/// address of `[low, high)` whose access the launch's proofs made safe without a shadow takes
/// its pointer as it is; any other goes through the call. `NEVER` sends every access of a site
/// through the call.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SimGuard {
    pub low: usize,
    pub high: usize,
}

impl SimGuard {
    pub(crate) const NEVER: SimGuard = SimGuard { low: usize::MAX, high: 0 };
}

impl SimFrame {
    /// The slot of a special register (`tid`, `ctaid`, `ntid`, `nctaid`) and axis (0 to 2) in
    /// `index`.
    pub(crate) fn slot(register: &str, axis: u8) -> u64 {
        let base = match register {
            "tid" => 0,
            "ctaid" => 3,
            "ntid" => 6,
            _ => 9,
        };
        base + u64::from(axis.min(2))
    }
}

/// How a checked access touches memory (`SIM_CHECK`'s tag).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Access {
    Read,
    Write,
    /// An atomic read-modify-write (§7.9): it never races with another atomic.
    Atomic,
}

/// The tag a checked access passes to `SIM_CHECK`: its site's number and its kind.
pub(crate) const fn sim_check_tag(site: u32, access: Access) -> u64 {
    ((site as u64) << 2) | access as u64
}

/// A tag's site and kind.
pub(crate) const fn sim_check_site(tag: i64) -> (u32, Access) {
    let access = match tag & 3 {
        0 => Access::Read,
        1 => Access::Write,
        _ => Access::Atomic,
    };
    ((tag >> 2) as u32, access)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_launch_argument_is_five_words_in_field_order() {
        assert_eq!(LAUNCH_ARG_WORDS, 5);
        assert_eq!(
            [LaunchArg::KIND, LaunchArg::VALUE, LaunchArg::COUNT, LaunchArg::ELEMENT_SIZE, LaunchArg::DIRECTION],
            [0, 1, 2, 3, 4]
        );
    }

    #[test]
    fn codes_round_trip() {
        for code in 1..=7 {
            assert_eq!(FaultCode::from_code(code).map(FaultCode::code), Some(code));
        }
        assert_eq!(FaultCode::from_code(8), None);
        assert_eq!(GuardCode::from_code(102), Some(GuardCode::Exit));
        for access in [Access::Read, Access::Write, Access::Atomic] {
            assert_eq!(sim_check_site(sim_check_tag(77, access) as i64), (77, access));
        }
        assert_eq!(SimFrame::slot("nctaid", 2), 11);
    }
}
