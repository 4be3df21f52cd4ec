//! Code memory: where ORC puts the sections of linked cells. One reservation per session, a
//! code half and a data half, handed out by the byte rather than by the page, and given back
//! when a cell's resource tracker is removed.
//!
//! ORC's default memory manager maps fresh pages for every object (code, read-only data, GOT),
//! so a one-line definition cost three pages (12 KB) and a long session grew without bound.
//! Here a small cell costs about its size, and the memory of a removed cell is reused.
//!
//! Code pages are read-write only while the session links a cell into them, and read-execute
//! from `finalize` on. Pages are shared between cells, so a page of live code is briefly
//! writable while another cell links: no compiled code of the session's runs then (the session
//! links and runs on one thread, one step after the other). Code that runs on other threads
//! while the session links — the simulator's builds, which device workers run — is linked
//! `isolated`: on whole pages of its own, which no other link touches.
//!
//! Read-only data of a removed cell (its string literals in `.rodata*`) is kept: compiled code
//! may have stored a pointer to a literal in a global or in memory the program holds.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::{c_char, c_void, CStr};
use std::sync::Mutex;

extern "C" {
    /// Tells the fault guard where compiled code lies (`end` 0: no longer), so an interrupt can
    /// tell compiled code from libc's and find compiled code's return addresses (csrc/guard.c).
    fn quasi_code_range(start: usize, end: usize);
}

/// Virtual size of the reservation. Both halves lie within ±2 GB of each other, as the small
/// code model's PC-relative references between a cell's code and data need.
const RESERVATION: usize = 1 << 30;
/// Pages are made accessible this many bytes at a time as the session's code grows.
const COMMIT_STEP: usize = 1 << 20;

/// The session's code memory, shared by every object ORC links (the callbacks' context).
pub(crate) struct CodeMemory {
    arena: Mutex<Arena>,
}

struct Arena {
    base: *mut u8,
    page: usize,
    code: Heap,
    data: Heap,
    /// Code blocks get whole pages of their own (`CodeMemory::set_isolated`).
    isolated: bool,
}

// SAFETY: `base` is the address of a mapping the arena owns; it is only used under the mutex.
unsafe impl Send for Arena {}

/// One half of the reservation: a bump pointer with a free list behind it.
struct Heap {
    /// The end of the half (an absolute address).
    end: usize,
    /// Everything from `top` to `end` is unused.
    top: usize,
    /// Pages from `start` to `committed` are accessible.
    committed: usize,
    /// Free blocks below `top`, by start and by (length, start).
    free_by_start: BTreeMap<usize, usize>,
    free_by_size: BTreeSet<(usize, usize)>,
    /// Protection of fresh pages.
    protection: i32,
}

impl CodeMemory {
    /// Reserves the address space; nothing is resident until used.
    pub(crate) fn new() -> Result<Box<CodeMemory>, String> {
        // SAFETY: an anonymous private mapping with no access; the arena unmaps it on drop.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                RESERVATION,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(format!(
                "could not reserve {} MB for code: {}",
                RESERVATION >> 20,
                std::io::Error::last_os_error()
            ));
        }
        // SAFETY: sysconf has no preconditions.
        let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096);
        let start = base as usize;
        let middle = start + RESERVATION / 2;
        let arena = Arena {
            base: base.cast(),
            page,
            code: Heap::new(start, middle, libc::PROT_READ | libc::PROT_WRITE),
            data: Heap::new(middle, start + RESERVATION, libc::PROT_READ | libc::PROT_WRITE),
            isolated: false,
        };
        Ok(Box::new(CodeMemory { arena: Mutex::new(arena) }))
    }

    /// While set, every code block is page-aligned and a whole number of pages long, so that
    /// it shares no page with another block.
    pub(crate) fn set_isolated(&self, isolated: bool) {
        self.arena().isolated = isolated;
    }

    fn arena(&self) -> std::sync::MutexGuard<'_, Arena> {
        self.arena.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Bytes of code and data handed out and not given back (read-only data of removed cells
    /// included), for tests.
    #[cfg(test)]
    pub(crate) fn in_use(&self) -> usize {
        let arena = self.arena();
        let start = arena.base as usize;
        arena.code.in_use(start) + arena.data.in_use(start + RESERVATION / 2)
    }
}

impl Drop for Arena {
    fn drop(&mut self) {
        // SAFETY: the mapping was made in `CodeMemory::new` with this size; the JIT, whose code
        // lives here, is disposed before its code memory (see `Jit::drop`). The guard forgets
        // the range first.
        unsafe {
            quasi_code_range(self.base as usize, 0);
            libc::munmap(self.base.cast(), RESERVATION);
        }
    }
}

impl Heap {
    fn new(start: usize, end: usize, protection: i32) -> Heap {
        Heap {
            end,
            top: start,
            committed: start,
            free_by_start: BTreeMap::new(),
            free_by_size: BTreeSet::new(),
            protection,
        }
    }

    /// A block of `size` bytes aligned to `align` (a power of two), or None when the half is full.
    fn allocate(&mut self, size: usize, align: usize, page: usize) -> Option<usize> {
        let size = size.max(1);
        let align = align.max(1).next_power_of_two();
        let fitting = self.free_by_size.range((size + align - 1, 0)..).next().copied();
        if let Some((length, start)) = fitting {
            self.take_free(start, length);
            let address = start.next_multiple_of(align);
            self.give_free(start, address - start);
            self.give_free(address + size, start + length - address - size);
            return Some(address);
        }
        let address = self.top.next_multiple_of(align);
        let new_top = address.checked_add(size).filter(|top| *top <= self.end)?;
        if new_top > self.committed {
            let committed = new_top.next_multiple_of(COMMIT_STEP.max(page)).min(self.end);
            // SAFETY: the range lies inside the reservation this heap owns.
            let made =
                unsafe { libc::mprotect(self.committed as *mut c_void, committed - self.committed, self.protection) };
            if made != 0 {
                return None;
            }
            self.committed = committed;
        }
        self.give_free(self.top, address - self.top);
        self.top = new_top;
        Some(address)
    }

    /// Gives a block back, merging it with free neighbours (and into the unused top).
    fn free(&mut self, mut start: usize, mut length: usize) {
        if let Some((&before, &before_length)) = self.free_by_start.range(..start).next_back() {
            if before + before_length == start {
                self.take_free(before, before_length);
                start = before;
                length += before_length;
            }
        }
        if let Some(&after_length) = self.free_by_start.get(&(start + length)) {
            self.take_free(start + length, after_length);
            length += after_length;
        }
        if start + length == self.top {
            self.top = start;
        } else {
            self.give_free(start, length);
        }
    }

    fn take_free(&mut self, start: usize, length: usize) {
        self.free_by_start.remove(&start);
        self.free_by_size.remove(&(length, start));
    }

    fn give_free(&mut self, start: usize, length: usize) {
        if length > 0 {
            self.free_by_start.insert(start, length);
            self.free_by_size.insert((length, start));
        }
    }

    /// Bytes handed out and not given back; `start` is where the half begins.
    #[cfg(test)]
    fn in_use(&self, start: usize) -> usize {
        self.top - start - self.free_by_start.values().sum::<usize>()
    }
}

/// The memory of one object ORC links (one memory manager, in MCJIT's terms).
struct ObjectMemory {
    memory: *const CodeMemory,
    code: Vec<(usize, usize)>,
    /// Data blocks, and whether each outlives the object (read-only data).
    data: Vec<(usize, usize, bool)>,
    /// Blocks from the C heap, handed out when the reservation was full so that LLVM has
    /// somewhere to write; `finalize` then fails the link.
    overflow: Vec<*mut c_void>,
}

impl ObjectMemory {
    fn memory(&self) -> &CodeMemory {
        // SAFETY: the code memory outlives the JIT and so every object's memory manager.
        unsafe { &*self.memory }
    }

    fn overflow(&mut self, size: usize, align: usize) -> *mut u8 {
        // SAFETY: calloc has no preconditions; the block is freed in `destroy`.
        let block = unsafe { libc::calloc(size + align.max(1), 1) };
        self.overflow.push(block);
        (block as usize).next_multiple_of(align.max(1).next_power_of_two()) as *mut u8
    }
}

/// `LLVMMemoryManagerCreateContextCallback`: a fresh object's memory.
pub(crate) extern "C" fn create_context(memory: *mut c_void) -> *mut c_void {
    let object =
        ObjectMemory { memory: memory as *const CodeMemory, code: Vec::new(), data: Vec::new(), overflow: Vec::new() };
    Box::into_raw(Box::new(object)).cast()
}

/// `LLVMMemoryManagerNotifyTerminatingCallback`: nothing to do; the session frees the memory.
pub(crate) extern "C" fn notify_terminating(_memory: *mut c_void) {}

/// `LLVMMemoryManagerAllocateCodeSectionCallback`.
pub(crate) extern "C" fn allocate_code(
    object: *mut c_void,
    size: libc::uintptr_t,
    align: libc::c_uint,
    _section: libc::c_uint,
    _name: *const c_char,
) -> *mut u8 {
    // SAFETY: `object` came from `create_context` and is used by one memory manager at a time.
    let object = unsafe { &mut *object.cast::<ObjectMemory>() };
    let mut size = size.max(1);
    let block = {
        let mut arena = object.memory().arena();
        let page = arena.page;
        let align = if arena.isolated {
            size = size.next_multiple_of(page);
            page.max(align as usize)
        } else {
            align as usize
        };
        match arena.code.allocate(size, align, page) {
            Some(address) => {
                // SAFETY: records the committed, always-readable part of the code half.
                unsafe { quasi_code_range(arena.base as usize, arena.code.committed) };
                // Pages this block shares with earlier code were made executable; write them now.
                let (first, last) = pages(address, size, page);
                // SAFETY: the pages lie inside the code half, which the arena owns.
                let made =
                    unsafe { libc::mprotect(first as *mut c_void, last - first, libc::PROT_READ | libc::PROT_WRITE) };
                if made != 0 {
                    arena.code.free(address, size);
                }
                (made == 0).then_some(address)
            }
            None => None,
        }
    };
    match block {
        Some(address) => {
            object.code.push((address, size));
            address as *mut u8
        }
        None => object.overflow(size, align as usize),
    }
}

/// `LLVMMemoryManagerAllocateDataSectionCallback`.
pub(crate) extern "C" fn allocate_data(
    object: *mut c_void,
    size: libc::uintptr_t,
    align: libc::c_uint,
    _section: libc::c_uint,
    name: *const c_char,
    read_only: llvm_sys::prelude::LLVMBool,
) -> *mut u8 {
    // SAFETY: as in `allocate_code`; `name` is a C string for the duration of the call.
    let (object, name) = unsafe { (&mut *object.cast::<ObjectMemory>(), CStr::from_ptr(name)) };
    // Unwind tables are deregistered with their object and nothing else points to them.
    let kept = read_only != 0 && name.to_bytes() != b".eh_frame";
    let block = {
        let mut arena = object.memory().arena();
        let page = arena.page;
        arena.data.allocate(size, align as usize, page)
    };
    match block {
        Some(address) => {
            object.data.push((address, size.max(1), kept));
            address as *mut u8
        }
        None => object.overflow(size, align as usize),
    }
}

/// `LLVMMemoryManagerFinalizeMemoryCallback`: code becomes read-execute. Returns true (and a
/// message from `malloc`, which LLVM frees) when the object cannot run.
pub(crate) extern "C" fn finalize(object: *mut c_void, message: *mut *mut c_char) -> llvm_sys::prelude::LLVMBool {
    // SAFETY: as in `allocate_code`.
    let object = unsafe { &mut *object.cast::<ObjectMemory>() };
    let failure = if object.overflow.is_empty() {
        let page = object.memory().arena().page;
        object.code.iter().find_map(|(address, size)| {
            let (first, last) = pages(*address, *size, page);
            // SAFETY: the pages lie inside the code half, which the arena owns.
            let made = unsafe { libc::mprotect(first as *mut c_void, last - first, libc::PROT_READ | libc::PROT_EXEC) };
            (made != 0).then(|| format!("could not make code executable: {}", std::io::Error::last_os_error()))
        })
    } else {
        Some(format!("the session's {} MB of code memory are full", RESERVATION >> 20))
    };
    let Some(failure) = failure else { return 0 };
    if !message.is_null() {
        let text = std::ffi::CString::new(failure).unwrap_or_default();
        // SAFETY: LLVM takes the message and frees it with `free`, so it comes from `strdup`.
        unsafe { *message = libc::strdup(text.as_ptr()) };
    }
    1
}

/// `LLVMMemoryManagerDestroyCallback`: the object was removed (or the JIT is going); its blocks
/// go back to the arena, except read-only data, which may still be pointed to.
pub(crate) extern "C" fn destroy(object: *mut c_void) {
    // SAFETY: `object` came from `Box::into_raw` in `create_context`; LLVM destroys each once.
    let object = unsafe { Box::from_raw(object.cast::<ObjectMemory>()) };
    {
        let mut arena = object.memory().arena();
        for (address, size) in &object.code {
            arena.code.free(*address, *size);
        }
        for (address, size, _) in object.data.iter().filter(|(_, _, kept)| !kept) {
            arena.data.free(*address, *size);
        }
    }
    for block in &object.overflow {
        // SAFETY: allocated with calloc in `overflow`, freed once here.
        unsafe { libc::free(*block) };
    }
}

/// The first page of a block and the end of its last page.
fn pages(address: usize, size: usize, page: usize) -> (usize, usize) {
    (address / page * page, (address + size).next_multiple_of(page))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_are_reused_and_merged() {
        let mut heap = Heap::new(4096, 4096 * 1024, libc::PROT_READ);
        heap.committed = heap.end;
        let first = heap.allocate(100, 16, 4096).unwrap_or_default();
        let second = heap.allocate(40, 8, 4096).unwrap_or_default();
        let third = heap.allocate(64, 64, 4096).unwrap_or_default();
        assert_eq!(first % 16, 0);
        assert_eq!(third % 64, 0);
        assert!(first + 100 <= second && second + 40 <= third);
        heap.free(second, 40);
        assert_eq!(heap.allocate(32, 8, 4096), Some(second));
        heap.free(second, 32);
        heap.free(first, 100);
        heap.free(third, 64);
        assert_eq!(heap.in_use(4096), 0);
        assert_eq!(heap.top, 4096);
    }
}
