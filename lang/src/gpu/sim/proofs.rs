//! What checking need not do at run time (docs/language.md §7.7): proofs made from a simulator
//! build's optimised code when it is built (`facts::analyse`), and completed when it is
//! launched (`plan`), with the launch's grid, block, arguments and memory.
//!
//! Every checked access tests its address inline against its site's guard (`SimGuard`) before
//! it calls `SIM_CHECK`; a guard lets through the accesses proved to need no shadow, and only
//! those of the memory they were proved for, so a stray address still takes the call and its
//! memcheck. At build time `facts` reads each access's address and barrier intervals back from
//! the IR. At launch the offsets become affine forms in the thread and block ids, and:
//! - a buffer (region) needs no racecheck shadow when no access may write it, or all that touch
//!   it have one form whose address tells the block apart (two blocks never meet at a byte);
//! - a shared-memory array needs none when every two accesses of it that can share an interval,
//!   one writing, have one form that tells the thread apart, and each read follows a barrier
//!   that every thread reached after a write covering the whole array (initcheck).
//!
//! An access whose address cannot be read, or may go anywhere, leaves every shared and global
//! access to the shadow. A stray access of a proved site that lands in memory another proof
//! covers is checked for bounds only: a race through it can go unreported, never one be
//! reported falsely.

use super::facts::{Checked, Expr, Facts, Root};
use crate::abi::{Access, SimGuard};

/// A digit of a thread or block id: `(id / low) % count`; `var` 0–2 is `tid.x y z`, 3–5
/// `ctaid.x y z`. A whole id is its digit with `low` 1 and `count` its extent; `div` and `rem`
/// by a constant that divides it split it (mixed radix).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Digit {
    var: u8,
    low: i128,
    count: i128,
}

/// An address's offset at a launch: `c + Σ k·digit`, plus something unknown when `opaque`
/// (then `c` and the terms are only a part of it). Terms are sorted by digit, none zero.
#[derive(Clone, Debug, PartialEq)]
struct Affine {
    c: i128,
    terms: Vec<(Digit, i128)>,
    opaque: bool,
}

impl Affine {
    const OPAQUE: Affine = Affine { c: 0, terms: Vec::new(), opaque: true };

    const fn constant(c: i128) -> Affine {
        Affine { c, terms: Vec::new(), opaque: false }
    }

    fn digit(digit: Digit) -> Affine {
        Affine { c: 0, terms: vec![(digit, 1)], opaque: false }
    }

    fn is_constant(&self) -> bool {
        !self.opaque && self.terms.is_empty()
    }

    /// `self + sign·other`; opaque where the arithmetic would overflow (no proof needs it).
    fn plus(mut self, other: Affine, sign: i128) -> Affine {
        for (digit, k) in other.terms {
            if sign.checked_mul(k).and_then(|k| add_term(&mut self.terms, digit, k)).is_none() {
                return Affine::OPAQUE;
            }
        }
        let Some(c) = sign.checked_mul(other.c).and_then(|c| self.c.checked_add(c)) else { return Affine::OPAQUE };
        Affine { c, terms: self.terms, opaque: self.opaque || other.opaque }
    }

    fn times(self, factor: i128) -> Affine {
        if factor == 0 {
            return Affine { opaque: self.opaque, ..Affine::constant(0) };
        }
        let terms: Option<Vec<(Digit, i128)>> =
            self.terms.into_iter().map(|(digit, k)| k.checked_mul(factor).map(|k| (digit, k))).collect();
        match (terms, self.c.checked_mul(factor)) {
            (Some(terms), Some(c)) => Affine { c, terms, opaque: self.opaque },
            _ => Affine::OPAQUE,
        }
    }

    fn coefficient(&self, digit: &Digit) -> i128 {
        self.terms.iter().find(|(other, _)| other == digit).map_or(0, |(_, k)| *k)
    }
}

/// Adds `k·digit` to `terms`; `None` where the coefficient would overflow.
fn add_term(terms: &mut Vec<(Digit, i128)>, digit: Digit, k: i128) -> Option<()> {
    match terms.binary_search_by(|(other, _)| other.cmp(&digit)) {
        Ok(at) => {
            terms[at].1 = terms[at].1.checked_add(k)?;
            if terms[at].1 == 0 {
                terms.remove(at);
            }
        }
        Err(at) if k != 0 => terms.insert(at, (digit, k)),
        Err(_) => {}
    }
    Some(())
}

/// Each id's cuts (the `low`s and `low·count`s of its digits in a launch's forms): every form
/// is rewritten in the finest digits they make, so that equal offsets have equal forms.
#[derive(Default)]
struct Cuts {
    cuts: [Vec<i128>; 6],
    /// An id whose cuts do not divide one another: its forms are opaque.
    broken: [bool; 6],
}

impl Cuts {
    fn new(forms: &[&Affine], shape: &Shape<'_>) -> Cuts {
        let mut cuts = Cuts::default();
        for var in 0..6 {
            cuts.cuts[var] = vec![1, shape.extent(var)];
        }
        for form in forms {
            for (digit, _) in &form.terms {
                let list = &mut cuts.cuts[digit.var as usize];
                list.push(digit.low);
                list.push(digit.low.saturating_mul(digit.count));
            }
        }
        for var in 0..6 {
            let list = &mut cuts.cuts[var];
            list.sort_unstable();
            list.dedup();
            cuts.broken[var] = list.windows(2).any(|pair| pair[1] % pair[0] != 0);
        }
        cuts
    }

    /// The finest digits of id `var`.
    fn digits(&self, var: usize) -> impl Iterator<Item = Digit> + '_ {
        self.cuts[var].windows(2).map(move |pair| Digit { var: var as u8, low: pair[0], count: pair[1] / pair[0] })
    }

    fn refine(&self, form: &Affine) -> Affine {
        let mut refined = Affine { c: form.c, terms: Vec::new(), opaque: form.opaque };
        for (digit, k) in &form.terms {
            let var = digit.var as usize;
            if self.broken[var] {
                return Affine::OPAQUE;
            }
            for fine in self.digits(var) {
                let inside = fine.low.saturating_mul(fine.count) <= digit.low.saturating_mul(digit.count);
                if fine.low >= digit.low && inside {
                    let added = k.checked_mul(fine.low / digit.low).and_then(|k| add_term(&mut refined.terms, fine, k));
                    if added.is_none() {
                        return Affine::OPAQUE;
                    }
                }
            }
        }
        refined
    }
}

/// What a launch gives the proofs.
pub(crate) struct Shape<'a> {
    /// Grid x y z, then block x y z.
    pub dimensions: [i64; 6],
    pub words: &'a [u64],
    /// The launch's memory regions, `[start, end)`, sorted by start.
    pub regions: &'a [(usize, usize)],
    /// Each device global's symbol and address.
    pub globals: &'a [(String, usize)],
    /// Where the block's shared memory is (the same for every block), and its arrays' offsets
    /// and lengths.
    pub shared_start: usize,
    pub shared_arrays: &'a [(u64, u64)],
    pub sites: usize,
}

/// What the proofs leave to the run: each site's guard, and the memory no shadow is kept of.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Plan {
    pub guards: Vec<SimGuard>,
    pub unshadowed_shared: Vec<(usize, usize)>,
    pub unshadowed_regions: Vec<bool>,
}

impl Shape<'_> {
    /// How many values variable `v` takes (threads per block, blocks per grid, on its axis).
    fn extent(&self, variable: usize) -> i128 {
        let dimension = if variable < 3 { self.dimensions[3 + variable] } else { self.dimensions[variable - 3] };
        i128::from(dimension.max(1))
    }

    fn range(&self, affine: &Affine) -> (i128, i128) {
        let (mut low, mut high) = (affine.c, affine.c);
        for (digit, k) in &affine.terms {
            let span = k.saturating_mul(digit.count - 1);
            if span < 0 {
                low = low.saturating_add(span);
            } else {
                high = high.saturating_add(span);
            }
        }
        (low, high)
    }

    /// `affine` divided by `divisor` (a quotient and a remainder), when it is a whole number of
    /// `divisor`s plus one digit, which `divisor` splits, and not negative.
    fn divide(&self, affine: &Affine, divisor: i128) -> Option<(Affine, Affine)> {
        if affine.opaque || divisor <= 0 || self.range(affine).0 < 0 {
            return None;
        }
        if affine.is_constant() {
            return Some((Affine::constant(affine.c / divisor), Affine::constant(affine.c % divisor)));
        }
        let odd: Vec<&(Digit, i128)> = affine.terms.iter().filter(|(_, k)| k % divisor != 0).collect();
        if affine.c % divisor != 0 {
            return None;
        }
        let whole = |skip: Option<Digit>| {
            let mut quotient = Affine::constant(affine.c / divisor);
            for (digit, k) in &affine.terms {
                if Some(*digit) != skip {
                    add_term(&mut quotient.terms, *digit, k / divisor);
                }
            }
            quotient
        };
        match odd.as_slice() {
            [] => Some((whole(None), Affine::constant(0))),
            [(digit, 1)] if digit.count % divisor == 0 => {
                let high = Digit { var: digit.var, low: digit.low.checked_mul(divisor)?, count: digit.count / divisor };
                let low = Digit { var: digit.var, low: digit.low, count: divisor };
                Some((whole(Some(*digit)).plus(Affine::digit(high), 1), Affine::digit(low)))
            }
            [(digit, 1)] if digit.count <= divisor => Some((whole(Some(*digit)), Affine::digit(*digit))),
            _ => None,
        }
    }

    fn fits(&self, affine: Affine, bits: u32) -> Affine {
        if affine.opaque || bits >= 127 {
            return affine;
        }
        let (low, high) = self.range(&affine);
        let limit = 1i128 << (bits - 1);
        if low >= -limit && high < limit {
            affine
        } else {
            Affine::OPAQUE
        }
    }

    /// `expr`'s value at the launch; `base` is the address of the root it is an offset from.
    fn evaluate(&self, base: i128, expr: &Expr) -> Affine {
        match expr {
            Expr::Const(value) => Affine::constant(*value),
            Expr::Register(slot @ 0..=5) => {
                Affine::digit(Digit { var: *slot, low: 1, count: self.extent(*slot as usize) })
            }
            Expr::Div(inner, divisor) => {
                let inner = self.evaluate(base, inner);
                self.divide(&inner, *divisor).map_or(Affine::OPAQUE, |(quotient, _)| quotient)
            }
            Expr::Rem(inner, divisor) => {
                let inner = self.evaluate(base, inner);
                self.divide(&inner, *divisor).map_or(Affine::OPAQUE, |(_, remainder)| remainder)
            }
            Expr::Register(slot @ 6..=8) => Affine::constant(i128::from(self.dimensions[3 + *slot as usize - 6])),
            Expr::Register(slot @ 9..=11) => Affine::constant(i128::from(self.dimensions[*slot as usize - 9])),
            Expr::Register(_) | Expr::Opaque => Affine::OPAQUE,
            Expr::AlignDown(inner, mask) => {
                let inner = self.evaluate(base, inner);
                if inner.is_constant() {
                    base.checked_add(inner.c).map_or(Affine::OPAQUE, |at| Affine::constant((at & mask) - base))
                } else {
                    Affine::OPAQUE
                }
            }
            Expr::Word(index) => self
                .words
                .get(*index as usize)
                .map_or(Affine::OPAQUE, |&word| Affine::constant(i128::from(word as i64))),
            Expr::Add(left, right, bits) => {
                self.fits(self.evaluate(base, left).plus(self.evaluate(base, right), 1), *bits)
            }
            Expr::Sub(left, right, bits) => {
                self.fits(self.evaluate(base, left).plus(self.evaluate(base, right), -1), *bits)
            }
            Expr::Mul(left, right, bits) => {
                let (left, right) = (self.evaluate(base, left), self.evaluate(base, right));
                let product = if left.is_constant() {
                    right.times(left.c)
                } else if right.is_constant() {
                    left.times(right.c)
                } else {
                    Affine::OPAQUE
                };
                self.fits(product, *bits)
            }
            Expr::Shl(inner, amount, bits) => self.fits(self.evaluate(base, inner).times(1 << amount), *bits),
            Expr::Sext(inner, _) => self.evaluate(base, inner),
            Expr::Zext(inner, bits) => {
                let inner = self.evaluate(base, inner);
                if inner.opaque || self.range(&inner).0 >= 0 {
                    inner
                } else if inner.is_constant() {
                    inner.c.checked_add(1i128 << bits).map_or(Affine::OPAQUE, Affine::constant)
                } else {
                    Affine::OPAQUE
                }
            }
            Expr::Trunc(inner, bits) => {
                let inner = self.evaluate(base, inner);
                if inner.is_constant() {
                    let shift = 128 - bits;
                    Affine::constant((inner.c << shift) >> shift)
                } else {
                    self.fits(inner, *bits)
                }
            }
        }
    }

    /// Whether accesses of `bytes` bytes at `affine` (refined by `cuts`) by different values of
    /// the ids in `apart` never overlap: each varying digit of those ids has a coefficient at
    /// least the span of the smaller ones, and each other id's digits, if they move the address,
    /// count too (threads always: one block's threads meet at a byte too; blocks only when they
    /// are to be kept apart, shared memory being a block's own).
    fn separates(&self, affine: &Affine, cuts: &Cuts, apart: std::ops::Range<usize>, bytes: i128) -> bool {
        if affine.opaque {
            return false;
        }
        let mut terms = Vec::new();
        for var in 0..6 {
            for digit in cuts.digits(var).filter(|digit| digit.count > 1) {
                let k = affine.coefficient(&digit).abs();
                if k == 0 && apart.contains(&var) {
                    return false;
                }
                if k != 0 && (var < 3 || apart.contains(&var)) {
                    terms.push((k, digit.count));
                }
            }
        }
        terms.sort_unstable();
        let mut span: i128 = 0;
        for (k, count) in terms {
            if k < span.saturating_add(bytes) {
                return false;
            }
            span = span.saturating_add(k.saturating_mul(count - 1));
        }
        true
    }

    /// The bytes every thread of a block writing `bytes` at `affine` (refined) covers, with no
    /// gap.
    fn covers(&self, affine: &Affine, bytes: i128) -> Option<(i128, i128)> {
        if affine.opaque || affine.terms.iter().any(|(digit, _)| digit.var >= 3) {
            return None;
        }
        let mut terms: Vec<(i128, i128)> =
            affine.terms.iter().filter(|(digit, _)| digit.count > 1).map(|(digit, k)| (*k, digit.count)).collect();
        terms.sort_unstable();
        let mut next = bytes;
        for (k, count) in terms {
            if k != next {
                return None;
            }
            next = k.checked_mul(count)?;
        }
        Some((affine.c, affine.c.checked_add(next)?))
    }

    /// The region holding `address`, by index.
    fn region(&self, address: i128) -> Option<usize> {
        let index = self.regions.partition_point(|&(start, _)| start as i128 <= address);
        (index > 0 && address < self.regions[index - 1].1 as i128).then(|| index - 1)
    }
}

/// Where one checked access goes at a launch.
enum Target {
    /// Region N, at an offset from its start.
    Region(usize, Affine),
    /// The block's shared memory, at an offset.
    Shared(Affine),
    /// Its thread's stack, proved inside its slot or not.
    Stack(bool),
    Anywhere,
}

/// The guards and unshadowed memory of a launch of a build with `facts`.
pub(crate) fn plan(facts: &Facts, shape: &Shape<'_>) -> Plan {
    let mut plan = Plan {
        guards: vec![SimGuard::NEVER; shape.sites],
        unshadowed_shared: Vec::new(),
        unshadowed_regions: vec![false; shape.regions.len()],
    };
    let raw: Vec<Target> = facts.checked.iter().map(|checked| target(checked, shape)).collect();
    let forms: Vec<&Affine> = raw
        .iter()
        .filter_map(|target| match target {
            Target::Region(_, form) | Target::Shared(form) => Some(form),
            _ => None,
        })
        .collect();
    let cuts = Cuts::new(&forms, shape);
    let targets: Vec<Target> = raw
        .iter()
        .map(|target| match target {
            Target::Region(index, form) => Target::Region(*index, cuts.refine(form)),
            Target::Shared(form) => Target::Shared(cuts.refine(form)),
            Target::Stack(proved) => Target::Stack(*proved),
            Target::Anywhere => Target::Anywhere,
        })
        .collect();
    // Each site's guard, as its copies agree on it (`None`: not yet given; NEVER wins).
    let mut given: Vec<Option<SimGuard>> = vec![None; shape.sites];
    let mut give = |site: u32, guard: SimGuard| {
        if let Some(slot) = given.get_mut(site as usize) {
            *slot = match *slot {
                None => Some(guard),
                Some(old) if old == guard => Some(old),
                Some(_) => Some(SimGuard::NEVER),
            };
        }
    };
    let anywhere = targets.iter().any(|target| matches!(target, Target::Anywhere));
    for (checked, target) in facts.checked.iter().zip(&targets) {
        match target {
            Target::Stack(true) => give(checked.site, SimGuard { low: 0, high: usize::MAX }),
            Target::Stack(false) | Target::Anywhere => give(checked.site, SimGuard::NEVER),
            _ => {}
        }
    }
    // Global memory, region by region.
    for (index, &(start, end)) in shape.regions.iter().enumerate() {
        let on: Vec<(&Checked, &Affine)> = facts
            .checked
            .iter()
            .zip(&targets)
            .filter_map(|(checked, target)| match target {
                Target::Region(at, affine) if *at == index => Some((checked, affine)),
                _ => None,
            })
            .collect();
        let proved = !anywhere && region_proved(&on, shape, &cuts);
        let guard = if proved { SimGuard { low: start, high: end } } else { SimGuard::NEVER };
        for (checked, _) in &on {
            give(checked.site, guard);
        }
        plan.unshadowed_regions[index] = proved && !on.is_empty();
    }
    // Shared memory, array by array.
    let shared_known = !anywhere && !facts.opaque_calls;
    for &(offset, length) in shape.shared_arrays {
        let (start, end) = (i128::from(offset), i128::from(offset + length));
        let on: Vec<(usize, &Checked, &Affine)> = facts
            .checked
            .iter()
            .zip(&targets)
            .enumerate()
            .filter_map(|(index, (checked, target))| match target {
                Target::Shared(affine) if (start..end).contains(&lowest(affine, shape)) => {
                    Some((index, checked, affine))
                }
                _ => None,
            })
            .collect();
        let proved = shared_known && array_proved(facts, &targets, &on, (start, end), shape, &cuts);
        let guard = if proved {
            SimGuard {
                low: shape.shared_start + offset as usize,
                high: shape.shared_start + (offset + length) as usize,
            }
        } else {
            SimGuard::NEVER
        };
        for (_, checked, _) in &on {
            give(checked.site, guard);
        }
        if proved && !on.is_empty() {
            plan.unshadowed_shared.push((offset as usize, (offset + length) as usize));
        }
    }
    // A shared access outside every array has no proof.
    for (checked, target) in facts.checked.iter().zip(&targets) {
        if let Target::Shared(affine) = target {
            let at = lowest(affine, shape);
            if !shape
                .shared_arrays
                .iter()
                .any(|&(offset, length)| (i128::from(offset)..i128::from(offset + length)).contains(&at))
            {
                give(checked.site, SimGuard::NEVER);
            }
        }
    }
    plan.guards = given.into_iter().map(|guard| guard.unwrap_or(SimGuard::NEVER)).collect();
    plan
}

/// The lowest byte the known part of an offset reaches: which array an access is of.
fn lowest(affine: &Affine, shape: &Shape<'_>) -> i128 {
    shape.range(affine).0
}

fn target(checked: &Checked, shape: &Shape<'_>) -> Target {
    // The root's address, and the region holding it (the block's shared memory has none).
    let in_region = |base: i128| {
        let index = shape.region(base)?;
        let start = shape.regions[index].0 as i128;
        let offset = shape.evaluate(base, &checked.offset);
        Some(Target::Region(index, offset.plus(Affine::constant(base - start), 1)))
    };
    match &checked.root {
        Root::Param(word) => {
            shape.words.get(*word as usize).and_then(|&base| in_region(i128::from(base))).unwrap_or(Target::Anywhere)
        }
        Root::Global(symbol) => {
            let at = shape.globals.iter().find(|(name, _)| name == symbol).map(|&(_, at)| at as i128);
            at.and_then(in_region).unwrap_or(Target::Anywhere)
        }
        Root::Shared => Target::Shared(shape.evaluate(shape.shared_start as i128, &checked.offset)),
        Root::Stack(size) => {
            let offset = shape.evaluate(0, &checked.offset);
            let (low, high) = shape.range(&offset);
            Target::Stack(!offset.opaque && low >= 0 && high.saturating_add(checked.bytes as i128) <= i128::from(*size))
        }
        Root::Unknown => Target::Anywhere,
    }
}

fn writes(checked: &Checked) -> bool {
    checked.access != Access::Read
}

/// Whether two accesses of one memory agree on a form that keeps apart the variables in
/// `apart` (blocks for global memory, threads for shared memory).
fn same_form(
    a: (&Checked, &Affine),
    b: (&Checked, &Affine),
    apart: std::ops::Range<usize>,
    shape: &Shape<'_>,
    cuts: &Cuts,
) -> bool {
    a.1 == b.1 && a.0.bytes == b.0.bytes && shape.separates(a.1, cuts, apart, a.0.bytes as i128)
}

/// No two blocks meet at a byte of the region with one writing, not both atomically.
fn region_proved(on: &[(&Checked, &Affine)], shape: &Shape<'_>, cuts: &Cuts) -> bool {
    if on.iter().all(|(checked, _)| checked.access == Access::Read)
        || on.iter().all(|(checked, _)| checked.access == Access::Atomic)
    {
        return true;
    }
    let first = on[0];
    on.iter().all(|&other| same_form(first, other, 3..6, shape, cuts))
}

/// No two threads of a block meet at a byte of the array between two barriers with one
/// writing, and every read follows a barrier all threads reached after writing all of it.
fn array_proved(
    facts: &Facts,
    targets: &[Target],
    on: &[(usize, &Checked, &Affine)],
    (start, end): (i128, i128),
    shape: &Shape<'_>,
    cuts: &Cuts,
) -> bool {
    let meet = |a: &Checked, b: &Checked| match (&a.origins, &b.origins) {
        (Some(a), Some(b)) => a.iter().any(|origin| b.contains(origin)),
        _ => true,
    };
    for (position, &(_, a, a_form)) in on.iter().enumerate() {
        for &(_, b, b_form) in &on[position..] {
            let conflict = (writes(a) || writes(b)) && !(a.access == Access::Atomic && b.access == Access::Atomic);
            if conflict && meet(a, b) && !same_form((a, a_form), (b, b_form), 0..3, shape, cuts) {
                return false;
            }
        }
    }
    let covering = |written: &usize| {
        let Some(Target::Shared(affine)) = targets.get(*written) else { return false };
        let checked = &facts.checked[*written];
        shape.covers(affine, checked.bytes as i128).is_some_and(|(low, high)| low <= start && end <= high)
    };
    on.iter().filter(|(_, checked, _)| checked.access == Access::Read).all(|(_, checked, _)| {
        checked.passed.as_ref().is_some_and(|passed| {
            passed
                .iter()
                .any(|barrier| facts.written_before.get(barrier).is_some_and(|written| written.iter().any(covering)))
        })
    })
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeSet, HashMap};

    use super::*;
    use crate::gpu::sim::facts::ENTRY;

    fn boxed(expr: Expr) -> Box<Expr> {
        Box::new(expr)
    }

    /// `4·(ctaid.x·ntid.x + tid.x)`: a thread's float of a grid-wide array.
    fn global_index() -> Expr {
        let index = Expr::Add(
            boxed(Expr::Mul(boxed(Expr::Register(3)), boxed(Expr::Register(6)), 32)),
            boxed(Expr::Register(0)),
            32,
        );
        Expr::Mul(boxed(Expr::Sext(boxed(index), 32)), boxed(Expr::Const(4)), 64)
    }

    fn access(site: u32, access: Access, root: Root, offset: Expr, origins: &[u32], passed: &[u32]) -> Checked {
        Checked {
            site,
            access,
            bytes: 4,
            root,
            offset,
            origins: Some(origins.iter().copied().collect()),
            passed: Some(passed.iter().copied().collect()),
        }
    }

    fn shape<'a>(
        words: &'a [u64],
        regions: &'a [(usize, usize)],
        shared: &'a [(u64, u64)],
        grid: i64,
        block: i64,
    ) -> Shape<'a> {
        Shape {
            dimensions: [grid, 1, 1, block, 1, 1],
            words,
            regions,
            globals: &[],
            shared_start: 1 << 20,
            shared_arrays: shared,
            sites: 8,
        }
    }

    #[test]
    fn a_vector_add_needs_no_shadow_and_a_shared_slot_written_by_every_block_does() {
        let (a, b, c) = (0x10000usize, 0x20000usize, 0x30000usize);
        let regions = [(a, a + 4096), (b, b + 4096), (c, c + 4096)];
        let words = [a as u64, b as u64, c as u64];
        let facts = Facts {
            checked: vec![
                access(0, Access::Read, Root::Param(0), global_index(), &[ENTRY], &[]),
                access(1, Access::Read, Root::Param(1), global_index(), &[ENTRY], &[]),
                access(2, Access::Write, Root::Param(2), global_index(), &[ENTRY], &[]),
            ],
            ..Facts::default()
        };
        let made = plan(&facts, &shape(&words, &regions, &[], 4, 256));
        assert_eq!(made.guards[2], SimGuard { low: c, high: c + 4096 });
        assert_eq!(made.unshadowed_regions, vec![true; 3]);
        // c[0] written by every block: a race the proofs must leave to the shadow.
        let facts = Facts {
            checked: vec![access(0, Access::Write, Root::Param(2), Expr::Const(0), &[ENTRY], &[])],
            ..Facts::default()
        };
        let made = plan(&facts, &shape(&words, &regions, &[], 4, 256));
        assert_eq!(made.guards[0], SimGuard::NEVER);
        assert!(!made.unshadowed_regions[2]);
        // c[i + 1] read beside c[i] written: blocks meet at their edges.
        let shifted = Expr::Add(boxed(global_index()), boxed(Expr::Const(4)), 64);
        let facts = Facts {
            checked: vec![
                access(0, Access::Read, Root::Param(2), shifted, &[ENTRY], &[]),
                access(1, Access::Write, Root::Param(2), global_index(), &[ENTRY], &[]),
            ],
            ..Facts::default()
        };
        assert!(!plan(&facts, &shape(&words, &regions, &[], 4, 256)).unshadowed_regions[2]);
    }

    #[test]
    fn a_shared_reverse_is_proved_only_with_its_barrier_and_its_full_write() {
        let own = Expr::Mul(boxed(Expr::Sext(boxed(Expr::Register(0)), 32)), boxed(Expr::Const(4)), 64);
        let mirrored = Expr::Mul(
            boxed(Expr::Sext(boxed(Expr::Sub(boxed(Expr::Const(63)), boxed(Expr::Register(0)), 32)), 32)),
            boxed(Expr::Const(4)),
            64,
        );
        let shared = [(0, 256)];
        let with_barrier = |origins: &[u32], written: &[usize]| Facts {
            checked: vec![
                access(0, Access::Write, Root::Shared, own.clone(), &[ENTRY], &[]),
                access(1, Access::Read, Root::Shared, mirrored.clone(), origins, &[5]),
            ],
            written_before: HashMap::from([(5, written.iter().copied().collect::<BTreeSet<usize>>())]),
            opaque_calls: false,
        };
        let proved = plan(&with_barrier(&[5], &[0]), &shape(&[], &[], &shared, 1, 64));
        assert_eq!(proved.unshadowed_shared, vec![(0, 256)]);
        assert_eq!(proved.guards[1], SimGuard { low: 1 << 20, high: (1 << 20) + 256 });
        // No barrier between the write and the read: they share an interval.
        assert!(plan(&with_barrier(&[ENTRY], &[0]), &shape(&[], &[], &shared, 1, 64)).unshadowed_shared.is_empty());
        // The write not made on every path to the barrier (under a condition): initcheck's.
        assert!(plan(&with_barrier(&[5], &[]), &shape(&[], &[], &shared, 1, 64)).unshadowed_shared.is_empty());
        // Half the block writes: the array is not covered.
        assert!(plan(&with_barrier(&[5], &[0]), &shape(&[], &[], &shared, 1, 32)).unshadowed_shared.is_empty());
    }

    #[test]
    fn thread_ids_split_by_div_and_rem_are_digits_of_one_id() {
        // A 16×16 tile stored row by row from (tid / 16, tid % 16), then read transposed after
        // a barrier: the store covers the tile, the two accesses are in different intervals.
        let tid = || boxed(Expr::Register(0));
        let row = || Expr::Div(tid(), 16);
        let col = || Expr::Rem(tid(), 16);
        let floats = |index: Expr| Expr::Mul(boxed(Expr::Sext(boxed(index), 32)), boxed(Expr::Const(4)), 64);
        let at = |major: Expr, minor: Expr| {
            floats(Expr::Add(boxed(Expr::Mul(boxed(major), boxed(Expr::Const(16)), 32)), boxed(minor), 32))
        };
        let facts = |read: Expr| Facts {
            checked: vec![
                access(0, Access::Write, Root::Shared, at(row(), col()), &[ENTRY], &[]),
                access(1, Access::Read, Root::Shared, read, &[5], &[5]),
            ],
            written_before: HashMap::from([(5, BTreeSet::from([0]))]),
            opaque_calls: false,
        };
        let shared = [(0, 1024)];
        let proved = plan(&facts(at(col(), row())), &shape(&[], &[], &shared, 1, 256));
        assert_eq!(proved.unshadowed_shared, vec![(0, 1024)]);
        // The same form written as tid itself: equal offsets, equal forms.
        let direct = Facts {
            checked: vec![
                access(0, Access::Write, Root::Shared, at(row(), col()), &[ENTRY], &[]),
                access(1, Access::Write, Root::Shared, floats(Expr::Register(0)), &[ENTRY], &[]),
                access(2, Access::Read, Root::Shared, at(col(), row()), &[5], &[5]),
            ],
            written_before: HashMap::from([(5, BTreeSet::from([0, 1]))]),
            opaque_calls: false,
        };
        assert_eq!(plan(&direct, &shape(&[], &[], &shared, 1, 256)).unshadowed_shared, vec![(0, 1024)]);
        // 128 threads fill half the tile; 17 does not divide 256 (no digits: opaque).
        assert!(plan(&facts(at(col(), row())), &shape(&[], &[], &shared, 1, 128)).unshadowed_shared.is_empty());
        let odd = Facts {
            checked: vec![access(0, Access::Write, Root::Shared, floats(Expr::Rem(tid(), 17)), &[ENTRY], &[])],
            ..Facts::default()
        };
        assert!(plan(&odd, &shape(&[], &[], &shared, 1, 256)).unshadowed_shared.is_empty());
    }

    #[test]
    fn products_past_64_bits_are_opaque_not_a_panic() {
        // (n·n)·(n·n) of 64-bit argument words: past what a 64-bit multiply keeps.
        let word = || boxed(Expr::Word(0));
        let square = Expr::Mul(word(), word(), 64);
        let fourth = Expr::Mul(boxed(square.clone()), boxed(square), 64);
        let huge = Expr::Mul(boxed(fourth.clone()), boxed(fourth), 64);
        let facts =
            Facts { checked: vec![access(0, Access::Write, Root::Param(1), huge, &[ENTRY], &[])], ..Facts::default() };
        let words = [u64::MAX / 3, 0x10000];
        let regions = [(0x10000, 0x20000)];
        let made = plan(&facts, &shape(&words, &regions, &[], 4, 256));
        assert_eq!(made.guards[0], SimGuard::NEVER);
    }
}
