//! Random well-typed programs with C twins. Each program is written twice at once, in C-Lisp
//! and in C, so that both mean the same under docs/language.md §4 and clang's `-fwrapv
//! -ffp-contract=off`: wrapping integer arithmetic, shift amounts masked to the width (the
//! C-Lisp side leaves them unmasked: Quasi defines them), division through helpers that never
//! divide by zero or the minimum by -1, float-to-integer conversions only in range, every
//! expression pure (functions read globals and never print; only `main` writes and prints), so
//! C's unspecified argument order cannot show. Loops have bounded trip counts and functions call
//! only earlier ones, so every program ends. NaNs print as `nan` whatever their sign.

use crate::rng::Rng;

/// A program in both languages.
#[derive(Clone, Debug)]
pub struct Twin {
    /// C-Lisp: definitions, a `main` returning 0.
    pub clisp: String,
    /// C: the same program.
    pub c: String,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Ty {
    I8,
    I16,
    I32,
    I64,
    F32,
    F64,
    /// The program's struct `s0`, passed and returned by value.
    S0,
}

const INTEGERS: [Ty; 4] = [Ty::I8, Ty::I16, Ty::I32, Ty::I64];
const ALL: [Ty; 6] = [Ty::I8, Ty::I16, Ty::I32, Ty::I64, Ty::F32, Ty::F64];
const FLOATS: [Ty; 2] = [Ty::F32, Ty::F64];

impl Ty {
    fn clisp(self) -> &'static str {
        match self {
            Ty::I8 => "int8",
            Ty::I16 => "int16",
            Ty::I32 => "int",
            Ty::I64 => "int64",
            Ty::F32 => "float",
            Ty::F64 => "double",
            Ty::S0 => "(struct s0)",
        }
    }

    fn c(self) -> &'static str {
        match self {
            Ty::I8 => "int8_t",
            Ty::I16 => "int16_t",
            Ty::I32 => "int32_t",
            Ty::I64 => "int64_t",
            Ty::F32 => "float",
            Ty::F64 => "double",
            Ty::S0 => "struct s0",
        }
    }

    fn unsigned_c(self) -> &'static str {
        match self {
            Ty::I8 => "uint8_t",
            Ty::I16 => "uint16_t",
            Ty::I32 => "uint32_t",
            _ => "uint64_t",
        }
    }

    fn bits(self) -> u32 {
        match self {
            Ty::I8 => 8,
            Ty::I16 => 16,
            Ty::I32 | Ty::F32 => 32,
            Ty::I64 | Ty::F64 | Ty::S0 => 64,
        }
    }

    fn min(self) -> i64 {
        match self {
            Ty::I8 => i8::MIN.into(),
            Ty::I16 => i16::MIN.into(),
            Ty::I32 => i32::MIN.into(),
            _ => i64::MIN,
        }
    }

    fn max(self) -> i64 {
        match self {
            Ty::I8 => i8::MAX.into(),
            Ty::I16 => i16::MAX.into(),
            Ty::I32 => i32::MAX.into(),
            _ => i64::MAX,
        }
    }

    /// A short tag for helper names.
    fn is_float(self) -> bool {
        matches!(self, Ty::F32 | Ty::F64)
    }

    fn tag(self) -> &'static str {
        match self {
            Ty::I8 => "i8",
            Ty::I16 => "i16",
            Ty::I32 => "i32",
            Ty::I64 => "i64",
            Ty::F32 => "f32",
            Ty::F64 => "f64",
            Ty::S0 => "s0",
        }
    }
}

/// One expression in both languages.
#[derive(Clone, Debug)]
struct Expr {
    lisp: String,
    c: String,
}

fn expr(lisp: String, c: String) -> Expr {
    Expr { lisp, c }
}

/// An integer literal of a type, in both languages.
fn int_literal(ty: Ty, value: i64) -> Expr {
    let lisp = match ty {
        Ty::I32 => value.to_string(),
        _ => format!("({} {value})", ty.clisp()),
    };
    // `-9223372036854775808LL` would negate a literal that does not fit: spell the minimum.
    let c = if value == i64::MIN {
        "((int64_t)(-9223372036854775807LL - 1))".to_string()
    } else {
        format!("(({}){value}LL)", ty.c())
    };
    expr(lisp, c)
}

fn double_literal(value: f64) -> Expr {
    let text = format!("{value:?}");
    expr(format!("(double {text})"), format!("({text})"))
}

/// A float literal: both languages read the decimal as a double and round it to float.
fn float_literal(value: f32) -> Expr {
    let text = format!("{value:?}");
    expr(format!("(float {text})"), format!("((float){text})"))
}

/// A function the generator has made, callable by later ones.
#[derive(Clone, Debug)]
struct Signature {
    name: String,
    ret: Ty,
    params: Vec<Ty>,
}

#[derive(Clone, Debug)]
struct Variable {
    name: String,
    ty: Ty,
    /// Loop counters are read, never assigned by the body.
    assignable: bool,
}

/// What an expression may use where it is made.
#[derive(Clone, Debug, Default)]
struct Scope {
    variables: Vec<Variable>,
    /// Local arrays of 8 elements: (name, element type).
    arrays: Vec<(String, Ty)>,
    /// Locals of the program's struct type.
    structs: Vec<String>,
    /// Free loop counters (declared `int`), taken by nested loops.
    counters: Vec<String>,
    /// The enclosing loops, innermost last: true for a `while` (whose step is in the body, so
    /// `continue` would skip it).
    loops: Vec<bool>,
    in_main: bool,
}

struct Generator<'a> {
    rng: &'a mut Rng,
    functions: Vec<Signature>,
    globals: Vec<(String, Ty)>,
    /// The field types of the program's struct `s0` (fields `x0`, `x1`…); empty if it has none.
    fields: Vec<Ty>,
    /// How many statements are left to make in this function (bounds program size).
    budget: usize,
}

/// Program `case` of the run seeded `seed`.
pub fn generate(seed: u64, case: u64) -> Twin {
    let mut rng = Rng::for_case(seed ^ 0x7477_696e, case);
    let mut generator =
        Generator { rng: &mut rng, functions: Vec::new(), globals: Vec::new(), fields: Vec::new(), budget: 0 };
    generator.program()
}

impl Generator<'_> {
    fn program(&mut self) -> Twin {
        let mut clisp = String::from("(define ((printf int) (fmt (ptr int8)) ...))\n");
        let mut c = String::from("#include <stdio.h>\n#include <stdint.h>\n\n");
        let (helper_lisp, helper_c) = helpers();
        clisp.push_str(&helper_lisp);
        c.push_str(&helper_c);
        if self.rng.chance(2, 3) {
            self.fields = (0..1 + self.rng.below(4)).map(|_| *self.rng.pick(&ALL)).collect();
            let lisp_fields: String =
                self.fields.iter().enumerate().map(|(index, ty)| format!(" (x{index} {})", ty.clisp())).collect();
            let c_fields: String =
                self.fields.iter().enumerate().map(|(index, ty)| format!(" {} x{index};", ty.c())).collect();
            clisp.push_str(&format!("(define-struct s0{lisp_fields})\n"));
            c.push_str(&format!("struct s0 {{{c_fields} }};\n"));
            for (field, ty) in self.fields.iter().enumerate() {
                c.push_str(&format!(
                    "static struct s0 fz_insert_{field}(struct s0 s, {} v) {{ s.x{field} = v; return s; }}\n",
                    ty.c()
                ));
            }
        }
        for index in 0..self.rng.below(4) {
            let ty = *self.rng.pick(&ALL);
            let name = format!("g{index}");
            let value = self.literal(ty);
            let lisp_constant = self.literal_value_text(&value);
            clisp.push_str(&format!("(define-global ({name} {}) (const {lisp_constant}))\n", ty.clisp()));
            c.push_str(&format!("static {} {name} = {};\n", ty.c(), value.c));
            self.globals.push((name, ty));
        }
        for index in 0..1 + self.rng.below(4) {
            let (function_lisp, function_c) = self.function(index);
            clisp.push_str(&function_lisp);
            c.push_str(&function_c);
        }
        let (main_lisp, main_c) = self.main();
        clisp.push_str(&main_lisp);
        c.push_str(&main_c);
        Twin { clisp, c }
    }

    /// The number inside a C-Lisp literal, `(int8 5)`, `(double 1.5)` or `5`, for `(const …)`.
    fn literal_value_text(&self, literal: &Expr) -> String {
        literal
            .lisp
            .trim_matches(|character| character == '(' || character == ')')
            .rsplit(' ')
            .next()
            .unwrap_or("0")
            .to_string()
    }

    fn function(&mut self, index: usize) -> (String, String) {
        let name = format!("f{index}");
        let ret = self.value_type();
        let params: Vec<Ty> = (0..self.rng.below(4)).map(|_| self.value_type()).collect();
        let mut scope = Scope::default();
        let mut lisp_params = String::new();
        let mut c_params = Vec::new();
        for (position, ty) in params.iter().enumerate() {
            let parameter = format!("p{position}");
            lisp_params.push_str(&format!(" ({parameter} {})", ty.clisp()));
            c_params.push(format!("{} {parameter}", ty.c()));
            if *ty == Ty::S0 {
                scope.structs.push(parameter.clone());
            }
            scope.variables.push(Variable { name: parameter, ty: *ty, assignable: true });
        }
        let (declarations_lisp, declarations_c) = self.locals(&mut scope);
        self.budget = 4 + self.rng.below(8);
        let (body_lisp, body_c) = {
            let count = 2 + self.rng.below(5);
            self.statements(&mut scope, count)
        };
        let result = self.expression(ret, &scope, 3);
        let head = if self.rng.chance(1, 4) { "define-inline" } else { "define" };
        let lisp = format!(
            "({head} (({name} {}){lisp_params})\n{declarations_lisp}{body_lisp}  (ret {}))\n",
            ret.clisp(),
            result.lisp
        );
        let c_parameters = if c_params.is_empty() { "void".to_string() } else { c_params.join(", ") };
        let c = format!(
            "static {} {name}({c_parameters}) {{\n{declarations_c}{body_c}  return {};\n}}\n",
            ret.c(),
            result.c
        );
        self.functions.push(Signature { name, ret, params });
        (lisp, c)
    }

    fn main(&mut self) -> (String, String) {
        let mut scope = Scope { in_main: true, ..Scope::default() };
        let (declarations_lisp, declarations_c) = self.locals(&mut scope);
        self.budget = 10 + self.rng.below(14);
        let (body_lisp, body_c) = {
            let count = 6 + self.rng.below(10);
            self.statements(&mut scope, count)
        };
        // Everything main can see is printed at the end, so no value goes unobserved.
        let mut tail_lisp = String::new();
        let mut tail_c = String::new();
        let visible: Vec<(String, Ty)> = scope
            .variables
            .iter()
            .map(|variable| (variable.name.clone(), variable.ty))
            .chain(self.globals.iter().cloned())
            .collect();
        for (name, ty) in visible {
            let (lisp, c) = print_statement(&expr(name.clone(), name), ty);
            tail_lisp.push_str(&lisp);
            tail_c.push_str(&c);
        }
        for record in &scope.structs {
            for (field, ty) in self.fields.iter().enumerate() {
                let value = expr(format!("(extractvalue {record} {field})"), format!("{record}.x{field}"));
                let (lisp, c) = print_statement(&value, *ty);
                tail_lisp.push_str(&lisp);
                tail_c.push_str(&c);
            }
        }
        (
            format!("(define ((main int))\n{declarations_lisp}{body_lisp}{tail_lisp}  (ret 0))\n"),
            format!("int main(void) {{\n{declarations_c}{body_c}{tail_c}  return 0;\n}}\n"),
        )
    }

    /// Local variables, arrays and loop counters, declared at the top of a function.
    fn locals(&mut self, scope: &mut Scope) -> (String, String) {
        let mut lisp = String::new();
        let mut c = String::new();
        for index in 0..1 + self.rng.below(4) {
            let ty = *self.rng.pick(&ALL);
            let name = format!("v{index}");
            lisp.push_str(&format!("  (declare {name} {})\n", ty.clisp()));
            c.push_str(&format!("  {} {name} = 0;\n", ty.c()));
            scope.variables.push(Variable { name, ty, assignable: true });
        }
        if !self.fields.is_empty() {
            for index in 0..1 + self.rng.below(2) {
                let name = format!("r{index}");
                lisp.push_str(&format!("  (declare {name} (struct s0))\n"));
                c.push_str(&format!("  struct s0 {name} = {{0}};\n"));
                scope.structs.push(name);
            }
        }
        if self.rng.chance(1, 2) {
            let ty = *self.rng.pick(&ALL);
            lisp.push_str(&format!("  (declare a0 (arr 8 {}))\n", ty.clisp()));
            c.push_str(&format!("  {} a0[8] = {{0}};\n", ty.c()));
            scope.arrays.push(("a0".to_string(), ty));
        }
        for index in 0..2 {
            let name = format!("i{index}");
            lisp.push_str(&format!("  (declare {name} int)\n"));
            c.push_str(&format!("  int32_t {name} = 0;\n"));
            scope.counters.push(name);
        }
        (lisp, c)
    }

    fn statements(&mut self, scope: &mut Scope, count: usize) -> (String, String) {
        let mut lisp = String::new();
        let mut c = String::new();
        for _ in 0..count {
            if self.budget == 0 {
                break;
            }
            self.budget -= 1;
            let (statement_lisp, statement_c) = self.statement(scope);
            lisp.push_str(&statement_lisp);
            c.push_str(&statement_c);
        }
        (lisp, c)
    }

    fn statement(&mut self, scope: &mut Scope) -> (String, String) {
        let assignable: Vec<Variable> =
            scope.variables.iter().filter(|variable| variable.assignable).cloned().collect();
        let choice = self.rng.below(12);
        match choice {
            0..=2 if !assignable.is_empty() => {
                let variable = self.rng.pick(&assignable).clone();
                let value = self.expression(variable.ty, scope, 4);
                (format!("  (set {} {})\n", variable.name, value.lisp), format!("  {} = {};\n", variable.name, value.c))
            }
            3 if !scope.arrays.is_empty() => {
                let (array, ty) = self.rng.pick(&scope.arrays).clone();
                let index = self.expression(Ty::I32, scope, 2);
                let value = self.expression(ty, scope, 3);
                (
                    format!("  (store (aptradd {array} (and {} 7)) {})\n", index.lisp, value.lisp),
                    format!("  {array}[({}) & 7] = {};\n", index.c, value.c),
                )
            }
            9 if !scope.structs.is_empty() => self.struct_statement(scope),
            10 if !assignable.is_empty() => {
                let variable = self.rng.pick(&assignable).clone();
                let value = self.expression(variable.ty, scope, 3);
                (
                    format!("  (store (ptr-to {}) {})\n", variable.name, value.lisp),
                    format!("  *&{} = {};\n", variable.name, value.c),
                )
            }
            11 if !scope.arrays.is_empty() => {
                let (array, ty) = self.rng.pick(&scope.arrays).clone();
                let index = self.expression(Ty::I32, scope, 2);
                let value = self.expression(ty, scope, 3);
                (
                    format!("  (store (ptradd (aptradd {array} 0) (and {} 7)) {})\n", index.lisp, value.lisp),
                    format!("  *(&{array}[0] + (({}) & 7)) = {};\n", index.c, value.c),
                )
            }
            4 if scope.in_main && !self.globals.is_empty() => {
                let (global, ty) = self.rng.pick(&self.globals).clone();
                let value = self.expression(ty, scope, 3);
                (format!("  (set {global} {})\n", value.lisp), format!("  {global} = {};\n", value.c))
            }
            5 => {
                let condition = self.condition(scope, 3);
                let (then_lisp, then_c) = {
                    let count = 1 + self.rng.below(3);
                    self.statements(scope, count)
                };
                let (else_lisp, else_c) = {
                    let count = self.rng.below(3);
                    self.statements(scope, count)
                };
                (
                    format!("  (if {} (() {then_lisp}) (() {else_lisp}))\n", condition.lisp),
                    format!("  if ({}) {{\n{then_c}  }} else {{\n{else_c}  }}\n", condition.c),
                )
            }
            6 | 7 if !scope.counters.is_empty() && scope.loops.len() < 2 => self.loop_statement(scope, choice == 7),
            8 if !scope.loops.is_empty() => {
                let condition = self.condition(scope, 2);
                let in_while = scope.loops.last() == Some(&true);
                let word = if in_while || self.rng.chance(1, 2) { "break" } else { "continue" };
                (format!("  (if {} ({word}))\n", condition.lisp), format!("  if ({}) {word};\n", condition.c))
            }
            _ if scope.in_main => {
                let ty = *self.rng.pick(&ALL);
                let value = self.expression(ty, scope, 4);
                print_statement(&value, ty)
            }
            _ => ("  ()\n".to_string(), "  ;\n".to_string()),
        }
    }

    /// A struct local changed: a field by `insertvalue` or through `sptradd`, or the whole
    /// value copied or selected.
    fn struct_statement(&mut self, scope: &mut Scope) -> (String, String) {
        let record = self.rng.pick(&scope.structs).clone();
        let other = self.rng.pick(&scope.structs).clone();
        let field = self.rng.below(self.fields.len());
        let ty = self.fields[field];
        match self.rng.below(4) {
            0 => {
                let value = self.expression(ty, scope, 3);
                (
                    format!("  (set {record} (insertvalue {record} {} {field}))\n", value.lisp),
                    format!("  {record}.x{field} = {};\n", value.c),
                )
            }
            1 => {
                let value = self.expression(ty, scope, 3);
                (
                    format!("  (store (sptradd (ptr-to {record}) x{field}) {})\n", value.lisp),
                    format!("  (&{record})->x{field} = {};\n", value.c),
                )
            }
            2 => (format!("  (set {record} {other})\n"), format!("  {record} = {other};\n")),
            _ => {
                let condition = self.condition(scope, 2);
                (
                    format!("  (set {record} (select {} {other} {record}))\n", condition.lisp),
                    format!("  {record} = {} ? {other} : {record};\n", condition.c),
                )
            }
        }
    }

    /// A `for` (counter stepped by the header) or a `while` (counter stepped last in the
    /// body); a few trips at most, the counter never assigned in the body.
    fn loop_statement(&mut self, scope: &mut Scope, is_while: bool) -> (String, String) {
        let Some(counter) = scope.counters.pop() else { return ("  ()\n".to_string(), "  ;\n".to_string()) };
        let trips = self.rng.below(7);
        scope.loops.push(is_while);
        scope.variables.push(Variable { name: counter.clone(), ty: Ty::I32, assignable: false });
        let (body_lisp, body_c) = {
            let count = 1 + self.rng.below(4);
            self.statements(scope, count)
        };
        scope.variables.pop();
        scope.loops.pop();
        scope.counters.push(counter.clone());
        if is_while {
            (
                format!(
                    "  (set {counter} 0)\n  (while (lt {counter} {trips})\n{body_lisp}  (set {counter} (add {counter} 1)))\n"
                ),
                format!("  {counter} = 0;\n  while ({counter} < {trips}) {{\n{body_c}  {counter} = {counter} + 1;\n  }}\n"),
            )
        } else {
            (
                format!("  (for ((set {counter} 0) (lt {counter} {trips}) (set {counter} (add {counter} 1)))\n{body_lisp}  )\n"),
                format!("  for ({counter} = 0; {counter} < {trips}; {counter} = {counter} + 1) {{\n{body_c}  }}\n"),
            )
        }
    }

    fn literal(&mut self, ty: Ty) -> Expr {
        match ty {
            Ty::F32 => {
                let value = match self.rng.below(6) {
                    0 => *self.rng.pick(&[0.0, -0.0, 1.0, 0.1, 3.4028235e38, -1e-45, 1e-38, 16777217.0]),
                    1 => self.rng.range(-1_000_000, 1_000_000) as f32 / 1024.0,
                    _ => self.rng.range(-100, 100) as f32 / 8.0,
                };
                float_literal(value)
            }
            Ty::F64 => {
                let value = match self.rng.below(8) {
                    0 => *self.rng.pick(&[
                        0.0,
                        -0.0,
                        1.0,
                        -1.0,
                        0.5,
                        1e300,
                        -1e300,
                        1e-300,
                        5e-324,
                        1e16,
                        9007199254740993.0,
                    ]),
                    1 => self.rng.range(-1_000_000, 1_000_000) as f64 / 1024.0,
                    2 => self.rng.range(-3_000_000_000, 3_000_000_000) as f64,
                    _ => self.rng.range(-100, 100) as f64 / 8.0,
                };
                double_literal(value)
            }
            _ => {
                let value = match self.rng.below(6) {
                    0 => *self.rng.pick(&[ty.min(), ty.max(), 0, -1, 1, ty.min() + 1, ty.max() - 1]),
                    1 => self.rng.range(ty.min(), ty.max()),
                    _ => self.rng.range(-20, 20),
                };
                int_literal(ty, value)
            }
        }
    }

    fn expression(&mut self, ty: Ty, scope: &Scope, depth: usize) -> Expr {
        if depth == 0 || self.rng.chance(1, 4) {
            return self.leaf(ty, scope);
        }
        match ty {
            Ty::S0 => self.struct_expression(scope, depth),
            _ if ty.is_float() => self.float_expression(ty, scope, depth),
            _ => self.integer_expression(ty, scope, depth),
        }
    }

    /// A type for a parameter or result: a scalar, or the struct when the program has one.
    fn value_type(&mut self) -> Ty {
        if !self.fields.is_empty() && self.rng.chance(1, 5) {
            Ty::S0
        } else {
            *self.rng.pick(&ALL)
        }
    }

    /// A struct value: a local or parameter, a `select`, an `insertvalue` (a helper in C), a
    /// call. Every function has a struct local when the program has a struct.
    fn struct_expression(&mut self, scope: &Scope, depth: usize) -> Expr {
        match self.rng.below(4) {
            0 => {
                let condition = self.condition(scope, depth - 1);
                let (a, b) = (self.expression(Ty::S0, scope, depth - 1), self.expression(Ty::S0, scope, depth - 1));
                expr(
                    format!("(select {} {} {})", condition.lisp, a.lisp, b.lisp),
                    format!("({} ? {} : {})", condition.c, a.c, b.c),
                )
            }
            1 => {
                let field = self.rng.below(self.fields.len());
                let record = self.expression(Ty::S0, scope, depth - 1);
                let value = self.expression(self.fields[field], scope, depth - 1);
                expr(
                    format!("(insertvalue {} {} {field})", record.lisp, value.lisp),
                    format!("fz_insert_{field}({}, {})", record.c, value.c),
                )
            }
            2 => self.call(Ty::S0, scope, depth),
            _ => self.leaf(Ty::S0, scope),
        }
    }

    /// A variable (read directly or through its address), a struct field (by value or
    /// through a pointer), or a literal.
    fn leaf(&mut self, ty: Ty, scope: &Scope) -> Expr {
        if ty == Ty::S0 {
            let record = scope.structs.first().cloned().unwrap_or_default();
            let record = if scope.structs.is_empty() { record } else { self.rng.pick(&scope.structs).clone() };
            return expr(record.clone(), record);
        }
        let mut candidates: Vec<String> =
            scope.variables.iter().filter(|variable| variable.ty == ty).map(|variable| variable.name.clone()).collect();
        candidates.extend(self.globals.iter().filter(|(_, global)| *global == ty).map(|(name, _)| name.clone()));
        let fields: Vec<usize> = (0..self.fields.len()).filter(|field| self.fields[*field] == ty).collect();
        if !fields.is_empty() && !scope.structs.is_empty() && self.rng.chance(1, 3) {
            let record = self.rng.pick(&scope.structs).clone();
            let field = *self.rng.pick(&fields);
            return if self.rng.chance(1, 2) {
                expr(format!("(extractvalue {record} {field})"), format!("{record}.x{field}"))
            } else {
                expr(format!("(load (sptradd (ptr-to {record}) x{field}))"), format!("(&{record})->x{field}"))
            };
        }
        if !candidates.is_empty() && self.rng.chance(2, 3) {
            let name = self.rng.pick(&candidates).clone();
            return if self.rng.chance(1, 6) {
                expr(format!("(load (ptr-to {name}))"), format!("(*&{name})"))
            } else {
                expr(name.clone(), name)
            };
        }
        self.literal(ty)
    }

    fn integer_expression(&mut self, ty: Ty, scope: &Scope, depth: usize) -> Expr {
        let (c_type, unsigned, mask) = (ty.c(), ty.unsigned_c(), ty.bits() - 1);
        let choice = self.rng.below(14);
        match choice {
            0..=3 => {
                let operator = *self.rng.pick(&[
                    ("add", "+"),
                    ("sub", "-"),
                    ("mul", "*"),
                    ("and", "&"),
                    ("or", "|"),
                    ("xor", "^"),
                ]);
                let (a, b) = (self.expression(ty, scope, depth - 1), self.expression(ty, scope, depth - 1));
                expr(
                    format!("({} {} {})", operator.0, a.lisp, b.lisp),
                    format!("(({c_type})({} {} {}))", a.c, operator.1, b.c),
                )
            }
            4 => {
                let operator = *self.rng.pick(&["div", "rem", "udiv", "urem"]);
                let (a, b) = (self.expression(ty, scope, depth - 1), self.expression(ty, scope, depth - 1));
                let helper = format!("fz_{operator}_{}", ty.tag());
                expr(format!("(call {helper} {} {})", a.lisp, b.lisp), format!("{helper}({}, {})", a.c, b.c))
            }
            5 => {
                let (a, b) = (self.expression(ty, scope, depth - 1), self.expression(ty, scope, depth - 1));
                match self.rng.below(3) {
                    0 => expr(
                        format!("(shl {} {})", a.lisp, b.lisp),
                        format!("(({c_type})(({unsigned}){} << (({unsigned}){} & {mask})))", a.c, b.c),
                    ),
                    1 => expr(
                        format!("(ashr {} {})", a.lisp, b.lisp),
                        format!("(({c_type})({} >> (({unsigned}){} & {mask})))", a.c, b.c),
                    ),
                    _ => expr(
                        format!("(lshr {} {})", a.lisp, b.lisp),
                        format!("(({c_type})(({unsigned}){} >> (({unsigned}){} & {mask})))", a.c, b.c),
                    ),
                }
            }
            6 => {
                let a = self.expression(ty, scope, depth - 1);
                expr(format!("(not {})", a.lisp), format!("(({c_type})~{})", a.c))
            }
            7 => {
                let condition = self.condition(scope, depth - 1);
                let (a, b) = (self.expression(ty, scope, depth - 1), self.expression(ty, scope, depth - 1));
                expr(
                    format!("(select {} {} {})", condition.lisp, a.lisp, b.lisp),
                    format!("({} ? {} : {})", condition.c, a.c, b.c),
                )
            }
            8 => {
                let from = *self.rng.pick(&INTEGERS);
                let a = self.expression(from, scope, depth - 1);
                match from.bits().cmp(&ty.bits()) {
                    std::cmp::Ordering::Equal => a,
                    std::cmp::Ordering::Greater => {
                        expr(format!("(trunc {} {})", a.lisp, ty.clisp()), format!("(({c_type}){})", a.c))
                    }
                    std::cmp::Ordering::Less if self.rng.chance(1, 2) => {
                        expr(format!("(sext {} {})", a.lisp, ty.clisp()), format!("(({c_type}){})", a.c))
                    }
                    std::cmp::Ordering::Less => expr(
                        format!("(zext {} {})", a.lisp, ty.clisp()),
                        format!("(({c_type})({}){})", from.unsigned_c(), a.c),
                    ),
                }
            }
            9 => {
                let from = *self.rng.pick(&FLOATS);
                let a = widen_to_double(self.expression(from, scope, depth - 1), from);
                let helper = format!("fz_f2i_{}", ty.tag());
                expr(format!("(call {helper} {})", a.lisp), format!("{helper}({})", a.c))
            }
            10 => {
                let condition = self.condition(scope, depth - 1);
                expr(format!("(zext {} {})", condition.lisp, ty.clisp()), format!("(({c_type}){})", condition.c))
            }
            11 if !scope.arrays.is_empty() => self.array_load(ty, scope, depth),
            _ => self.call(ty, scope, depth),
        }
    }

    fn float_expression(&mut self, ty: Ty, scope: &Scope, depth: usize) -> Expr {
        let name = ty.clisp();
        match self.rng.below(10) {
            0..=3 => {
                let operator = *self.rng.pick(&[("fadd", "+"), ("fsub", "-"), ("fmul", "*"), ("fdiv", "/")]);
                let (a, b) = (self.expression(ty, scope, depth - 1), self.expression(ty, scope, depth - 1));
                expr(
                    format!("({} {} {})", operator.0, a.lisp, b.lisp),
                    format!("(({name})({} {} {}))", a.c, operator.1, b.c),
                )
            }
            4 => {
                let a = self.expression(ty, scope, depth - 1);
                expr(format!("(fneg {})", a.lisp), format!("(-{})", a.c))
            }
            5 => {
                let from = *self.rng.pick(&INTEGERS);
                let a = self.expression(from, scope, depth - 1);
                if self.rng.chance(1, 2) {
                    expr(format!("(sitofp {} {name})", a.lisp), format!("(({name}){})", a.c))
                } else {
                    expr(format!("(uitofp {} {name})", a.lisp), format!("(({name})({}){})", from.unsigned_c(), a.c))
                }
            }
            6 => {
                let condition = self.condition(scope, depth - 1);
                let (a, b) = (self.expression(ty, scope, depth - 1), self.expression(ty, scope, depth - 1));
                expr(
                    format!("(select {} {} {})", condition.lisp, a.lisp, b.lisp),
                    format!("({} ? {} : {})", condition.c, a.c, b.c),
                )
            }
            7 => {
                let (other, cast) = if ty == Ty::F64 { (Ty::F32, "fpext") } else { (Ty::F64, "fptrunc") };
                let a = self.expression(other, scope, depth - 1);
                expr(format!("({cast} {} {name})", a.lisp), format!("(({name}){})", a.c))
            }
            8 if !scope.arrays.is_empty() => self.array_load(ty, scope, depth),
            _ => self.call(ty, scope, depth),
        }
    }

    /// A load from the local array if its elements have the type, else a leaf.
    fn array_load(&mut self, ty: Ty, scope: &Scope, depth: usize) -> Expr {
        let arrays: Vec<String> =
            scope.arrays.iter().filter(|(_, element)| *element == ty).map(|(name, _)| name.clone()).collect();
        if arrays.is_empty() {
            return self.leaf(ty, scope);
        }
        let array = self.rng.pick(&arrays).clone();
        let index = self.expression(Ty::I32, scope, depth - 1);
        expr(format!("(load (aptradd {array} (and {} 7)))", index.lisp), format!("{array}[({}) & 7]", index.c))
    }

    /// A call of an earlier function returning the type, else a leaf.
    fn call(&mut self, ty: Ty, scope: &Scope, depth: usize) -> Expr {
        let callees: Vec<Signature> = self.functions.iter().filter(|function| function.ret == ty).cloned().collect();
        if callees.is_empty() {
            return self.leaf(ty, scope);
        }
        let callee = self.rng.pick(&callees).clone();
        let arguments: Vec<Expr> =
            callee.params.iter().map(|param| self.expression(*param, scope, depth - 1)).collect();
        let lisp_arguments: String = arguments.iter().map(|argument| format!(" {}", argument.lisp)).collect();
        let c_arguments: Vec<String> = arguments.iter().map(|argument| argument.c.clone()).collect();
        expr(format!("(call {}{lisp_arguments})", callee.name), format!("{}({})", callee.name, c_arguments.join(", ")))
    }

    /// A `bool` expression; in C an `int` 0 or 1.
    fn condition(&mut self, scope: &Scope, depth: usize) -> Expr {
        let depth = depth.max(1);
        match self.rng.below(7) {
            0..=2 => {
                let ty = *self.rng.pick(&INTEGERS);
                let (a, b) = (self.expression(ty, scope, depth - 1), self.expression(ty, scope, depth - 1));
                let (operator, c_operator, unsigned) = *self.rng.pick(&[
                    ("eq", "==", false),
                    ("ne", "!=", false),
                    ("lt", "<", false),
                    ("gt", ">", false),
                    ("le", "<=", false),
                    ("ge", ">=", false),
                    ("ult", "<", true),
                    ("ugt", ">", true),
                    ("ule", "<=", true),
                    ("uge", ">=", true),
                ]);
                let c = if unsigned {
                    format!("(({}){} {c_operator} ({}){})", ty.unsigned_c(), a.c, ty.unsigned_c(), b.c)
                } else {
                    format!("({} {c_operator} {})", a.c, b.c)
                };
                expr(format!("({operator} {} {})", a.lisp, b.lisp), c)
            }
            3 | 4 => {
                let ty = *self.rng.pick(&FLOATS);
                let (a, b) = (self.expression(ty, scope, depth - 1), self.expression(ty, scope, depth - 1));
                let (operator, c) = match self.rng.below(6) {
                    0 => ("feq", format!("({} == {})", a.c, b.c)),
                    // Ordered: false when either is NaN, unlike C's `!=`.
                    1 => ("fne", format!("(({0} < {1}) || ({0} > {1}))", a.c, b.c)),
                    2 => ("flt", format!("({} < {})", a.c, b.c)),
                    3 => ("fgt", format!("({} > {})", a.c, b.c)),
                    4 => ("fle", format!("({} <= {})", a.c, b.c)),
                    _ => ("fge", format!("({} >= {})", a.c, b.c)),
                };
                expr(format!("({operator} {} {})", a.lisp, b.lisp), c)
            }
            5 => {
                let (a, b) = (self.condition(scope, depth - 1), self.condition(scope, depth - 1));
                let (operator, c_operator) = *self.rng.pick(&[("and", "&"), ("or", "|")]);
                expr(format!("({operator} {} {})", a.lisp, b.lisp), format!("({} {c_operator} {})", a.c, b.c))
            }
            _ => {
                let a = self.condition(scope, depth - 1);
                expr(format!("(not {})", a.lisp), format!("(!{})", a.c))
            }
        }
    }
}

/// A float expression as a double (`fpext` for a float).
fn widen_to_double(value: Expr, ty: Ty) -> Expr {
    match ty {
        Ty::F32 => expr(format!("(fpext {} double)", value.lisp), format!("((double){})", value.c)),
        _ => value,
    }
}

/// `printf` of a value: narrow integers widened to `int`, doubles through the NaN-safe helper.
fn print_statement(value: &Expr, ty: Ty) -> (String, String) {
    match ty {
        Ty::F32 => (
            format!("  (call fz_print_double (fpext {} double))\n", value.lisp),
            format!("  fz_print_double((double){});\n", value.c),
        ),
        Ty::F64 => (format!("  (call fz_print_double {})\n", value.lisp), format!("  fz_print_double({});\n", value.c)),
        Ty::I64 => (
            format!("  (call printf \"%lld\\n\" {})\n", value.lisp),
            format!("  printf(\"%lld\\n\", (long long){});\n", value.c),
        ),
        Ty::I32 => {
            (format!("  (call printf \"%d\\n\" {})\n", value.lisp), format!("  printf(\"%d\\n\", {});\n", value.c))
        }
        _ => (
            format!("  (call printf \"%d\\n\" (sext {} int))\n", value.lisp),
            format!("  printf(\"%d\\n\", (int){});\n", value.c),
        ),
    }
}

/// The helpers every program has: total division and remainder, in-range float-to-integer
/// conversion, and printing a double with every NaN as `nan`.
fn helpers() -> (String, String) {
    let mut lisp = String::new();
    let mut c = String::new();
    for ty in INTEGERS {
        let (name, c_type, unsigned, tag) = (ty.clisp(), ty.c(), ty.unsigned_c(), ty.tag());
        let zero = int_literal(ty, 0);
        let minus_one = int_literal(ty, -1);
        let minimum = int_literal(ty, ty.min());
        for (operator, c_operator) in [("div", "/"), ("rem", "%")] {
            lisp.push_str(&format!(
                "(define ((fz_{operator}_{tag} {name}) (a {name}) (b {name}))\n  (if (eq b {}) (ret a))\n  (if (and (eq a {}) (eq b {})) (ret a))\n  (ret ({operator} a b)))\n",
                zero.lisp, minimum.lisp, minus_one.lisp
            ));
            c.push_str(&format!(
                "static {c_type} fz_{operator}_{tag}({c_type} a, {c_type} b) {{\n  if (b == 0) return a;\n  if (a == {} && b == -1) return a;\n  return ({c_type})(a {c_operator} b);\n}}\n",
                minimum.c
            ));
        }
        for (operator, c_operator) in [("udiv", "/"), ("urem", "%")] {
            lisp.push_str(&format!(
                "(define ((fz_{operator}_{tag} {name}) (a {name}) (b {name}))\n  (if (eq b {}) (ret a))\n  (ret ({operator} a b)))\n",
                zero.lisp
            ));
            c.push_str(&format!(
                "static {c_type} fz_{operator}_{tag}({c_type} a, {c_type} b) {{\n  if (b == 0) return a;\n  return ({c_type})(({unsigned})a {c_operator} ({unsigned})b);\n}}\n"
            ));
        }
        // Inside these bounds the truncated value fits every type's range.
        let bound = match ty {
            Ty::I8 => "127.0",
            Ty::I16 => "32767.0",
            Ty::I32 => "2147483647.0",
            _ => "9.0e18",
        };
        lisp.push_str(&format!(
            "(define ((fz_f2i_{tag} {name}) (x double))\n  (if (and (fge x (double -{bound})) (fle x (double {bound}))) (ret (fptosi x {name})))\n  (ret {}))\n",
            zero.lisp
        ));
        c.push_str(&format!(
            "static {c_type} fz_f2i_{tag}(double x) {{\n  if ((x >= -{bound}) & (x <= {bound})) return ({c_type})x;\n  return 0;\n}}\n"
        ));
    }
    lisp.push_str(
        "(define ((fz_print_double void) (x double))\n  (if (feq x x) (call printf \"%.17g\\n\" x) (call printf \"nan\\n\")))\n",
    );
    c.push_str("static void fz_print_double(double x) {\n  if (x == x) printf(\"%.17g\\n\", x); else printf(\"nan\\n\");\n}\n\n");
    (lisp, c)
}

#[cfg(test)]
mod tests {
    use super::generate;

    #[test]
    fn programs_are_deterministic_and_balanced() {
        for case in 0..50 {
            let twin = generate(1, case);
            assert_eq!(twin.clisp, generate(1, case).clisp);
            let depth = twin.clisp.chars().try_fold(0i64, |depth, character| {
                let depth = depth + i64::from(character == '(') - i64::from(character == ')');
                (depth >= 0).then_some(depth)
            });
            assert_eq!(depth, Some(0), "{}", twin.clisp);
            assert!(twin.c.contains("int main(void)"));
        }
    }
}
