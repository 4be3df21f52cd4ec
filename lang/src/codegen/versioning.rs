//! Loop versioning for `int` arithmetic: which `add`, `sub` and `mul` of a `for` nest cannot
//! overflow, so that a copy of the nest may carry `nsw` on them.
//!
//! `int` arithmetic wraps (docs/language.md §4), and a wrapping 32-bit index keeps LLVM from
//! widening it to 64 bits: `(ptradd b (add (mul k n) j))` sign-extends the sum, which is not the
//! sum of the extended operands when it wraps, so every access needs its own extension and the
//! accesses of one iteration are not known to be adjacent (no vectorisation). Here a nest whose
//! induction variables are canonical gets a guard, evaluated once where the nest starts: the
//! interval, in 64 bits, of every `int` `add`/`sub`/`mul` of the nest whose operands are
//! induction variables, values the nest does not change and literals (or locals the nest sets
//! only to such expressions). When every interval lies within `int`, no operation of the nest
//! can wrap, and the copy with `nsw` runs; else the plain copy does. Both compute the same
//! values, bit for bit: the guard only picks the copy that cannot tell the difference.
//!
//! This module is the analysis, pure and without LLVM; `stmt` emits the guard and the copies.

use std::collections::{HashMap, HashSet};

use crate::tree::{expr_children, visit_body, visit_expr, BinOp, Expr, ExprKind, IntCmp, Place, Stmt};
use crate::types::Ty;

/// How many intervals one guard may compute: past this the nest runs without a copy.
const MAX_BOUNDS: usize = 2048;

/// An interval of `int` values, as the guard computes it in 64 bits; operands are earlier
/// entries of `NestPlan::bounds`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Bound {
    Constant(i64),
    /// A local's value where the guard runs.
    Entry(usize),
    Add(usize, usize),
    Sub(usize, usize),
    Mul(usize, usize),
    /// An induction variable in its loop's body: from its lowest start to the highest bound of
    /// the condition (less one for `lt`).
    Induction {
        start: usize,
        limit: usize,
        strict: bool,
    },
    /// Any value of any of the intervals.
    Union(Vec<usize>),
}

/// What the guard requires of an interval.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Check {
    /// Every value fits in `int`.
    Fits(usize),
    /// No value is negative (a loop's step).
    NotNegative(usize),
}

/// A versioned nest: the guard's intervals and checks, and the operations that get `nsw` in
/// the copy that runs when every check holds.
#[derive(Debug)]
pub(super) struct NestPlan {
    pub bounds: Vec<Bound>,
    pub checks: Vec<Check>,
    /// Identity of the `Expr` nodes (of the nest, which codegen emits twice).
    pub no_wrap: HashSet<*const Expr>,
}

/// The plan for a `for` statement that starts a nest, once its INIT has run; `None` when the
/// loop is not canonical or nothing in it would gain. `address_taken` holds the function's
/// locals whose address `ptr-to` takes: stores through pointers and calls may change them.
pub(super) fn plan_nest(root: &Stmt, address_taken: &HashSet<usize>) -> Option<NestPlan> {
    // INIT ran before the guard: it is not part of the nest.
    let Stmt::For(init, cond, step, body) = root else { return None };
    let mut nest = Nest {
        address_taken,
        loops: Vec::new(),
        writes: HashMap::new(),
        declared: HashSet::new(),
        candidates: Vec::new(),
        unsupported: false,
    };
    let facts = canonical(init.as_deref(), cond, step.as_deref(), body, address_taken, true)?;
    nest.loops.push(facts);
    nest.expression(cond, &[0]);
    nest.statements(body, &[0]);
    if let Some(step) = step {
        nest.expression(step, &[0]);
    }
    if nest.unsupported || nest.candidates.is_empty() {
        return None;
    }
    let mut planner = Planner {
        nest,
        address_taken,
        bounds: Vec::new(),
        checks: Vec::new(),
        expressions: HashMap::new(),
        inductions: HashMap::new(),
        temporaries: HashMap::new(),
    };
    let mut no_wrap = HashSet::new();
    let candidates = std::mem::take(&mut planner.nest.candidates);
    for (expr, context) in candidates {
        if let Some(bound) = planner.bound(expr, &context) {
            planner.checks.push(Check::Fits(bound));
            no_wrap.insert(expr as *const Expr);
        }
        if planner.bounds.len() > MAX_BOUNDS {
            return None;
        }
    }
    if no_wrap.is_empty() {
        return None;
    }
    Some(NestPlan { bounds: planner.bounds, checks: planner.checks, no_wrap })
}

/// A canonical loop: `(for (INIT (lt V B) (set V (add V C))) BODY…)` (or `le`) over an `int`
/// local V that BODY, B and C do not assign, where B and C do not read V or what the loop
/// assigns. While the body runs, V lies between its start and B; C is checked not negative.
pub(crate) struct LoopFacts<'t> {
    variable: usize,
    /// The value INIT gives V. The nest's root may have none: its INIT ran before the guard,
    /// which reads V itself.
    pub(crate) start: Option<&'t Expr>,
    pub(crate) limit: &'t Expr,
    pub(crate) strict: bool,
    pub(crate) step: &'t Expr,
    /// The canonical loops around this one, outermost first (indices into `Nest::loops`).
    context: Vec<usize>,
}

pub(crate) fn canonical<'t>(
    init: Option<&'t Expr>,
    cond: &'t Expr,
    step: Option<&'t Expr>,
    body: &'t [Stmt],
    address_taken: &HashSet<usize>,
    root: bool,
) -> Option<LoopFacts<'t>> {
    let ExprKind::Binary(BinOp::ICmp(compare @ (IntCmp::Slt | IntCmp::Sle)), left, limit) = &cond.kind else {
        return None;
    };
    let ExprKind::Read(Place::Local(variable)) = left.kind else { return None };
    if left.ty != Ty::Int(32) || address_taken.contains(&variable) {
        return None;
    }
    let ExprKind::Set(Place::Local(stepped), increment) = &step?.kind else { return None };
    let ExprKind::Binary(BinOp::Add, current, amount) = &increment.kind else { return None };
    if *stepped != variable || !matches!(current.kind, ExprKind::Read(Place::Local(read)) if read == variable) {
        return None;
    }
    // The root's INIT ran before the guard, which may read the variable instead.
    let start = match init {
        Some(Expr { kind: ExprKind::Set(Place::Local(set), start), .. })
            if *set == variable && !reads(start, variable) =>
        {
            Some(start.as_ref())
        }
        _ if root => None,
        _ => return None,
    };
    let mut written = HashSet::new();
    written_in_expr(cond, &mut written);
    written_in_expr(amount, &mut written);
    written_in(body, &mut written);
    if written.contains(&variable) {
        return None;
    }
    written.insert(variable);
    let mut read = HashSet::new();
    read_in_expr(limit, &mut read);
    read_in_expr(amount, &mut read);
    if read.iter().any(|local| written.contains(local)) {
        return None;
    }
    Some(LoopFacts { variable, start, limit, strict: *compare == IntCmp::Slt, step: amount, context: Vec::new() })
}

/// The locals the statements assign or declare (a `declare` zeroes its local).
fn written_in(body: &[Stmt], written: &mut HashSet<usize>) {
    let mut declared = Vec::new();
    visit_body(
        body,
        &mut |stmt| {
            if let Stmt::Declare(local) = stmt {
                declared.push(*local);
            }
        },
        &mut |expr| note_write(expr, written),
    );
    written.extend(declared);
}

/// The locals an expression assigns, its operands included.
fn written_in_expr(expr: &Expr, written: &mut HashSet<usize>) {
    visit_expr(expr, &mut |expr| note_write(expr, written));
}

/// The local this one expression (not its operands) assigns.
fn note_write(expr: &Expr, written: &mut HashSet<usize>) {
    match &expr.kind {
        ExprKind::Set(Place::Local(local), _) => {
            written.insert(*local);
        }
        // A launch's hidden locals are set by the launch itself.
        _ => {
            if let Some(launch) = crate::tree::launched(expr) {
                written.extend(launch.arg_locals.iter().flatten());
            }
        }
    }
}

fn reads(expr: &Expr, local: usize) -> bool {
    let mut read = HashSet::new();
    read_in_expr(expr, &mut read);
    read.contains(&local)
}

fn read_in_expr(expr: &Expr, read: &mut HashSet<usize>) {
    visit_expr(expr, &mut |expr| {
        if let ExprKind::Read(Place::Local(local)) = expr.kind {
            read.insert(local);
        }
    });
}

/// A value a nest gives a local: an expression (evaluated among these loops) or zero.
enum Write<'t> {
    Value(&'t Expr, Vec<usize>),
    Zero,
}

/// What a walk over the nest found.
struct Nest<'t, 'a> {
    address_taken: &'a HashSet<usize>,
    loops: Vec<LoopFacts<'t>>,
    /// Every value the nest gives each local it assigns.
    writes: HashMap<usize, Vec<Write<'t>>>,
    /// Locals the nest declares: they are zeroed before any read of theirs in the nest, so
    /// their value where the guard runs is never read (nor loaded: it may be undefined).
    declared: HashSet<usize>,
    /// Every `int` `add`/`sub`/`mul`, with the canonical loops around it.
    candidates: Vec<(&'t Expr, Vec<usize>)>,
    /// Brilisp jumps or a GPU launch: no copy is made.
    unsupported: bool,
}

impl<'t> Nest<'t, '_> {
    fn statements(&mut self, body: &'t [Stmt], context: &[usize]) {
        for stmt in body {
            self.statement(stmt, context);
        }
    }

    fn statement(&mut self, stmt: &'t Stmt, context: &[usize]) {
        match stmt {
            Stmt::Expr(expr) | Stmt::Ret(Some(expr)) => self.expression(expr, context),
            Stmt::Declare(local) => {
                self.declared.insert(*local);
                self.writes.entry(*local).or_default().push(Write::Zero);
            }
            Stmt::If(cond, then, otherwise) => {
                self.expression(cond, context);
                self.statement(then, context);
                if let Some(otherwise) = otherwise {
                    self.statement(otherwise, context);
                }
            }
            Stmt::While(cond, body) => {
                self.expression(cond, context);
                self.statements(body, context);
            }
            Stmt::For(init, cond, step, body) => {
                if let Some(init) = init {
                    self.expression(init, context);
                }
                let inner = match canonical(init.as_deref(), cond, step.as_deref(), body, self.address_taken, false) {
                    Some(mut facts) => {
                        facts.context = context.to_vec();
                        self.loops.push(facts);
                        [context, &[self.loops.len() - 1]].concat()
                    }
                    None => context.to_vec(),
                };
                self.expression(cond, &inner);
                self.statements(body, &inner);
                if let Some(step) = step {
                    self.expression(step, &inner);
                }
            }
            Stmt::Block(body) => self.statements(body, context),
            Stmt::Ret(None) | Stmt::Break | Stmt::Continue => {}
            Stmt::Label(_) | Stmt::Jump(_) | Stmt::Branch(..) => self.unsupported = true,
        }
    }

    fn expression(&mut self, expr: &'t Expr, context: &[usize]) {
        match &expr.kind {
            ExprKind::Set(Place::Local(local), value) => {
                self.writes.entry(*local).or_default().push(Write::Value(value, context.to_vec()));
            }
            ExprKind::Binary(BinOp::Add | BinOp::Sub | BinOp::Mul, ..) if expr.ty == Ty::Int(32) => {
                self.candidates.push((expr, context.to_vec()));
            }
            ExprKind::Launch(_) | ExprKind::EncodeCall(..) => self.unsupported = true,
            _ => {}
        }
        for child in expr_children(expr) {
            self.expression(child, context);
        }
    }
}

/// A memoised result; `Running` breaks cycles (a local that its own value feeds).
#[derive(Clone, Copy)]
enum Memo {
    Running,
    Done(Option<usize>),
}

struct Planner<'t, 'a> {
    nest: Nest<'t, 'a>,
    address_taken: &'a HashSet<usize>,
    bounds: Vec<Bound>,
    checks: Vec<Check>,
    expressions: HashMap<*const Expr, Option<usize>>,
    inductions: HashMap<usize, Memo>,
    temporaries: HashMap<usize, Memo>,
}

impl<'t> Planner<'t, '_> {
    fn push(&mut self, bound: Bound) -> usize {
        self.bounds.push(bound);
        self.bounds.len() - 1
    }

    /// The interval of an `int` expression evaluated inside the loops of `context`, if it is
    /// made of literals, locals with intervals and `add`/`sub`/`mul`.
    fn bound(&mut self, expr: &'t Expr, context: &[usize]) -> Option<usize> {
        if expr.ty != Ty::Int(32) {
            return None;
        }
        let key = expr as *const Expr;
        if let Some(known) = self.expressions.get(&key) {
            return *known;
        }
        let bound = match &expr.kind {
            ExprKind::Int(value) => Some(self.push(Bound::Constant(*value))),
            ExprKind::Read(Place::Local(local)) => self.local(*local, context),
            ExprKind::Binary(op @ (BinOp::Add | BinOp::Sub | BinOp::Mul), left, right) => {
                match (self.bound(left, context), self.bound(right, context)) {
                    (Some(left), Some(right)) => Some(self.push(match op {
                        BinOp::Add => Bound::Add(left, right),
                        BinOp::Sub => Bound::Sub(left, right),
                        _ => Bound::Mul(left, right),
                    })),
                    _ => None,
                }
            }
            _ => None,
        };
        self.expressions.insert(key, bound);
        bound
    }

    fn local(&mut self, local: usize, context: &[usize]) -> Option<usize> {
        if self.address_taken.contains(&local) {
            return None;
        }
        if let Some(index) = context.iter().rev().copied().find(|&index| self.nest.loops[index].variable == local) {
            return self.induction(index);
        }
        if !self.nest.writes.contains_key(&local) {
            return Some(self.push(Bound::Entry(local)));
        }
        self.temporary(local)
    }

    /// `compute(key)`, memoised in `table`; a key met again while its own computation runs
    /// has no bound (a cycle).
    fn memoised(
        &mut self,
        table: fn(&mut Self) -> &mut HashMap<usize, Memo>,
        key: usize,
        compute: fn(&mut Self, usize) -> Option<usize>,
    ) -> Option<usize> {
        match table(self).get(&key) {
            Some(Memo::Done(known)) => return *known,
            Some(Memo::Running) => return None,
            None => {}
        }
        table(self).insert(key, Memo::Running);
        let result = compute(self, key);
        table(self).insert(key, Memo::Done(result));
        result
    }

    /// The interval of a canonical loop's variable inside its body.
    fn induction(&mut self, index: usize) -> Option<usize> {
        self.memoised(|planner| &mut planner.inductions, index, Self::induction_bound)
    }

    fn induction_bound(&mut self, index: usize) -> Option<usize> {
        let facts = &self.nest.loops[index];
        let (variable, start, limit, strict, step) =
            (facts.variable, facts.start, facts.limit, facts.strict, facts.step);
        let context = facts.context.clone();
        let root = index == 0;
        let start = match start.and_then(|start| self.bound(start, &context)) {
            Some(start) => start,
            None if root => self.push(Bound::Entry(variable)),
            None => return None,
        };
        let limit = self.bound(limit, &context)?;
        let step = self.bound(step, &context)?;
        self.checks.push(Check::NotNegative(step));
        Some(self.push(Bound::Induction { start, limit, strict }))
    }

    /// The interval of a local the nest assigns: any value it gives it, or its value where the
    /// guard runs when the nest does not declare it.
    fn temporary(&mut self, local: usize) -> Option<usize> {
        self.memoised(|planner| &mut planner.temporaries, local, Self::temporary_bound)
    }

    fn temporary_bound(&mut self, local: usize) -> Option<usize> {
        let writes: Vec<(Option<&'t Expr>, Vec<usize>)> = self.nest.writes[&local]
            .iter()
            .map(|write| match write {
                Write::Value(expr, context) => (Some(*expr), context.clone()),
                Write::Zero => (None, Vec::new()),
            })
            .collect();
        let mut parts = Vec::with_capacity(writes.len() + 1);
        for (value, context) in writes {
            parts.push(match value {
                Some(value) => self.bound(value, &context)?,
                None => self.push(Bound::Constant(0)),
            });
        }
        if !self.nest.declared.contains(&local) {
            parts.push(self.push(Bound::Entry(local)));
        }
        Some(self.push(Bound::Union(parts)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::Env;
    use crate::source::SourceId;

    /// The plan of the first `for` of the function `f` that `text` defines, as the number of
    /// operations that get `nsw` and the checks, spelled short.
    fn plan(text: &str) -> Option<(usize, String)> {
        let forms = crate::reader::read(SourceId(0), text).expect("reads");
        let cell = crate::check::check(&Env::default(), &forms, &Default::default(), crate::tree::CellId::cell(0))
            .expect("checks");
        let function = cell.functions.iter().find(|function| function.name == "f").expect("defines f");
        let root = first_for(&function.body).expect("has a for");
        let plan = plan_nest(root, &crate::tree::address_taken(&function.body))?;
        let checks: Vec<String> = plan
            .checks
            .iter()
            .map(|check| match check {
                Check::Fits(bound) => format!("fits {}", spell(&plan.bounds, *bound)),
                Check::NotNegative(bound) => format!("step {}", spell(&plan.bounds, *bound)),
            })
            .collect();
        Some((plan.no_wrap.len(), checks.join("; ")))
    }

    fn first_for(body: &[Stmt]) -> Option<&Stmt> {
        body.iter().find_map(|stmt| match stmt {
            Stmt::For(..) => Some(stmt),
            Stmt::Block(inner) => first_for(inner),
            _ => None,
        })
    }

    fn spell(bounds: &[Bound], index: usize) -> String {
        match &bounds[index] {
            Bound::Constant(value) => value.to_string(),
            Bound::Entry(local) => format!("v{local}"),
            Bound::Add(left, right) => format!("({} + {})", spell(bounds, *left), spell(bounds, *right)),
            Bound::Sub(left, right) => format!("({} - {})", spell(bounds, *left), spell(bounds, *right)),
            Bound::Mul(left, right) => format!("({} * {})", spell(bounds, *left), spell(bounds, *right)),
            Bound::Induction { start, limit, strict } => {
                format!("[{}, {}{}]", spell(bounds, *start), spell(bounds, *limit), if *strict { "-1" } else { "" })
            }
            Bound::Union(parts) => {
                format!("({})", parts.iter().map(|part| spell(bounds, *part)).collect::<Vec<_>>().join(" | "))
            }
        }
    }

    #[test]
    fn a_matmul_nest_checks_its_index_expressions() {
        // Locals: n 0, a 1, b 2, i 3, j 4, k 5, s 6.
        let text = "(define ((f void) (n int) (a (ptr double)) (b (ptr double)))
          (declare i int) (declare j int) (declare k int)
          (for ((set i 0) (lt i n) (set i (add i 1)))
            (for ((set j 0) (lt j n) (set j (add j 1)))
              (declare s double)
              (for ((set k 0) (lt k n) (set k (add k 1)))
                (set s (fadd s (load (ptradd a (add (mul i n) k))))))
              (store (ptradd b (add (mul i n) j)) s))))";
        let (no_wrap, checks) = plan(text).expect("versioned");
        // Three steps, two products and two sums for `a`, two and two for `b`.
        assert_eq!(no_wrap, 7, "{checks}");
        assert!(checks.contains("fits ([0, v0-1] * v0)"), "{checks}");
        assert!(checks.contains("fits (([0, v0-1] * v0) + [0, v0-1])"), "{checks}");
        assert!(checks.contains("step 1"), "{checks}");
        assert!(checks.contains("fits ([0, v0-1] + 1)"), "{checks}");
    }

    #[test]
    fn a_local_set_in_the_nest_takes_every_value_it_is_given() {
        // Locals: n 0, a 1, i 2, row 3.
        let text = "(define ((f void) (n int) (a (ptr int)))
          (declare i int)
          (for ((set i 1) (le i n) (set i (add i 2)))
            (declare row int)
            (set row (mul i 3))
            (store (ptradd a (sub row 1)) 0)))";
        let (no_wrap, checks) = plan(text).expect("versioned");
        assert_eq!(no_wrap, 3, "{checks}");
        assert!(checks.contains("fits ((0 | ([1, v0] * 3)) - 1)"), "{checks}");
        assert!(checks.contains("fits ([1, v0] + 2)"), "{checks}");
    }

    #[test]
    fn an_inner_loop_bounded_by_an_outer_variable() {
        // The sieve's inner loop: j from i*i by i up to n, inside a loop that is not canonical.
        // Locals: n 0, flags 1, i 2, j 3.
        let text = "(define ((f void) (n int) (flags (ptr int8)))
          (declare i int) (declare j int)
          (for ((set j (mul i i)) (le j n) (set j (add j i)))
            (store (ptradd flags j) (int8 0))))";
        let (no_wrap, checks) = plan(text).expect("versioned");
        assert_eq!(no_wrap, 1, "{checks}");
        assert_eq!(checks, "step v2; fits ([(v2 * v2), v0] + v2)");
    }

    #[test]
    fn loops_that_are_not_canonical_are_not_versioned() {
        let cases = [
            // The body assigns the variable.
            "(define ((f void) (n int) (a (ptr int))) (declare i int)
               (for ((set i 0) (lt i n) (set i (add i 1))) (set i (add i 1)) (store (ptradd a i) 0)))",
            // The bound changes in the loop.
            "(define ((f void) (n int) (a (ptr int))) (declare i int)
               (for ((set i 0) (lt i n) (set i (add i 1))) (set n (sub n 1)) (store (ptradd a i) 0)))",
            // The variable's address is taken.
            "(define ((f void) (n int) (a (ptr int))) (declare i int) (declare p (ptr int))
               (set p (ptr-to i))
               (for ((set i 0) (lt i n) (set i (add i 1))) (store (ptradd a i) 0)))",
            // A decreasing loop.
            "(define ((f void) (n int) (a (ptr int))) (declare i int)
               (for ((set i n) (gt i 0) (set i (sub i 1))) (store (ptradd a i) 0)))",
            // A bound read from memory.
            "(define ((f void) (n (ptr int)) (a (ptr int))) (declare i int)
               (for ((set i 0) (lt i (load n)) (set i (add i 1))) (store (ptradd a i) 0)))",
            // 64-bit indices never wrap in practice and are left alone.
            "(define ((f void) (n int64) (a (ptr int))) (declare i int64)
               (for ((set i (int64 0)) (lt i n) (set i (add i (int64 1)))) (store (ptradd a i) 0)))",
        ];
        for text in cases {
            assert_eq!(plan(text), None, "{text}");
        }
    }

    #[test]
    fn an_accumulator_stays_wrapping() {
        // `s` feeds itself: no interval, so only the step gets `nsw`.
        // Locals: n 0, i 1, s 2.
        let text = "(define ((f int) (n int)) (declare i int) (declare s int)
          (for ((set i 0) (lt i n) (set i (add i 1))) (set s (add s (mul i i))))
          (ret s))";
        let (no_wrap, checks) = plan(text).expect("versioned");
        assert_eq!(no_wrap, 2, "{checks}");
        assert_eq!(checks, "step 1; fits ([0, v0-1] * [0, v0-1]); fits ([0, v0-1] + 1)");
    }
}
