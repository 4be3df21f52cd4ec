//! What the simulator's proofs (`proofs`) read from a build's optimised code when it is built:
//! each checked access's address, as a root (a pointer argument, the block's shared memory, a
//! device global, the thread's stack) plus an offset expression in the special registers, the
//! argument words and constants (anything else is opaque); and, by a dataflow over the code
//! the launch starts in, the barriers each access may follow with no barrier between (its
//! *origins*: two accesses can share a barrier interval only if theirs meet), the barriers
//! every path to it passed, and for each barrier the writes every path to it made.

use std::collections::{BTreeSet, HashMap};

use inkwell::module::Module;
use llvm_sys::core::*;
use llvm_sys::prelude::{LLVMBasicBlockRef, LLVMTypeRef, LLVMValueRef};
use llvm_sys::target::{LLVMABISizeOfType, LLVMGetModuleDataLayout, LLVMOffsetOfElement, LLVMTargetDataRef};
use llvm_sys::{LLVMOpcode, LLVMTypeKind};

use crate::abi::{sim_check_site, Access, SimFrame, SIM_CHECK, SIM_SYNC};

/// An integer computed by the kernel, as far as it can be read back.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Expr {
    Const(i128),
    /// A slot of `SimFrame::index`: `tid`, `ctaid`, `ntid`, `nctaid`, each x y z.
    Register(u8),
    /// An argument word of the launch, as a 64-bit integer.
    Word(u32),
    /// An operation of `bits`-bit integers.
    Add(Box<Expr>, Box<Expr>, u32),
    Sub(Box<Expr>, Box<Expr>, u32),
    Mul(Box<Expr>, Box<Expr>, u32),
    Shl(Box<Expr>, u32, u32),
    /// Conversions from a `bits`-bit integer (extensions) or to one (truncation).
    Sext(Box<Expr>, u32),
    Zext(Box<Expr>, u32),
    Trunc(Box<Expr>, u32),
    /// Division and remainder by a positive constant (of a value that is not negative, or the
    /// proofs take it as opaque).
    Div(Box<Expr>, i128),
    Rem(Box<Expr>, i128),
    /// The offset moved down so that the root's address plus it is a multiple of `-mask`
    /// (`(inttoptr (and (ptrtoint P) MASK))`, how staged kernels show LLVM an alignment).
    AlignDown(Box<Expr>, i128),
    /// Anything else: a loaded value, a loop's counter, a division.
    Opaque,
}

/// What an address is an offset into.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Root {
    /// The pointer of argument word N.
    Param(u32),
    Shared,
    /// A device global, by symbol.
    Global(String),
    /// A stack slot of N bytes.
    Stack(u64),
    Unknown,
}

/// The barrier interval's start that is the kernel's own start.
pub(crate) const ENTRY: u32 = u32::MAX;

/// One checked access in the optimised code (a site can have several, where LLVM copied code).
#[derive(Clone, Debug)]
pub(crate) struct Checked {
    pub site: u32,
    pub access: Access,
    pub bytes: u64,
    pub root: Root,
    pub offset: Expr,
    /// The barrier sites (and `ENTRY`) it may follow with no barrier between; `None`: unknown.
    pub origins: Option<BTreeSet<u32>>,
    /// The barrier sites every path to it passed; `None`: unknown.
    pub passed: Option<BTreeSet<u32>>,
}

/// A build's facts: its checked accesses, and for each barrier site the writes (indices in
/// `checked`) every path to it (to every copy of it) made.
#[derive(Debug, Default)]
pub(crate) struct Facts {
    pub checked: Vec<Checked>,
    pub written_before: HashMap<u32, BTreeSet<usize>>,
    /// The kernel calls code of its build that was not inlined: intervals are not known.
    pub opaque_calls: bool,
}

/// A nested expression's size past which it is opaque (a bound on the work per address).
const BUDGET: u32 = 256;

struct Reader {
    data: LLVMTargetDataRef,
    entry: LLVMValueRef,
    /// The call sites of each function of the build.
    callers: HashMap<LLVMValueRef, Vec<LLVMValueRef>>,
    /// Pointer PHIs being read (a loop's pointer refers back to itself).
    visiting: BTreeSet<usize>,
    budget: u32,
}

/// The word slot of a frame field, or of the entry's argument words.
enum Base {
    Frame,
    Words,
}

enum Pointer {
    Base(Base, Expr),
    Rooted(Root, Expr),
    /// A PHI's own value met again while reading it.
    Cycle,
}

fn name_of(value: LLVMValueRef) -> String {
    let mut length = 0;
    // SAFETY: a valid value; LLVM returns its name and length.
    let name = unsafe { LLVMGetValueName2(value, &mut length) };
    if name.is_null() {
        return String::new();
    }
    // SAFETY: LLVM's name is `length` bytes long.
    let bytes = unsafe { std::slice::from_raw_parts(name as *const u8, length) };
    String::from_utf8_lossy(bytes).into_owned()
}

fn int_width(value: LLVMValueRef) -> u32 {
    // SAFETY: a valid value.
    unsafe {
        let ty = LLVMTypeOf(value);
        if LLVMGetTypeKind(ty) == LLVMTypeKind::LLVMIntegerTypeKind {
            LLVMGetIntTypeWidth(ty)
        } else {
            64
        }
    }
}

fn constant(value: LLVMValueRef) -> Option<i128> {
    // SAFETY: a valid value; only a constant integer's value is read.
    unsafe {
        if LLVMIsAConstantInt(value).is_null() {
            return None;
        }
        let width = LLVMGetIntTypeWidth(LLVMTypeOf(value));
        (width <= 64).then(|| i128::from(LLVMConstIntGetSExtValue(value)))
    }
}

fn opcode(value: LLVMValueRef) -> Option<LLVMOpcode> {
    // SAFETY: a valid value.
    unsafe {
        if !LLVMIsAInstruction(value).is_null() {
            Some(LLVMGetInstructionOpcode(value))
        } else if !LLVMIsAConstantExpr(value).is_null() {
            Some(LLVMGetConstOpcode(value))
        } else {
            None
        }
    }
}

fn operand(value: LLVMValueRef, index: u32) -> LLVMValueRef {
    // SAFETY: callers ask only for operands the instruction has.
    unsafe { LLVMGetOperand(value, index) }
}

impl Reader {
    fn spend(&mut self) -> bool {
        if self.budget == 0 {
            return false;
        }
        self.budget -= 1;
        true
    }

    /// The value an argument of a function of the build was called with, when it has one
    /// call; the entry's own arguments are the words and the frame.
    fn argument(&self, value: LLVMValueRef) -> Result<LLVMValueRef, Option<Base>> {
        // SAFETY: `value` is an argument.
        let function = unsafe { LLVMGetParamParent(value) };
        // SAFETY: as above.
        let count = unsafe { LLVMCountParams(function) };
        // SAFETY: `index` is below the function's count of parameters.
        let index = (0..count).find(|&index| unsafe { LLVMGetParam(function, index) } == value).ok_or(None)?;
        if function == self.entry {
            return Err(match index {
                0 => Some(Base::Words),
                1 => Some(Base::Frame),
                _ => None,
            });
        }
        match self.callers.get(&function).map(Vec::as_slice) {
            Some([call]) => Ok(operand(*call, index)),
            _ => Err(None),
        }
    }

    fn pointer(&mut self, value: LLVMValueRef) -> Pointer {
        let unknown = Pointer::Rooted(Root::Unknown, Expr::Opaque);
        if !self.spend() {
            return unknown;
        }
        // SAFETY: `value` is a valid value of the module; each test only asks what it is.
        unsafe {
            if !LLVMIsAArgument(value).is_null() {
                return match self.argument(value) {
                    Ok(passed) => self.pointer(passed),
                    Err(Some(base)) => Pointer::Base(base, Expr::Const(0)),
                    Err(None) => unknown,
                };
            }
            if !LLVMIsAGlobalVariable(value).is_null() {
                return Pointer::Rooted(Root::Global(name_of(value)), Expr::Const(0));
            }
            if !LLVMIsAAllocaInst(value).is_null() {
                let ty = LLVMGetAllocatedType(value);
                let count = constant(operand(value, 0)).unwrap_or(1).max(1) as u64;
                return Pointer::Rooted(Root::Stack(LLVMABISizeOfType(self.data, ty) * count), Expr::Const(0));
            }
        }
        match opcode(value) {
            Some(LLVMOpcode::LLVMGetElementPtr) => self.element(value),
            Some(LLVMOpcode::LLVMBitCast | LLVMOpcode::LLVMAddrSpaceCast) => self.pointer(operand(value, 0)),
            Some(LLVMOpcode::LLVMIntToPtr) => self.integer_pointer(operand(value, 0)),
            Some(LLVMOpcode::LLVMLoad) => match self.pointer(operand(value, 0)) {
                Pointer::Base(Base::Frame, Expr::Const(offset))
                    if offset == std::mem::offset_of!(SimFrame, shared) as i128 =>
                {
                    Pointer::Rooted(Root::Shared, Expr::Const(0))
                }
                Pointer::Base(Base::Words, Expr::Const(offset)) if offset >= 0 && offset % 8 == 0 => {
                    Pointer::Rooted(Root::Param((offset / 8) as u32), Expr::Const(0))
                }
                _ => unknown,
            },
            Some(LLVMOpcode::LLVMPHI | LLVMOpcode::LLVMSelect) => self.merge(value),
            _ => unknown,
        }
    }

    /// `inttoptr`'s pointer: an argument word, a pointer through `ptrtoint`, or one aligned
    /// down by a mask of low bits.
    fn integer_pointer(&mut self, value: LLVMValueRef) -> Pointer {
        match opcode(value) {
            Some(LLVMOpcode::LLVMPtrToInt) => return self.pointer(operand(value, 0)),
            Some(LLVMOpcode::LLVMAnd) => {
                let (left, right) = (operand(value, 0), operand(value, 1));
                let (inner, mask) = match (constant(left), constant(right)) {
                    (_, Some(mask)) => (left, mask),
                    (Some(mask), _) => (right, mask),
                    _ => return Pointer::Rooted(Root::Unknown, Expr::Opaque),
                };
                // Only low bits cleared: -2^k.
                let aligns = mask < 0 && (-mask) & (-mask - 1) == 0;
                if aligns && opcode(inner) == Some(LLVMOpcode::LLVMPtrToInt) {
                    return match self.pointer(operand(inner, 0)) {
                        Pointer::Rooted(root, offset) => Pointer::Rooted(root, Expr::AlignDown(Box::new(offset), mask)),
                        _ => Pointer::Rooted(Root::Unknown, Expr::Opaque),
                    };
                }
            }
            _ => {}
        }
        match self.integer(value) {
            Expr::Word(word) => Pointer::Rooted(Root::Param(word), Expr::Const(0)),
            _ => Pointer::Rooted(Root::Unknown, Expr::Opaque),
        }
    }

    /// A PHI's or select's pointer: its inputs' root, if they have one, at an opaque offset.
    fn merge(&mut self, value: LLVMValueRef) -> Pointer {
        let key = value as usize;
        if !self.visiting.insert(key) {
            return Pointer::Cycle;
        }
        // SAFETY: a PHI's incoming values, or a select's two choices (operands 1 and 2).
        let inputs: Vec<LLVMValueRef> = unsafe {
            if opcode(value) == Some(LLVMOpcode::LLVMPHI) {
                (0..LLVMCountIncoming(value)).map(|index| LLVMGetIncomingValue(value, index)).collect()
            } else {
                vec![operand(value, 1), operand(value, 2)]
            }
        };
        let mut root = None;
        let mut agreed = true;
        for input in inputs {
            match self.pointer(input) {
                Pointer::Cycle => {}
                Pointer::Rooted(found, _)
                    if found != Root::Unknown && root.as_ref().is_none_or(|root| *root == found) =>
                {
                    root = Some(found);
                }
                _ => agreed = false,
            }
        }
        self.visiting.remove(&key);
        match root {
            Some(root) if agreed => Pointer::Rooted(root, Expr::Opaque),
            _ => Pointer::Rooted(Root::Unknown, Expr::Opaque),
        }
    }

    /// A `getelementptr`: its base's root, at the base's offset plus the indices' bytes.
    fn element(&mut self, value: LLVMValueRef) -> Pointer {
        let base = self.pointer(operand(value, 0));
        // SAFETY: a GEP (instruction or constant) and its operands and types.
        let mut offset = unsafe {
            let mut ty: LLVMTypeRef = LLVMGetGEPSourceElementType(value);
            let mut offset = Expr::Const(0);
            let count = LLVMGetNumOperands(value) as u32;
            for index in 1..count {
                let step = operand(value, index);
                if index > 1 {
                    match LLVMGetTypeKind(ty) {
                        LLVMTypeKind::LLVMStructTypeKind => {
                            let Some(field) = constant(step) else {
                                return Pointer::Rooted(Root::Unknown, Expr::Opaque);
                            };
                            let at = LLVMOffsetOfElement(self.data, ty, field as u32);
                            offset = Expr::Add(Box::new(offset), Box::new(Expr::Const(i128::from(at))), 64);
                            ty = LLVMStructGetTypeAtIndex(ty, field as u32);
                            continue;
                        }
                        LLVMTypeKind::LLVMArrayTypeKind | LLVMTypeKind::LLVMVectorTypeKind => {
                            ty = LLVMGetElementType(ty)
                        }
                        _ => return Pointer::Rooted(Root::Unknown, Expr::Opaque),
                    }
                }
                let size = i128::from(LLVMABISizeOfType(self.data, ty));
                let mut step = self.integer(step);
                let width = int_width(operand(value, index));
                if width < 64 {
                    step = Expr::Sext(Box::new(step), width);
                }
                let bytes = Expr::Mul(Box::new(step), Box::new(Expr::Const(size)), 64);
                offset = Expr::Add(Box::new(offset), Box::new(bytes), 64);
            }
            offset
        };
        match base {
            Pointer::Base(base, start) => {
                offset = Expr::Add(Box::new(start), Box::new(offset), 64);
                Pointer::Base(base, simplify(offset))
            }
            Pointer::Rooted(root, start) => {
                Pointer::Rooted(root, simplify(Expr::Add(Box::new(start), Box::new(offset), 64)))
            }
            Pointer::Cycle => Pointer::Cycle,
        }
    }

    fn integer(&mut self, value: LLVMValueRef) -> Expr {
        if !self.spend() {
            return Expr::Opaque;
        }
        if let Some(value) = constant(value) {
            return Expr::Const(value);
        }
        // SAFETY: a valid value.
        if unsafe { !LLVMIsAArgument(value).is_null() } {
            return match self.argument(value) {
                Ok(passed) => self.integer(passed),
                Err(_) => Expr::Opaque,
            };
        }
        let bits = int_width(value);
        let binary = |reader: &mut Reader| {
            (Box::new(reader.integer(operand(value, 0))), Box::new(reader.integer(operand(value, 1))))
        };
        match opcode(value) {
            Some(LLVMOpcode::LLVMAdd) => {
                let (left, right) = binary(self);
                Expr::Add(left, right, bits)
            }
            Some(LLVMOpcode::LLVMOr) if disjoint(value) => {
                let (left, right) = binary(self);
                Expr::Add(left, right, bits)
            }
            Some(LLVMOpcode::LLVMSub) => {
                let (left, right) = binary(self);
                Expr::Sub(left, right, bits)
            }
            Some(LLVMOpcode::LLVMMul) => {
                let (left, right) = binary(self);
                Expr::Mul(left, right, bits)
            }
            Some(LLVMOpcode::LLVMShl) => match constant(operand(value, 1)) {
                Some(amount @ 0..=62) => Expr::Shl(Box::new(self.integer(operand(value, 0))), amount as u32, bits),
                _ => Expr::Opaque,
            },
            Some(LLVMOpcode::LLVMSDiv | LLVMOpcode::LLVMUDiv) => match constant(operand(value, 1)) {
                Some(divisor) if divisor > 0 => Expr::Div(Box::new(self.integer(operand(value, 0))), divisor),
                _ => Expr::Opaque,
            },
            Some(LLVMOpcode::LLVMSRem | LLVMOpcode::LLVMURem) => match constant(operand(value, 1)) {
                Some(divisor) if divisor > 0 => Expr::Rem(Box::new(self.integer(operand(value, 0))), divisor),
                _ => Expr::Opaque,
            },
            Some(LLVMOpcode::LLVMLShr | LLVMOpcode::LLVMAShr) => match constant(operand(value, 1)) {
                Some(amount @ 0..=62) => Expr::Div(Box::new(self.integer(operand(value, 0))), 1 << amount),
                _ => Expr::Opaque,
            },
            // A mask of low bits: the remainder by a power of two.
            Some(LLVMOpcode::LLVMAnd) => match constant(operand(value, 1)) {
                Some(mask) if mask > 0 && mask & (mask + 1) == 0 => {
                    Expr::Rem(Box::new(self.integer(operand(value, 0))), mask + 1)
                }
                _ => Expr::Opaque,
            },
            Some(LLVMOpcode::LLVMSExt) => {
                Expr::Sext(Box::new(self.integer(operand(value, 0))), int_width(operand(value, 0)))
            }
            Some(LLVMOpcode::LLVMZExt) => {
                Expr::Zext(Box::new(self.integer(operand(value, 0))), int_width(operand(value, 0)))
            }
            Some(LLVMOpcode::LLVMTrunc) => Expr::Trunc(Box::new(self.integer(operand(value, 0))), bits),
            Some(LLVMOpcode::LLVMLoad) => match self.pointer(operand(value, 0)) {
                Pointer::Base(Base::Frame, Expr::Const(offset))
                    if (0..48).contains(&offset) && offset % 4 == 0 && bits == 32 =>
                {
                    Expr::Register((offset / 4) as u8)
                }
                Pointer::Base(Base::Words, Expr::Const(offset)) if offset >= 0 && offset % 8 == 0 && bits == 64 => {
                    Expr::Word((offset / 8) as u32)
                }
                _ => Expr::Opaque,
            },
            _ => Expr::Opaque,
        }
    }
}

/// Whether an `or` is a disjoint one (its operands share no set bit: an addition).
fn disjoint(value: LLVMValueRef) -> bool {
    // SAFETY: an `or` instruction or constant expression; only an instruction has the flag.
    unsafe { !LLVMIsAInstruction(value).is_null() && LLVMGetIsDisjoint(value) != 0 }
}

/// Folds constant additions (a GEP's zero starts), so that bases compare by value.
fn simplify(expr: Expr) -> Expr {
    match expr {
        Expr::Add(left, right, bits) => match (simplify(*left), simplify(*right)) {
            (Expr::Const(a), Expr::Const(b)) => Expr::Const(a + b),
            (Expr::Const(0), other) | (other, Expr::Const(0)) => other,
            (left, right) => Expr::Add(Box::new(left), Box::new(right), bits),
        },
        Expr::Mul(left, right, bits) => match (simplify(*left), simplify(*right)) {
            (Expr::Const(a), Expr::Const(b)) => Expr::Const(a * b),
            (left, right) => Expr::Mul(Box::new(left), Box::new(right), bits),
        },
        Expr::Sext(inner, bits) => match simplify(*inner) {
            Expr::Const(value) => Expr::Const(value),
            other => Expr::Sext(Box::new(other), bits),
        },
        other => other,
    }
}

/// The items of one of LLVM's lists, from its first (null: none) by its `next`.
fn chain<T>(first: *mut T, next: unsafe extern "C" fn(*mut T) -> *mut T) -> Vec<*mut T> {
    let mut items = Vec::new();
    let mut item = first;
    while !item.is_null() {
        items.push(item);
        // SAFETY: `item` is an item of the list `next` walks.
        item = unsafe { next(item) };
    }
    items
}

fn blocks(function: LLVMValueRef) -> Vec<LLVMBasicBlockRef> {
    // SAFETY: a function's first block.
    chain(unsafe { LLVMGetFirstBasicBlock(function) }, LLVMGetNextBasicBlock)
}

fn instructions(block: LLVMBasicBlockRef) -> Vec<LLVMValueRef> {
    // SAFETY: a block's first instruction.
    chain(unsafe { LLVMGetFirstInstruction(block) }, LLVMGetNextInstruction)
}

/// The function a call instruction calls, if it is a call of a named function.
fn callee(instruction: LLVMValueRef) -> Option<LLVMValueRef> {
    if opcode(instruction) != Some(LLVMOpcode::LLVMCall) {
        return None;
    }
    // SAFETY: a call instruction.
    let called = unsafe { LLVMGetCalledValue(instruction) };
    // SAFETY: as above.
    (unsafe { !LLVMIsAFunction(called).is_null() }).then_some(called)
}

fn has_body(function: LLVMValueRef) -> bool {
    // SAFETY: a function.
    unsafe { LLVMCountBasicBlocks(function) > 0 }
}

/// A barrier-interval state at a point of the kernel: origins (may), barriers passed and
/// writes made (must; `None` while no path reached the point).
#[derive(Clone, Debug, PartialEq, Default)]
struct State {
    origins: BTreeSet<u32>,
    passed: Option<BTreeSet<u32>>,
    written: Option<BTreeSet<usize>>,
}

fn intersect<T: Ord + Copy>(into: &mut Option<BTreeSet<T>>, from: &Option<BTreeSet<T>>) {
    match (into.as_mut(), from) {
        (_, None) => {}
        (None, Some(from)) => *into = Some(from.clone()),
        (Some(into), Some(from)) => into.retain(|item| from.contains(item)),
    }
}

/// Reads `module`'s checked accesses and barriers (`entry` is the build's entry function).
pub(crate) fn analyse(module: &Module<'_>, entry: &str) -> Facts {
    let Some(entry) = module.get_function(entry) else { return Facts::default() };
    let raw_module = module.as_mut_ptr();
    use inkwell::values::AsValueRef;
    let entry = entry.as_value_ref();
    // SAFETY: the module's first function.
    let all = chain(unsafe { LLVMGetFirstFunction(raw_module) }, LLVMGetNextFunction);
    let mut callers: HashMap<LLVMValueRef, Vec<LLVMValueRef>> = HashMap::new();
    for &function in all.iter().filter(|&&function| has_body(function)) {
        for block in blocks(function) {
            for instruction in instructions(block) {
                if let Some(called) = callee(instruction) {
                    callers.entry(called).or_default().push(instruction);
                }
            }
        }
    }
    let is = |function: LLVMValueRef, name: &str| name_of(function) == name;
    let mut reader = Reader {
        // SAFETY: the module's data layout, valid while the module is.
        data: unsafe { LLVMGetModuleDataLayout(raw_module) },
        entry,
        callers,
        visiting: BTreeSet::new(),
        budget: BUDGET,
    };
    // The function whose start is the launch's: the entry, or the kernel it only calls.
    let mut start = entry;
    loop {
        let calls: Vec<LLVMValueRef> = blocks(start).into_iter().flat_map(instructions).filter_map(callee).collect();
        let own: Vec<LLVMValueRef> = calls.iter().copied().filter(|&called| has_body(called)).collect();
        let runtime = calls.iter().any(|&called| is(called, SIM_CHECK) || is(called, SIM_SYNC));
        match own.as_slice() {
            [only] if !runtime && reader.callers.get(only).is_some_and(|calls| calls.len() == 1) => start = *only,
            _ => break,
        }
    }
    let mut facts = Facts::default();
    let mut index_of: HashMap<LLVMValueRef, usize> = HashMap::new();
    for &function in all.iter().filter(|&&function| has_body(function)) {
        for block in blocks(function) {
            for instruction in instructions(block) {
                let Some(called) = callee(instruction) else { continue };
                if !is(called, SIM_CHECK) {
                    continue;
                }
                let (Some(tag), Some(bytes)) = (constant(operand(instruction, 3)), constant(operand(instruction, 2)))
                else {
                    continue;
                };
                let (site, access) = sim_check_site(tag as i64);
                reader.budget = BUDGET;
                let (root, offset) = match reader.pointer(operand(instruction, 1)) {
                    Pointer::Rooted(root, offset) => (root, offset),
                    _ => (Root::Unknown, Expr::Opaque),
                };
                index_of.insert(instruction, facts.checked.len());
                facts.checked.push(Checked {
                    site,
                    access,
                    bytes: bytes as u64,
                    root,
                    offset,
                    origins: None,
                    passed: None,
                });
            }
        }
    }
    intervals(start, &index_of, &mut facts);
    facts
}

/// The dataflow of barrier intervals over `start`, the function the launch starts in.
fn intervals(start: LLVMValueRef, index_of: &HashMap<LLVMValueRef, usize>, facts: &mut Facts) {
    let blocks = blocks(start);
    let number: HashMap<LLVMBasicBlockRef, usize> =
        blocks.iter().enumerate().map(|(index, &block)| (block, index)).collect();
    let mut entry_states: Vec<State> = vec![State::default(); blocks.len()];
    if let Some(first) = entry_states.first_mut() {
        *first =
            State { origins: BTreeSet::from([ENTRY]), passed: Some(BTreeSet::new()), written: Some(BTreeSet::new()) };
    }
    let barrier_site = |instruction: LLVMValueRef| {
        let called = callee(instruction)?;
        (name_of(called) == SIM_SYNC).then(|| constant(operand(instruction, 1)).map_or(ENTRY - 1, |site| site as u32))
    };
    let successors = |block: LLVMBasicBlockRef| -> Vec<usize> {
        // SAFETY: a block's terminator and its successors.
        unsafe {
            let terminator = LLVMGetBasicBlockTerminator(block);
            if terminator.is_null() {
                return Vec::new();
            }
            (0..LLVMGetNumSuccessors(terminator))
                .filter_map(|index| number.get(&LLVMGetSuccessor(terminator, index)).copied())
                .collect()
        }
    };
    // A checked write happens where its paths meet (the call is only its slow path): at the
    // PHI that merges the call's pointer with the guarded one, else at the conditional branch
    // of the call's block's one predecessor, else at the call.
    let mut predecessors: HashMap<LLVMBasicBlockRef, Vec<LLVMBasicBlockRef>> = HashMap::new();
    for &block in &blocks {
        for next in successors(block) {
            predecessors.entry(blocks[next]).or_default().push(block);
        }
    }
    let mut writes_at: HashMap<LLVMValueRef, Vec<usize>> = HashMap::new();
    for (&instruction, &index) in index_of {
        if facts.checked[index].access != Access::Write {
            continue;
        }
        // SAFETY: an instruction's uses, block, and a block's terminator.
        let place = unsafe {
            let block = LLVMGetInstructionParent(instruction);
            let first = LLVMGetFirstUse(instruction);
            let only = if !first.is_null() && LLVMGetNextUse(first).is_null() {
                LLVMGetUser(first)
            } else {
                std::ptr::null_mut()
            };
            let merged = !only.is_null() && opcode(only) == Some(LLVMOpcode::LLVMPHI);
            if merged {
                writes_at.entry(only).or_default().push(index);
                continue;
            }
            match predecessors.get(&block).map(Vec::as_slice) {
                Some([only]) => {
                    let branch = LLVMGetBasicBlockTerminator(*only);
                    let conditional = !branch.is_null()
                        && opcode(branch) == Some(LLVMOpcode::LLVMBr)
                        && LLVMGetNumOperands(branch) == 3;
                    if conditional {
                        branch
                    } else {
                        instruction
                    }
                }
                _ => instruction,
            }
        };
        writes_at.entry(place).or_default().push(index);
    }
    // Runs a block from its entry state; `record` sees each instruction's state before it.
    let transfer = |block: LLVMBasicBlockRef, mut state: State, record: &mut dyn FnMut(LLVMValueRef, &State)| {
        for instruction in instructions(block) {
            record(instruction, &state);
            if let Some(site) = barrier_site(instruction) {
                state.origins = BTreeSet::from([site]);
                if let Some(passed) = state.passed.as_mut() {
                    passed.insert(site);
                }
            } else if let Some(made) = writes_at.get(&instruction) {
                if let Some(written) = state.written.as_mut() {
                    written.extend(made.iter().copied());
                }
            }
        }
        state
    };
    let mut changed = true;
    let mut rounds = 0;
    while changed && rounds < 64 {
        changed = false;
        rounds += 1;
        for (index, &block) in blocks.iter().enumerate() {
            if entry_states[index].passed.is_none() {
                continue;
            }
            let out = transfer(block, entry_states[index].clone(), &mut |_, _| {});
            for next in successors(block) {
                let before = entry_states[next].clone();
                let state = &mut entry_states[next];
                state.origins.extend(out.origins.iter().copied());
                intersect(&mut state.passed, &out.passed);
                intersect(&mut state.written, &out.written);
                changed |= *state != before;
            }
        }
    }
    if changed {
        // No fixed point within the rounds: nothing is known of intervals.
        facts.opaque_calls = true;
        return;
    }
    let mut written_before: HashMap<u32, Option<BTreeSet<usize>>> = HashMap::new();
    let mut opaque_calls = false;
    let mut found: Vec<(usize, State)> = Vec::new();
    for (index, &block) in blocks.iter().enumerate() {
        if entry_states[index].passed.is_none() {
            continue;
        }
        transfer(block, entry_states[index].clone(), &mut |instruction, state| {
            if let Some(site) = barrier_site(instruction) {
                intersect(written_before.entry(site).or_insert(None), &state.written);
            } else if let Some(&checked) = index_of.get(&instruction) {
                found.push((checked, state.clone()));
            } else if callee(instruction).is_some_and(has_body) {
                opaque_calls = true;
            }
        });
    }
    facts.opaque_calls |= opaque_calls;
    for (index, state) in found {
        let checked = &mut facts.checked[index];
        checked.origins = Some(state.origins);
        checked.passed = state.passed;
    }
    facts.written_before =
        written_before.into_iter().map(|(site, written)| (site, written.unwrap_or_default())).collect();
}
