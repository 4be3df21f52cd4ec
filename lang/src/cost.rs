//! How long a program's run can be, when its text bounds it: `quasi run` without `--opt`
//! compiles a program whose whole run is provably short at the quick level, since optimising
//! it at `:opt 3` would take longer than all of its running (docs/language.md §5.5).
//!
//! The measure is steps: statements and expressions evaluated, a call of a C function or an
//! intrinsic one step however long it takes (its code is compiled already, at no level of
//! ours). A function's bound is its body's; a `for` loop's is its trip count times what one
//! trip costs, when the loop is canonical (`versioning::canonical`: an `int` counter its body
//! does not assign, stepped by a constant) with a constant start, limit and step that cannot
//! wrap; an `if` costs its dearer branch. No bound is known — the program compiles at
//! `:opt 3` — for `while` loops, Brilisp jumps, recursion, calls through function pointers or
//! of functions the program does not define, a function whose address is taken (C may call
//! it any number of times) and anything that reaches the GPU.

use std::collections::{HashMap, HashSet};

use crate::codegen::versioning::canonical;
use crate::tree::{address_taken, expr_children, Callee, Expr, ExprKind, FunctionDef, Stmt, TypedCell};

/// A run of at most this many steps is short: unoptimised it takes microseconds, less than what
/// `:opt 3` would add to compiling it (about a millisecond for the smallest program).
pub(crate) const SHORT_RUN_STEPS: u64 = 10_000;

/// The level a short run compiles at: 0, no IR passes and LLVM's fast instruction selector and
/// register allocator. A served first run of a tiny program took 4.00 ms at 0 against 4.38 at 1
/// (`tcc -run` of its twin: 3.61; medians of 60, each after a 50 ms pause).
pub const SHORT_RUN_LEVEL: u8 = 0;

/// At most how many steps running the cell's top-level code and then its `main`, if it
/// defines one, can take; `None` when nothing bounds it.
pub(crate) fn run_steps(cell: &TypedCell) -> Option<u64> {
    let mut counter = Counter {
        functions: cell.functions.iter().map(|function| (function.name.as_str(), function)).collect(),
        inline: cell.inline_bodies.iter().map(|(name, body)| (name.as_str(), body.as_ref())).collect(),
        externs: cell.externs.iter().map(|declaration| declaration.name.as_str()).collect(),
        known: HashMap::new(),
        counting: HashSet::new(),
    };
    let mut total = 0u64;
    for item in &cell.top {
        total = total.saturating_add(counter.body_of(&item.function)?);
    }
    if counter.functions.contains_key("main") {
        total = total.saturating_add(counter.function("main", false)?);
    }
    Some(total)
}

struct Counter<'c> {
    functions: HashMap<&'c str, &'c FunctionDef>,
    inline: HashMap<&'c str, &'c FunctionDef>,
    /// C functions the cell declares (called through their slots).
    externs: HashSet<&'c str>,
    /// Bounds found, by function.
    known: HashMap<String, Option<u64>>,
    /// The functions being counted: a call of one of them is recursion.
    counting: HashSet<String>,
}

impl Counter<'_> {
    fn function(&mut self, name: &str, inline: bool) -> Option<u64> {
        if let Some(known) = self.known.get(name) {
            return *known;
        }
        if !self.counting.insert(name.to_string()) {
            return None;
        }
        let definition = match inline {
            true => self.inline.get(name).copied(),
            false => self.functions.get(name).copied(),
        };
        let steps = definition.and_then(|definition| self.body_of(definition));
        self.counting.remove(name);
        self.known.insert(name.to_string(), steps);
        steps
    }

    fn body_of(&mut self, function: &FunctionDef) -> Option<u64> {
        self.body(&function.body, &address_taken(&function.body))
    }

    fn body(&mut self, body: &[Stmt], taken: &HashSet<usize>) -> Option<u64> {
        body.iter().try_fold(0u64, |total, stmt| Some(total.saturating_add(self.stmt(stmt, taken)?)))
    }

    fn stmt(&mut self, stmt: &Stmt, taken: &HashSet<usize>) -> Option<u64> {
        match stmt {
            Stmt::Expr(expr) | Stmt::Ret(Some(expr)) => self.expr(expr),
            Stmt::Declare(_) | Stmt::Ret(None) | Stmt::Break | Stmt::Continue => Some(1),
            Stmt::If(condition, then, otherwise) => {
                let then = self.stmt(then, taken)?;
                let otherwise = match otherwise {
                    Some(otherwise) => self.stmt(otherwise, taken)?,
                    None => 0,
                };
                Some(self.expr(condition)?.saturating_add(then.max(otherwise)))
            }
            Stmt::Block(body) => self.body(body, taken),
            Stmt::For(init, condition, step, body) => {
                let facts = canonical(init.as_deref(), condition, step.as_deref(), body, taken, false)?;
                let (start, limit, amount) = (constant(facts.start?)?, constant(facts.limit)?, constant(facts.step)?);
                // The counter must reach the limit without wrapping (`int` is 32 bits).
                if amount <= 0 || limit.saturating_add(amount) > i64::from(i32::MAX) {
                    return None;
                }
                let span = limit - start + i64::from(!facts.strict);
                let trips = if span <= 0 { 0 } else { (span + amount - 1) / amount } as u64;
                let init = match init {
                    Some(init) => self.expr(init)?,
                    None => 0,
                };
                let step = match step {
                    Some(step) => self.expr(step)?,
                    None => 0,
                };
                let condition = self.expr(condition)?;
                let trip = condition.saturating_add(step).saturating_add(self.body(body, taken)?);
                Some(init.saturating_add(trips.saturating_mul(trip)).saturating_add(condition))
            }
            Stmt::While(..) | Stmt::Label(_) | Stmt::Jump(_) | Stmt::Branch(..) => None,
        }
    }

    fn expr(&mut self, expr: &Expr) -> Option<u64> {
        let own = match &expr.kind {
            ExprKind::Call(call) => match &call.callee {
                Callee::Slot(name) if self.externs.contains(name.as_str()) => 1,
                Callee::Slot(name) => self.function(name, false)?,
                Callee::Inline(name) => self.function(name, true)?,
                Callee::Direct(_) | Callee::Intrinsic(_) => 1,
                Callee::SelfCall => return None,
            },
            ExprKind::FunctionAddress(_)
            | ExprKind::Launch(_)
            | ExprKind::GpuAlloc(..)
            | ExprKind::GpuFree(_)
            | ExprKind::GpuLen(_)
            | ExprKind::GpuCopy(..)
            | ExprKind::GpuIndex(..)
            | ExprKind::Barrier
            | ExprKind::EncodeBegin
            | ExprKind::EncodeCopy(..)
            | ExprKind::EncodeCall(..)
            | ExprKind::Submit(_)
            | ExprKind::Await(_)
            | ExprKind::FenceDone(_)
            | ExprKind::HostAlloc(..) => return None,
            _ => 1,
        };
        expr_children(expr).into_iter().try_fold(own, |total, child| Some(total.saturating_add(self.expr(child)?)))
    }
}

/// An `int` literal's value.
fn constant(expr: &Expr) -> Option<i64> {
    match expr.kind {
        ExprKind::Int(value) => Some(value),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::Env;
    use crate::source::SourceId;

    fn steps(text: &str) -> Option<u64> {
        let forms = crate::reader::read(SourceId(0), text).expect("reads");
        let cell = crate::check::check(&Env::default(), &forms, &Default::default(), crate::tree::CellId::cell(0))
            .expect("checks");
        run_steps(&cell)
    }

    const PRINTF: &str = "(define ((printf int) (format (ptr int8)) ...))\n";

    fn sum_to(bound: &str, compare: &str) -> String {
        format!(
            "{PRINTF}(define ((main int)) (declare i int) (declare sum int)
               (for ((set i 0) ({compare} i {bound}) (set i (add i 1))) (set sum (add sum i)))
               (call printf \"%d\" sum) (ret 0))"
        )
    }

    #[test]
    fn a_loop_with_constant_bounds_is_counted() {
        let hundred = steps(&sum_to("100", "lt")).expect("bounded");
        assert!((400..2_000).contains(&hundred), "{hundred}");
        let hundred_and_one = steps(&sum_to("100", "le")).expect("bounded");
        assert!(hundred_and_one > hundred);
        let million = steps(&sum_to("1000000", "lt")).expect("bounded");
        assert!(million > SHORT_RUN_STEPS * 100, "{million}");
        // A limit the counter would wrap past: no bound.
        assert_eq!(steps(&sum_to("2147483647", "le")), None);
    }

    #[test]
    fn loops_nest_and_calls_add_their_callee() {
        let nested = steps(&format!(
            "{PRINTF}(define ((cell int) (i int) (j int)) (ret (mul i j)))
             (define ((main int)) (declare i int) (declare j int) (declare sum int)
               (for ((set i 0) (lt i 10) (set i (add i 2)))
                 (for ((set j 0) (lt j 10) (set j (add j 1))) (set sum (add sum (call cell i j)))))
               (ret sum))"
        ))
        .expect("bounded");
        // 5 outer trips of 10 inner ones, each calling `cell`.
        assert!((50 * 5..50 * 40).contains(&nested), "{nested}");
    }

    #[test]
    fn what_nothing_bounds_has_no_bound() {
        let unbounded = [
            // A limit that is not a constant (main's argc).
            format!(
                "{PRINTF}(define ((main int) (argc int) (argv (ptr (ptr int8)))) (declare i int)
                   (for ((set i 0) (lt i argc) (set i (add i 1))) (call printf \"x\")) (ret 0))"
            ),
            // A counter the body changes.
            format!(
                "{PRINTF}(define ((main int)) (declare i int)
                   (for ((set i 0) (lt i 10) (set i (add i 1))) (set i 0)) (ret 0))"
            ),
            "(define ((main int)) (declare i int) (while (lt i 10) (set i (add i 1))) (ret i))".to_string(),
            "(define ((f int) (n int)) (if (le n 1) (ret 1)) (ret (mul n (call f (sub n 1)))))
             (define ((main int)) (ret (call f 5)))"
                .to_string(),
            // Mutual recursion.
            "(define ((f int) (n int)) (ret (call g n)))
             (define ((g int) (n int)) (ret (call f n)))
             (define ((main int)) (ret (call f 5)))"
                .to_string(),
        ];
        for text in &unbounded {
            assert_eq!(steps(text), None, "{text}");
        }
        // Functions that never run cost nothing; top-level code counts.
        let idle = "(define ((f int)) (declare i int) (while (lt i 10) (set i (add i 1))) (ret i)) (add 1 2)";
        assert!(steps(idle).is_some_and(|n| n < 10));
    }
}
