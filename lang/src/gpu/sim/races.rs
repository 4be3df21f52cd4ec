//! racecheck and initcheck in the simulator (docs/language.md §7.7), with checking on: a shadow
//! of the memory the checked accesses of a launch touch, one record per 4-byte granule with the
//! bytes of it each access touched.
//!
//! Shared memory (per block): between two barriers (an *interval*), two threads touching the
//! same byte, at least one writing and not both atomically, race — unless they are lanes of one
//! warp and a warp operation came between them (each warp counts its operations: its *epoch*).
//! Verdicts are per interval, not per access order: whichever of the two ran first, the second
//! finds the first in the shadow. A byte read before any thread of the block wrote it in this
//! launch is an uninitialised read, reported when its interval ends (unless a race in it is
//! reported first: a thread writing the byte in the same interval races with the read).
//!
//! Global memory (per launch): two blocks touching the same byte, at least one writing and not
//! both atomically, race (blocks are concurrent on a GPU). Its shadow is kept per buffer (region)
//! in chunks, made for the parts of a buffer a launch touches, and a launch's number marks what
//! is current, so nothing is cleared between launches.
//!
//! Each granule keeps its writer and up to two readers; a third distinct reader is only dropped,
//! so a race with it alone can go unreported, never one be reported falsely.

use crate::abi::Access;

const NONE: u32 = u32::MAX;
/// Bytes of a granule.
const GRANULE: usize = 4;
/// Granules of a global shadow's chunk.
const CHUNK: usize = 1 << 14;

/// One access recorded in the shadow: who (a thread of the block, or a block of the grid),
/// where (its site), the warp's epoch then, which bytes of the granule, and whether atomic.
#[derive(Clone, Copy, Debug)]
struct Mark {
    who: u32,
    site: u32,
    epoch: u32,
    bytes: u8,
    atomic: bool,
}

const NOBODY: Mark = Mark { who: NONE, site: 0, epoch: 0, bytes: 0, atomic: false };

#[derive(Clone, Copy, Debug)]
struct Granule {
    /// The block (shared) or launch (global) and interval this state is of: older is fresh.
    generation: u32,
    interval: u32,
    /// Bytes written in this block (initcheck).
    initialised: u8,
    writer: Mark,
    readers: [Mark; 2],
}

const FRESH: Granule = Granule { generation: 0, interval: 0, initialised: 0, writer: NOBODY, readers: [NOBODY; 2] };

/// A race or an uninitialised read: the two accesses (the second is the one that found it),
/// and the byte, an offset in its memory.
#[derive(Clone, Debug)]
pub(super) struct Report {
    /// `RAW`, `WAR`, `WAW`, or `uninitialised`.
    pub kind: &'static str,
    pub offset: usize,
    /// (thread or block, site, what it did).
    pub first: Option<(u32, u32, &'static str)>,
    pub second: (u32, u32, &'static str),
}

fn verb(access: Access) -> &'static str {
    match access {
        Access::Read => "reads",
        Access::Write => "writes",
        Access::Atomic => "updates atomically",
    }
}

/// The new access to a granule.
struct Touch {
    who: u32,
    site: u32,
    epoch: u32,
    access: Access,
    /// Whether warp epochs order the lanes of a warp (shared memory).
    warps: bool,
}

impl Touch {
    fn races(&self, earlier: &Mark, bytes: u8) -> bool {
        earlier.who != NONE
            && earlier.bytes & bytes != 0
            && earlier.who != self.who
            && !(earlier.atomic && self.access == Access::Atomic)
            && !(self.warps && earlier.who / 32 == self.who / 32 && self.epoch > earlier.epoch)
    }

    fn report(&self, kind: &'static str, earlier: &Mark, offset: usize, bytes: u8) -> Report {
        let did = match (earlier.atomic, kind) {
            (true, _) => "updates it atomically",
            (false, "WAR") => "reads it",
            (false, _) => "writes it",
        };
        let first_byte = (earlier.bytes & bytes).trailing_zeros() as usize;
        Report {
            kind,
            offset: offset + first_byte,
            first: Some((earlier.who, earlier.site, did)),
            second: (self.who, self.site, verb(self.access)),
        }
    }

    /// Records the access of `bytes` (a mask) of `granule`, whose first byte is at `offset`;
    /// the race it makes, if any, and (shared memory) an uninitialised byte it reads.
    fn record(
        &self,
        granule: &mut Granule,
        (generation, interval): (u32, u32),
        offset: usize,
        bytes: u8,
    ) -> (Option<Report>, Option<usize>) {
        if granule.generation != generation {
            *granule = Granule { generation, ..FRESH };
        }
        if granule.interval != interval {
            granule.interval = interval;
            granule.writer = NOBODY;
            granule.readers = [NOBODY; 2];
        }
        let access = self.access;
        if self.races(&granule.writer, bytes) {
            let kind = if access == Access::Read { "RAW" } else { "WAW" };
            return (Some(self.report(kind, &granule.writer, offset, bytes)), None);
        }
        if access != Access::Read {
            if let Some(reader) = granule.readers.iter().find(|reader| self.races(reader, bytes)) {
                return (Some(self.report("WAR", reader, offset, bytes)), None);
            }
        }
        let unwritten = bytes & !granule.initialised;
        let uninitialised =
            (access == Access::Read && unwritten != 0).then(|| offset + unwritten.trailing_zeros() as usize);
        let new = Mark { who: self.who, site: self.site, epoch: self.epoch, bytes, atomic: access == Access::Atomic };
        // A thread's mark is of its latest access: its warp's epoch then (a later access by
        // another lane is ordered only after that one).
        if access != Access::Write {
            match granule.readers.iter_mut().find(|reader| reader.who == self.who || reader.who == NONE) {
                Some(slot) if slot.who == self.who => {
                    slot.bytes |= bytes;
                    slot.epoch = self.epoch;
                    slot.site = self.site;
                }
                Some(slot) => *slot = new,
                None => {}
            }
        }
        if access != Access::Read {
            if granule.writer.who == self.who {
                granule.writer.bytes |= bytes;
                granule.writer.site = self.site;
                granule.writer.epoch = self.epoch;
                granule.writer.atomic &= access == Access::Atomic;
            } else {
                granule.writer = new;
            }
            granule.initialised |= bytes;
        }
        (None, uninitialised)
    }
}

/// Runs `each(granule index, its first byte's offset, the mask of bytes)` over the granules of
/// `length` bytes at `offset`; stops at the first `Some`.
fn each_granule<T>(offset: usize, length: usize, mut each: impl FnMut(usize, usize, u8) -> Option<T>) -> Option<T> {
    let end = offset + length;
    let mut at = offset;
    while at < end {
        let index = at / GRANULE;
        let first = index * GRANULE;
        let stop = end.min(first + GRANULE);
        let mask = ((1u16 << (stop - first)) - (1u16 << (at - first))) as u8;
        if let Some(found) = each(index, first, mask) {
            return Some(found);
        }
        at = stop;
    }
    None
}

/// The shadow of a block's shared memory.
#[derive(Default)]
pub(super) struct SharedShadow {
    granules: Vec<Granule>,
    /// Counts blocks: a granule of an older block is fresh (no clearing between blocks).
    generation: u32,
    interval: u32,
    /// Counts intervals of the launch (blocks' too): the high word of this interval's stamps.
    serial: u64,
    /// The first read of a byte no thread wrote, reported when its interval ends.
    uninitialised: Option<Report>,
}

/// A granule's stamp (`SimFrame::stamps`) says what further accesses of it in the interval
/// need no record: `serial << 32 | thread << 2 | kind`, kind 1: the thread alone wrote all of
/// it (its reads and writes), 2: the thread alone read all of it, initialised (its reads), 3:
/// several threads read all of it, initialised, none wrote (any read; thread 0). Stamps of
/// older intervals match nothing. `NO_STAMP` is what the frame holds for a stamp that must
/// match nothing.
pub(super) const NO_STAMP: u64 = u64::MAX;

pub(super) fn stamp(serial: u64, thread: u32, kind: u64) -> u64 {
    serial << 32 | u64::from(thread) << 2 | kind
}

impl SharedShadow {
    /// A new launch whose blocks have `len` bytes of shared memory.
    pub(super) fn begin_launch(&mut self, len: usize) {
        self.granules.clear();
        self.granules.resize(len.div_ceil(GRANULE), FRESH);
        self.generation = 0;
        self.serial = 0;
        self.begin_block();
    }

    /// A new block: nothing written, a first interval.
    pub(super) fn begin_block(&mut self) {
        self.serial += 1;
        self.generation += 1;
        self.interval = 1;
        self.uninitialised = None;
    }

    /// The block's threads passed a barrier (or finished): the interval's uninitialised read,
    /// if any, then a new interval.
    pub(super) fn end_interval(&mut self) -> Option<Report> {
        self.serial += 1;
        self.interval += 1;
        self.uninitialised.take()
    }

    /// The interval's serial number (`stamp`).
    pub(super) fn serial(&self) -> u64 {
        self.serial
    }

    /// The stamp of granule `index` after an access by `who` that raced with nothing: what
    /// lets `who`'s (or everyone's) further accesses through without a record, or 0. (A kernel
    /// with warp operations gets no stamps: a lane's access after one must be recorded with its
    /// warp's new epoch.)
    pub(super) fn stamp(&self, index: usize, who: u32) -> u64 {
        let Some(granule) = self.granules.get(index) else { return 0 };
        if granule.generation != self.generation || granule.interval != self.interval {
            return 0;
        }
        let full = 0b1111;
        let marks = [granule.writer, granule.readers[0], granule.readers[1]];
        if marks.iter().any(|mark| mark.who != NONE && mark.atomic) {
            return 0;
        }
        let only_mine = granule.readers.iter().all(|reader| reader.who == NONE || reader.who == who);
        if granule.writer.who == who && granule.writer.bytes == full && only_mine {
            return stamp(self.serial, who, 1);
        }
        if granule.writer.who != NONE || granule.initialised != full {
            return 0;
        }
        let [first, second] = granule.readers;
        if first.who == who && first.bytes == full && second.who == NONE {
            return stamp(self.serial, who, 2);
        }
        let both_full = first.who != NONE && second.who != NONE && first.bytes == full && second.bytes == full;
        if both_full && first.who != second.who {
            return stamp(self.serial, 0, 3);
        }
        0
    }

    pub(super) fn access(
        &mut self,
        offset: usize,
        bytes: usize,
        who: u32,
        site: u32,
        epoch: u32,
        access: Access,
    ) -> Option<Report> {
        let touch = Touch { who, site, epoch, access, warps: true };
        let when = (self.generation, self.interval);
        let (shadow, uninitialised) = (&mut self.granules, &mut self.uninitialised);
        each_granule(offset, bytes, |index, first, mask| {
            let granule = shadow.get_mut(index)?;
            let (race, unwritten) = touch.record(granule, when, first, mask);
            if let (Some(byte), None) = (unwritten, &uninitialised) {
                *uninitialised =
                    Some(Report { kind: "uninitialised", offset: byte, first: None, second: (who, site, "reads") });
            }
            race
        })
    }
}

/// The shadow of the global memory a launch touches: for each region (a buffer, a staged array,
/// a device global), chunks of granules, made when first touched.
#[derive(Default)]
pub(super) struct GlobalShadow {
    regions: Vec<Vec<Option<Box<[Granule]>>>>,
    /// The launch: granules of older launches are fresh.
    generation: u32,
}

impl GlobalShadow {
    /// A new launch over `regions` regions (in the order the executor keeps them).
    pub(super) fn begin_launch(&mut self, regions: usize) {
        self.regions.clear();
        self.regions.resize_with(regions, Vec::new);
        self.generation = self.generation.wrapping_add(1).max(1);
    }

    /// An access by `block` of `bytes` at `offset` in region `region`: the first race with
    /// another block.
    pub(super) fn access(
        &mut self,
        region: usize,
        offset: usize,
        bytes: usize,
        block: u32,
        site: u32,
        access: Access,
    ) -> Option<Report> {
        let touch = Touch { who: block, site, epoch: 0, access, warps: false };
        let when = (self.generation, 0);
        let chunks = self.regions.get_mut(region)?;
        each_granule(offset, bytes, |index, first, mask| {
            let chunk = index / CHUNK;
            if chunks.len() <= chunk {
                chunks.resize_with(chunk + 1, || None);
            }
            let granules = chunks[chunk].get_or_insert_with(|| vec![FRESH; CHUNK].into_boxed_slice());
            touch.record(&mut granules[index % CHUNK], when, first, mask).0
        })
    }
}
