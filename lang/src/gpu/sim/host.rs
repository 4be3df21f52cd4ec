//! `host-alloc` memory in the simulator, and the check on the host's accesses to it while
//! submissions run (docs/language.md §7.8).
//!
//! Each allocation is a memfd mapped twice: the program's view, whose address `host-alloc`
//! returns, and the device's view, which the simulator's workers copy through. With checking
//! on, a submission's copies protect the program's view of the pages they use while it runs —
//! no access where the device writes, read-only where it reads — so a host access that races
//! with the device faults at once, and the fault's diagnostic names the submission
//! (`conflict`). Only the pages a copy wholly covers (counting only the allocation's own bytes
//! of its first and last page) are protected: an access to a page shared with bytes outside
//! the copy is never reported falsely, and goes unchecked.

use std::collections::{BTreeMap, HashMap, VecDeque};

/// Ranges of ended submissions kept to explain a fault that raced with their end.
const HISTORY: usize = 256;

/// One `host-alloc` allocation: its two views of the same pages.
struct Mapping {
    host: usize,
    device: usize,
    /// The bytes asked for; the views span whole pages.
    len: usize,
    mapped: usize,
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: both views were mapped by `HostMemories::alloc` with this size, and nothing
        // uses them after the allocation is freed.
        unsafe {
            libc::munmap(self.host as *mut libc::c_void, self.mapped);
            libc::munmap(self.device as *mut libc::c_void, self.mapped);
        }
    }
}

/// A range of the program's view a submission's copy uses, for the diagnostics.
#[derive(Clone)]
struct Use {
    submission: u64,
    start: usize,
    end: usize,
    /// The device writes it (a copy to the host); else it reads it.
    device_writes: bool,
    command: String,
}

/// How many running submissions read and write a page.
#[derive(Clone, Copy, Default)]
struct PageUse {
    readers: u32,
    writers: u32,
}

/// What a submission protected, to undo when it ends.
#[derive(Default)]
pub(crate) struct Protection {
    pages: Vec<(usize, bool)>,
    uses: Vec<Use>,
}

/// The simulator's `host-alloc` memory and its protected pages.
#[derive(Default)]
pub(crate) struct HostMemories {
    mappings: BTreeMap<usize, Mapping>,
    pages: HashMap<usize, PageUse>,
    running: Vec<Use>,
    ended: VecDeque<Use>,
}

fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    (unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).max(4096) as usize
}

impl HostMemories {
    /// `bytes` of zeroed memory; returns the program's view.
    pub(crate) fn alloc(&mut self, bytes: u64) -> Result<u64, String> {
        let page = page_size();
        let len = usize::try_from(bytes).map_err(|_| format!("`host-alloc` of {bytes} bytes"))?;
        let mapped =
            len.max(1).checked_next_multiple_of(page).ok_or_else(|| format!("`host-alloc` of {bytes} bytes"))?;
        let failed =
            |what: &str| format!("`host-alloc` of {bytes} bytes failed: {what}: {}", std::io::Error::last_os_error());
        // SAFETY: plain system calls on a new descriptor; the views are unmapped by `Mapping`'s
        // drop, the descriptor closed once both are mapped.
        unsafe {
            let fd = libc::memfd_create(c"quasi-host-alloc".as_ptr(), libc::MFD_CLOEXEC);
            if fd < 0 {
                return Err(failed("memfd_create"));
            }
            if libc::ftruncate(fd, mapped as libc::off_t) != 0 {
                let error = failed("ftruncate");
                libc::close(fd);
                return Err(error);
            }
            let view = || {
                libc::mmap(std::ptr::null_mut(), mapped, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, fd, 0)
            };
            let host = view();
            let device = if host == libc::MAP_FAILED { libc::MAP_FAILED } else { view() };
            let error = failed("mmap");
            libc::close(fd);
            if device == libc::MAP_FAILED {
                if host != libc::MAP_FAILED {
                    libc::munmap(host, mapped);
                }
                return Err(error);
            }
            let mapping = Mapping { host: host as usize, device: device as usize, len, mapped };
            self.mappings.insert(mapping.host, mapping);
            Ok(host as u64)
        }
    }

    /// Frees an allocation (the runtime saw that no running submission uses it).
    pub(crate) fn free(&mut self, address: u64) {
        self.mappings.remove(&(address as usize));
    }

    /// The allocation `[address, address + bytes)` lies in wholly, if any.
    fn mapping(&self, address: u64, bytes: u64) -> Option<&Mapping> {
        let (start, end) = (address as usize, (address as usize).checked_add(bytes as usize)?);
        let (_, mapping) = self.mappings.range(..=start).next_back()?;
        (end <= mapping.host + mapping.len).then_some(mapping)
    }

    /// The device's view of `bytes` of `host-alloc` memory at `address`; `None` if the range
    /// is not wholly inside one allocation (other host memory).
    pub(crate) fn device_address(&self, address: u64, bytes: u64) -> Option<u64> {
        self.mapping(address, bytes).map(|mapping| (mapping.device + (address as usize - mapping.host)) as u64)
    }

    /// Protects the pages of `host-alloc` memory a submission's copies use, while it runs:
    /// `copies` are (address, bytes, whether the device writes them, the command's name).
    pub(crate) fn protect(&mut self, submission: u64, copies: &[(u64, u64, bool, String)]) -> Protection {
        let page = page_size();
        let mut protection = Protection::default();
        for (address, bytes, device_writes, command) in copies {
            let Some(mapping) = self.mapping(*address, *bytes) else { continue };
            let (start, end) = (*address as usize, (*address + *bytes) as usize);
            let (first, limit) = (mapping.host, mapping.host + mapping.len);
            let mut at = start - (start - first) % page;
            while at < end {
                // The allocation's own bytes of this page must all be in the copy.
                if at.max(first) >= start && (at + page).min(limit) <= end {
                    protection.pages.push((at, *device_writes));
                }
                at += page;
            }
            let used = Use { submission, start, end, device_writes: *device_writes, command: command.clone() };
            protection.uses.push(used);
        }
        for &(at, writes) in &protection.pages {
            let counts = self.pages.entry(at).or_default();
            if writes {
                counts.writers += 1;
            } else {
                counts.readers += 1;
            }
        }
        self.apply(&protection.pages, page);
        self.running.extend(protection.uses.iter().cloned());
        protection
    }

    /// Sets the protection of `pages` to what their users allow now: one system call per run
    /// of neighbouring pages that get the same protection (a 16 MB copy protects 4,096 pages).
    fn apply(&self, pages: &[(usize, bool)], page: usize) {
        let mut sorted: Vec<usize> = pages.iter().map(|(at, _)| *at).collect();
        sorted.sort_unstable();
        sorted.dedup();
        let protection_of = |at: usize| {
            let counts = self.pages.get(&at).copied().unwrap_or_default();
            if counts.writers > 0 {
                libc::PROT_NONE
            } else if counts.readers > 0 {
                libc::PROT_READ
            } else {
                libc::PROT_READ | libc::PROT_WRITE
            }
        };
        let mut index = 0;
        while index < sorted.len() {
            let (start, protection) = (sorted[index], protection_of(sorted[index]));
            let mut end = start + page;
            index += 1;
            while index < sorted.len() && sorted[index] == end && protection_of(end) == protection {
                end += page;
                index += 1;
            }
            // SAFETY: whole pages of the program's view of live mappings; only their
            // protection changes.
            unsafe { libc::mprotect(start as *mut libc::c_void, end - start, protection) };
        }
    }

    /// Undoes a submission's protection when it ended.
    pub(crate) fn unprotect(&mut self, protection: Protection) {
        let page = page_size();
        for &(at, writes) in &protection.pages {
            let counts = self.pages.entry(at).or_default();
            if writes {
                counts.writers = counts.writers.saturating_sub(1);
            } else {
                counts.readers = counts.readers.saturating_sub(1);
            }
            if counts.readers == 0 && counts.writers == 0 {
                self.pages.remove(&at);
            }
        }
        self.apply(&protection.pages, page);
        for used in protection.uses {
            self.running.retain(|running| running.submission != used.submission);
            self.ended.push_back(used);
        }
        while self.ended.len() > HISTORY {
            self.ended.pop_front();
        }
    }

    /// Why a host access at `address` faulted, if it was one the protection stopped: the
    /// submission whose copy uses that memory (running, or ended since the fault).
    pub(crate) fn conflict(&self, address: usize, write: bool) -> Option<String> {
        let mapping = self.mappings.range(..=address).next_back().map(|(_, mapping)| mapping)?;
        if address >= mapping.host + mapping.mapped {
            return None;
        }
        let user = self
            .running
            .iter()
            .rev()
            .chain(self.ended.iter().rev())
            .find(|used| used.start <= address && address < used.end && (write || used.device_writes))?;
        let access = if write { "writes" } else { "reads" };
        let device = if user.device_writes { "writes" } else { "reads" };
        Some(format!(
            "the host {access} byte {} of `host-alloc` memory while submission {} {device} it ({}): await its fence before touching the memory",
            address - mapping.host,
            user.submission,
            user.command
        ))
    }
}
