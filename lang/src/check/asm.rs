//! Inline assembly: the `asm` form, and the constraint strings and templates it takes, checked
//! here because LLVM ends the process on malformed ones.

use super::context::{arity, cast_note, syntax, type_error, BodyChecker};
use crate::reader::{Sexp, SexpKind};
use crate::tree::{AsmExpr, Expr, ExprKind};
use crate::types::Ty;

impl BodyChecker<'_, '_> {
    /// `(asm TYPE "TEMPLATE" "CONSTRAINTS" ARG…)`, or without TYPE where the context gives it
    /// (`expected`) or there are no outputs.
    pub(super) fn check_asm(&mut self, form: &Sexp, operands: &[Sexp], expected: Option<&Ty>) -> Option<Expr> {
        let shape = "inline assembly is `(asm TYPE \"TEMPLATE\" \"CONSTRAINTS\" ARG…)`";
        let typed = operands.first().is_some_and(|first| !matches!(first.kind, SexpKind::Str(_)));
        let rest = if typed { operands.get(1..).unwrap_or(&[]) } else { operands };
        let [template, constraints, arg_forms @ ..] = rest else {
            self.error(arity(form.span, shape));
            return None;
        };
        let declared = if typed { Some(self.ty(&operands[0])?) } else { None };
        let template_span = template.span;
        let (SexpKind::Str(template), SexpKind::Str(constraints_bytes)) = (&template.kind, &constraints.kind) else {
            self.error(syntax(form.span, shape).with_note("the template and the constraints are string literals"));
            return None;
        };
        let constraints_text = String::from_utf8_lossy(constraints_bytes).to_string();
        // LLVM reports malformed templates and constraints with a fatal error that would end
        // the process, so they are checked here.
        let operands = match parse_asm_constraints(&constraints_text) {
            Ok(operands) => operands,
            Err(message) => {
                self.error(
                    syntax(
                        constraints.span,
                        format!("bad inline assembly constraints `{constraints_text}`: {message}"),
                    )
                    .with_note(ASM_CONSTRAINTS_NOTE),
                );
                return None;
            }
        };
        let template_text = String::from_utf8_lossy(template).to_string();
        if let Err(message) = check_asm_template(&template_text, operands.len()) {
            self.error(
                syntax(template_span, format!("bad inline assembly template: {message}"))
                    .with_note("operands are $0, $1…, or ${0:k} with a modifier; $$ is a dollar sign"),
            );
            return None;
        }
        if nvptx_constraints(&operands) && !self.use_device(form.span, "PTX inline assembly".into()) {
            return None;
        }
        let outputs = operands.iter().filter(|operand| operand.output).count();
        let inputs = operands.len() - outputs;
        let ty = match (declared, expected) {
            (Some(ty), _) => ty,
            (None, _) if outputs == 0 => Ty::Void,
            (None, Some(expected)) => expected.clone(),
            (None, None) => {
                self.error(
                    type_error(form.span, "this inline assembly has outputs, so it needs its result type")
                        .with_note("write (asm TYPE \"TEMPLATE\" \"CONSTRAINTS\" ARG…)"),
                );
                return None;
            }
        };
        let expected_outputs = match &ty {
            Ty::Void => 0,
            Ty::Struct(name) => match self.cell.lookup_struct(name).and_then(|entry| entry.fields.as_ref()) {
                Some(fields) => fields.len(),
                None => {
                    self.error(type_error(
                        form.span,
                        format!("struct `{name}` is opaque: it cannot hold assembly outputs"),
                    ));
                    return None;
                }
            },
            Ty::Arr(..) => {
                self.error(
                    type_error(form.span, format!("inline assembly cannot produce `{ty}`"))
                        .with_note("outputs are scalars, or a struct with one field per output"),
                );
                return None;
            }
            _ => 1,
        };
        if outputs != expected_outputs {
            self.error(
                type_error(
                    constraints.span,
                    format!(
                        "inline assembly of type `{ty}` needs {expected_outputs} output constraint{}, found {outputs}",
                        if expected_outputs == 1 { "" } else { "s" }
                    ),
                )
                .with_note("outputs are the constraints starting with `=`; `void` has none, a struct one per field"),
            );
            return None;
        }
        let args: Vec<Option<Expr>> = arg_forms.iter().map(|arg| self.check_expr(arg)).collect();
        let args: Vec<Expr> = args.into_iter().collect::<Option<_>>()?;
        if args.len() != inputs {
            self.error(arity(
                form.span,
                format!(
                    "the constraints `{constraints_text}` have {inputs} input{}, but {} argument{} given",
                    if inputs == 1 { "" } else { "s" },
                    args.len(),
                    if args.len() == 1 { " is" } else { "s are" }
                ),
            ));
            return None;
        }
        if let Some(arg) = args.iter().find(|arg| !arg.ty.is_scalar()) {
            self.error(
                type_error(arg.span, format!("an inline assembly input must be a scalar, found `{}`", arg.ty))
                    .with_note("pass fields with (extractvalue s k)"),
            );
            return None;
        }
        let output_types: Vec<Ty> = match &ty {
            Ty::Void => Vec::new(),
            Ty::Struct(name) => self.struct_fields(name),
            other => vec![other.clone()],
        };
        for (operand, arg) in operands.iter().filter(|operand| !operand.output).zip(&args) {
            if operand.immediate && !matches!(arg.kind, ExprKind::Int(_)) {
                self.error(type_error(arg.span, format!("the constraint `{}` needs an integer literal", operand.text)));
                return None;
            }
            if let Some(tied) = operand.tied {
                match output_types.get(tied) {
                    Some(output) if *output == arg.ty => {}
                    Some(output) => {
                        self.error(
                            type_error(
                                arg.span,
                                format!("this input is tied to output {tied}, of type `{output}`, but is `{}`", arg.ty),
                            )
                            .with_note(cast_note(&arg.ty, output)),
                        );
                        return None;
                    }
                    None => {
                        self.error(syntax(
                            constraints.span,
                            format!(
                                "the constraint `{}` ties an input to output {tied}, which does not exist",
                                operand.text
                            ),
                        ));
                        return None;
                    }
                }
            }
        }
        self.cell.cell.asm_spans.push(form.span);
        Some(Expr {
            kind: ExprKind::Asm(Box::new(AsmExpr { template: template_text, constraints: constraints_text, args })),
            ty,
            span: form.span,
        })
    }
}

const ASM_CONSTRAINTS_NOTE: &str =
    "outputs (=r, =x, ={eax}…) come first, then inputs (r, x, m, i, g, a tied 0…), then clobbers (~{memory}…)";

/// One operand constraint of inline assembly.
#[derive(Debug, PartialEq)]
struct AsmOperand {
    text: String,
    output: bool,
    /// The output a tied input (`0`) shares its register with.
    tied: Option<usize>,
    /// Only immediates fit (`i`, `n`): the argument must be a literal.
    immediate: bool,
}

/// Reads an x86-64 constraint string (`=r,=x,r,0,~{memory}`) into its operands, accepting a
/// conservative subset of what LLVM knows: outputs, then inputs, then clobbers.
fn parse_asm_constraints(text: &str) -> Result<Vec<AsmOperand>, String> {
    let mut operands: Vec<AsmOperand> = Vec::new();
    let mut seen_input = false;
    let mut seen_clobber = false;
    if text.trim().is_empty() {
        return Ok(operands);
    }
    for part in text.split(',').map(str::trim) {
        if part.is_empty() {
            return Err("an empty constraint".into());
        }
        if let Some(clobber) = part.strip_prefix('~') {
            if !(clobber.starts_with('{') && clobber.ends_with('}') && clobber.len() > 2) {
                return Err(format!("the clobber `{part}` is not `~{{NAME}}`"));
            }
            seen_clobber = true;
            continue;
        }
        if seen_clobber {
            return Err(format!("`{part}` comes after a clobber"));
        }
        if part.starts_with('+') {
            return Err(
                "`+` (read-write) constraints are not supported; use an output `=r` and a tied input `0`".into()
            );
        }
        let output = part.starts_with('=');
        let codes = part.trim_start_matches('=').trim_start_matches('&');
        if output && seen_input {
            return Err(format!("the output `{part}` comes after an input"));
        }
        if !output && part.contains('&') {
            return Err(format!("`&` (early clobber) belongs to outputs, not `{part}`"));
        }
        seen_input |= !output;
        // `l` `f` `h` are NVPTX's 64-bit, float and 16-bit registers (see `nvptx_constraints`).
        let allowed = if output { "rqQRabcdSDAxlfh" } else { "rqQRabcdSDAxmoginXlfh" };
        let mut tied = None;
        let mut letters = String::new();
        let mut rest = codes;
        if rest.is_empty() {
            return Err(format!("`{part}` names no register class"));
        }
        while let Some(character) = rest.chars().next() {
            if character == '{' {
                let end = rest.find('}').ok_or_else(|| format!("`{part}` has an unclosed register name"))?;
                let register = &rest[1..end];
                if register.is_empty() || !register.chars().all(|c| c.is_ascii_alphanumeric()) {
                    return Err(format!("`{part}` has a bad register name"));
                }
                rest = &rest[end + 1..];
            } else if character.is_ascii_digit() && !output {
                let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
                let index: usize = digits.parse().map_err(|_| format!("`{part}` ties to a bad operand number"))?;
                tied = Some(index);
                rest = &rest[digits.len()..];
            } else if allowed.contains(character) {
                letters.push(character);
                rest = &rest[1..];
            } else {
                return Err(format!(
                    "`{character}` in `{part}` is not a constraint Quasi accepts for {}",
                    if output { "outputs" } else { "inputs" }
                ));
            }
        }
        let immediate =
            !letters.is_empty() && letters.chars().all(|letter| matches!(letter, 'i' | 'n')) && tied.is_none();
        operands.push(AsmOperand { text: part.to_string(), output, tied, immediate });
    }
    Ok(operands)
}

/// Whether constraints name NVPTX's own register classes (`l`, `f`, `h`): such assembly is PTX,
/// so the code is device code (x86-64 has no such classes, and LLVM would abort on them).
fn nvptx_constraints(operands: &[AsmOperand]) -> bool {
    operands.iter().any(|operand| {
        // Letters inside `{…}` name registers (`{bl}`), not classes.
        let mut depth = 0;
        operand.text.chars().any(|letter| {
            match letter {
                '{' => depth += 1,
                '}' => depth -= 1,
                _ => {}
            }
            depth == 0 && matches!(letter, 'l' | 'f' | 'h')
        })
    })
}

/// Checks the `$` references of an inline assembly template against the operand count.
fn check_asm_template(template: &str, operands: usize) -> Result<(), String> {
    let bytes = template.as_bytes();
    let mut position = 0;
    let operand = |digits: &[u8]| -> Result<(), String> {
        let text = std::str::from_utf8(digits).unwrap_or("");
        match text.parse::<usize>() {
            Ok(index) if index < operands => Ok(()),
            Ok(index) => Err(format!(
                "`${index}` refers to operand {index}, but there {} {operands}",
                if operands == 1 { "is" } else { "are" }
            )),
            Err(_) => Err("`$` must be followed by an operand number, `{`, or `$`".into()),
        }
    };
    while position < bytes.len() {
        if bytes[position] != b'$' {
            position += 1;
            continue;
        }
        position += 1;
        match bytes.get(position) {
            Some(b'$' | b'(' | b'|' | b')') => position += 1,
            Some(b'{') => {
                let close = template[position..].find('}').ok_or("`${` is never closed")? + position;
                let inner = &template[position + 1..close];
                let (number, modifier) = inner.split_once(':').unwrap_or((inner, ""));
                operand(number.as_bytes())?;
                let single_letter = modifier.len() == 1 && modifier.chars().all(|c| c.is_ascii_alphabetic());
                if !modifier.is_empty() && !single_letter {
                    return Err(format!("`${{{inner}}}` has a bad modifier"));
                }
                position = close + 1;
            }
            _ => {
                let start = position;
                while bytes.get(position).is_some_and(u8::is_ascii_digit) {
                    position += 1;
                }
                operand(&bytes[start..position])?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use expect_test::{expect, Expect};

    fn constraints(input: &str, expected: Expect) {
        let actual = match parse_asm_constraints(input) {
            Ok(operands) => operands
                .iter()
                .map(|operand| {
                    format!(
                        "{}{}{}{}",
                        operand.text,
                        if operand.output { " out" } else { " in" },
                        operand.tied.map(|tied| format!(" tied {tied}")).unwrap_or_default(),
                        if operand.immediate { " imm" } else { "" }
                    )
                })
                .collect::<Vec<_>>()
                .join("; "),
            Err(message) => format!("error: {message}"),
        };
        expected.assert_eq(&actual);
    }

    #[test]
    fn asm_constraints() {
        constraints("", expect![[""]]);
        constraints("=r,=x,r,0,i,~{memory}", expect![["=r out; =x out; r in; 0 in tied 0; i in imm"]]);
        constraints("={eax},&r", expect![["error: `&` (early clobber) belongs to outputs, not `&r`"]]);
        constraints("=&r,{ecx}", expect![["=&r out; {ecx} in"]]);
        constraints("r,=r", expect![["error: the output `=r` comes after an input"]]);
        constraints("=r,~{cc},r", expect![["error: `r` comes after a clobber"]]);
        constraints(
            "+r",
            expect![["error: `+` (read-write) constraints are not supported; use an output `=r` and a tied input `0`"]],
        );
        constraints("=Z", expect![["error: `Z` in `=Z` is not a constraint Quasi accepts for outputs"]]);
        constraints("=m", expect![["error: `m` in `=m` is not a constraint Quasi accepts for outputs"]]);
        constraints("=r,", expect![["error: an empty constraint"]]);
        constraints("~memory", expect![["error: the clobber `~memory` is not `~{NAME}`"]]);
        constraints("={eax", expect![["error: `={eax` has an unclosed register name"]]);
        constraints("=", expect![["error: `=` names no register class"]]);
    }

    fn template(input: &str, operands: usize, expected: Expect) {
        let actual = match check_asm_template(input, operands) {
            Ok(()) => "ok".to_string(),
            Err(message) => message,
        };
        expected.assert_eq(&actual);
    }

    #[test]
    fn asm_templates() {
        template("movl $$42, $0", 1, expect![["ok"]]);
        template("movl ${1:k}, $0; $(nop$)", 2, expect![["ok"]]);
        template("movl $5, $0", 2, expect![["`$5` refers to operand 5, but there are 2"]]);
        template("movl $x, $0", 1, expect![["`$` must be followed by an operand number, `{`, or `$`"]]);
        template("ends with $", 1, expect![["`$` must be followed by an operand number, `{`, or `$`"]]);
        template("${0", 1, expect![["`${` is never closed"]]);
        template("${:uid}", 1, expect![["`$` must be followed by an operand number, `{`, or `$`"]]);
        template("${0:kk}", 1, expect![["`${0:kk}` has a bad modifier"]]);
    }
}
