//! Highlighting: listings coloured by the Sublime grammars in `repl/syntaxes/` (LLVM IR, x86-64
//! assembly, PTX, C-Lisp), as ANSI text for terminals and as classed HTML for notebooks, with one
//! table of tones from scopes to colours for both.
//!
//! The HTML carries scopes as CSS classes (`ql-keyword ql-instruction ql-llvm`), and `css` maps
//! them to JupyterLab's editor colours, so a theme switch recolours a listing already shown.
//! The terminal gets the 16 colours whose shades the terminal's own palette decides.

use std::fmt::Write as _;
use std::sync::LazyLock;

use quasi_lang::Language;
use syntect::html::{ClassStyle, ClassedHTMLGenerator};
use syntect::parsing::{ParseState, Scope, ScopeStack, SyntaxDefinition, SyntaxReference, SyntaxSet, SyntaxSetBuilder};
use syntect::util::LinesWithEndings;

/// The prefix of every class `html` writes, so no stylesheet of the page styles them by accident.
const CLASS_PREFIX: &str = "ql-";

/// Listings longer than this are shown plain. The LLVM IR grammar, the slowest, takes about
/// 60 µs a line in a release build (10 µs for assembly and PTX), so this bounds the cost near a
/// third of a second; a listing this long is read by searching, not by colour.
const MAX_HIGHLIGHTED_BYTES: usize = 256 * 1024;

/// Each grammar with the name it declares.
const GRAMMARS: [(Language, &str, &str); 4] = [
    (Language::CLisp, "C-Lisp", include_str!("../syntaxes/c-lisp.sublime-syntax")),
    (Language::LlvmIr, "LLVM IR", include_str!("../syntaxes/llvm.sublime-syntax")),
    (Language::Assembly, "x86-64 assembly (AT&T)", include_str!("../syntaxes/x86-64.sublime-syntax")),
    (Language::Ptx, "PTX", include_str!("../syntaxes/ptx.sublime-syntax")),
];

/// The grammars, read once; syntect compiles each regular expression when it is first needed.
static SYNTAXES: LazyLock<SyntaxSet> = LazyLock::new(|| {
    let mut builder = SyntaxSetBuilder::new();
    for (_, name, text) in GRAMMARS {
        // The grammars are part of the program, and `tests::every_grammar_loads` reads them all.
        let definition = SyntaxDefinition::load_from_str(text, true, None)
            .unwrap_or_else(|error| panic!("the grammar `{name}` in repl/syntaxes does not load: {error}"));
        builder.add(definition);
    }
    builder.build()
});

fn syntax(language: Language) -> Option<&'static SyntaxReference> {
    let (_, name, _) = GRAMMARS.iter().find(|(grammar, _, _)| *grammar == language)?;
    SYNTAXES.find_syntax_by_name(name)
}

/// How one kind of token looks.
struct Tone {
    /// Scope atoms that a scope must all have, in any order, as a CSS rule of classes matches
    /// (`keyword.directive` matches `keyword.directive.ptx`).
    selector: &'static str,
    /// CSS declarations: a JupyterLab theme variable, with the light theme's value as fallback.
    css: &'static str,
    /// An SGR code for terminals, or none for text left in the terminal's own colour.
    ansi: Option<&'static str>,
}

/// The tones, as CSS applies them: of the tones whose atoms a scope has, the one with most atoms
/// wins, then the later one; a token takes the tone of its innermost scope that has one.
/// Every rule sets weight and style too, so an inner tone never inherits an outer one's bold.
const TONES: &[Tone] = &[
    Tone {
        selector: "comment",
        css: "color: var(--jp-mirror-editor-comment-color, #408080); font-weight: normal; font-style: italic",
        ansi: Some("90"),
    },
    Tone { selector: "string", css: "color: var(--jp-mirror-editor-string-color, #ba2121)", ansi: Some("31") },
    Tone { selector: "constant.numeric", css: "color: var(--jp-mirror-editor-number-color, #080)", ansi: Some("33") },
    Tone { selector: "constant.language", css: "color: var(--jp-mirror-editor-atom-color, #88f)", ansi: Some("33") },
    Tone { selector: "constant.other", css: "color: var(--jp-mirror-editor-atom-color, #88f)", ansi: Some("33") },
    Tone { selector: "constant.character", css: "color: var(--jp-mirror-editor-atom-color, #88f)", ansi: Some("1;31") },
    Tone {
        selector: "keyword",
        css: "color: var(--jp-mirror-editor-keyword-color, #008000); font-weight: bold",
        ansi: Some("1;32"),
    },
    Tone {
        selector: "keyword.operator",
        css: "color: var(--jp-mirror-editor-operator-color, #a2f); font-weight: bold",
        ansi: Some("35"),
    },
    Tone {
        selector: "keyword.directive",
        css: "color: var(--jp-mirror-editor-operator-color, #a2f); font-weight: normal",
        ansi: Some("35"),
    },
    Tone {
        selector: "support.function",
        css: "color: var(--jp-mirror-editor-builtin-color, #008000); font-weight: normal",
        ansi: Some("32"),
    },
    Tone { selector: "storage.type", css: "color: var(--jp-mirror-editor-variable-3-color, #085)", ansi: Some("36") },
    Tone {
        selector: "entity.name.type",
        css: "color: var(--jp-mirror-editor-variable-3-color, #085)",
        ansi: Some("36"),
    },
    // Modifiers (alignment, linkage, flags, state spaces) matter least: dimmed, not coloured.
    Tone {
        selector: "storage.modifier",
        css: "color: var(--jp-content-font-color2, rgba(0, 0, 0, 0.54)); font-weight: normal",
        ansi: Some("2"),
    },
    Tone { selector: "entity.name", css: "color: var(--jp-mirror-editor-def-color, #00f)", ansi: Some("34") },
    Tone { selector: "variable.function", css: "color: var(--jp-mirror-editor-def-color, #00f)", ansi: Some("34") },
    Tone { selector: "variable.other.global", css: "color: var(--jp-mirror-editor-def-color, #00f)", ansi: Some("34") },
    Tone {
        selector: "entity.name.label",
        css: "color: var(--jp-mirror-editor-string-2-color, #708)",
        ansi: Some("1;35"),
    },
    // Locals and registers are every other word of IR and assembly: coloured in notebooks, where
    // the theme's shade is quiet, and left alone in terminals.
    Tone { selector: "variable", css: "color: var(--jp-mirror-editor-variable-2-color, #05a)", ansi: None },
    Tone {
        selector: "variable.unquote",
        css: "color: var(--jp-mirror-editor-string-2-color, #708); font-weight: bold",
        ansi: Some("1;35"),
    },
];

impl Tone {
    fn atoms(&self) -> impl Iterator<Item = &'static str> {
        self.selector.split('.')
    }

    fn matches(&self, scope_atoms: &[String]) -> bool {
        self.atoms().all(|atom| scope_atoms.iter().any(|scope_atom| scope_atom == atom))
    }
}

/// The tone of a token under `stack`, as the CSS of `css` would colour it.
fn tone_of(stack: &[Scope]) -> Option<&'static Tone> {
    stack.iter().rev().find_map(|scope| {
        let atoms: Vec<String> = scope.build_string().split('.').map(str::to_string).collect();
        TONES
            .iter()
            .enumerate()
            .filter(|(_, tone)| tone.matches(&atoms))
            .max_by_key(|(index, tone)| (tone.atoms().count(), *index))
            .map(|(_, tone)| tone)
    })
}

/// The CSS rules that colour `html`'s classes inside elements matching `container`.
pub fn css(container: &str) -> String {
    let mut rules = String::new();
    for tone in TONES {
        let classes: String = tone.atoms().map(|atom| format!(".{CLASS_PREFIX}{atom}")).collect();
        let _ = writeln!(rules, "{container} {classes} {{ {} }}", tone.css);
    }
    rules
}

/// `text` as HTML for a `<pre>`: escaped, each scope a `<span>` with its atoms as classes.
pub fn html(language: Language, text: &str) -> String {
    highlighted_html(language, text).unwrap_or_else(|| escape(text))
}

fn highlighted_html(language: Language, text: &str) -> Option<String> {
    if text.len() > MAX_HIGHLIGHTED_BYTES {
        return None;
    }
    let style = ClassStyle::SpacedPrefixed { prefix: CLASS_PREFIX };
    let mut generator = ClassedHTMLGenerator::new_with_class_style(syntax(language)?, &SYNTAXES, style);
    for line in LinesWithEndings::from(text) {
        generator.parse_html_for_line_which_includes_newline(line).ok()?;
    }
    Some(generator.finalize())
}

/// `text` with ANSI colours; no escape sequence spans a line end, so every line stands alone
/// (for pagers, and for a terminal that is cut off mid-listing).
pub fn ansi(language: Language, text: &str) -> String {
    let Some(pieces) = pieces(language, text) else { return text.to_string() };
    let mut coloured = String::with_capacity(text.len() * 2);
    for (piece, stack) in pieces {
        match tone_of(stack.as_slice()).and_then(|tone| tone.ansi) {
            Some(code) => {
                for (index, part) in piece.split('\n').enumerate() {
                    if index > 0 {
                        coloured.push('\n');
                    }
                    if !part.is_empty() {
                        let _ = write!(coloured, "\x1b[{code}m{part}\x1b[0m");
                    }
                }
            }
            None => coloured.push_str(piece),
        }
    }
    coloured
}

/// `text` cut where its scopes change, each piece with the scopes in force; `None` when the
/// listing is too long or the grammar fails on it.
fn pieces(language: Language, text: &str) -> Option<Vec<(&str, ScopeStack)>> {
    if text.len() > MAX_HIGHLIGHTED_BYTES {
        return None;
    }
    let mut state = ParseState::new(syntax(language)?);
    let mut stack = ScopeStack::new();
    let mut pieces = Vec::new();
    for line in LinesWithEndings::from(text) {
        let operations = state.parse_line(line, &SYNTAXES).ok()?;
        let mut start = 0;
        for (index, operation) in operations {
            if index > start {
                pieces.push((&line[start..index], stack.clone()));
                start = index;
            }
            stack.apply(&operation).ok()?;
        }
        if start < line.len() {
            pieces.push((&line[start..], stack.clone()));
        }
    }
    Some(pieces)
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use expect_test::{expect, Expect};
    use quasi_lang::Language;

    /// Each coloured token, one a line, with its innermost scope and the tone that colours it.
    fn check(language: Language, text: &str, expected: Expect) {
        let pieces = super::pieces(language, text).expect("the grammar parses the text");
        let mut shown = String::new();
        for (piece, stack) in pieces {
            let scopes = stack.as_slice();
            let (Some(innermost), Some(tone)) = (scopes.last(), super::tone_of(scopes)) else { continue };
            if !piece.trim().is_empty() {
                let scope = innermost.build_string();
                shown.push_str(&format!("{:<12} {scope:<40} {}\n", piece.trim(), tone.selector));
            }
        }
        expected.assert_eq(&shown);
    }

    #[test]
    fn llvm_ir() {
        check(
            Language::LlvmIr,
            r#"@.str = private unnamed_addr constant [7 x i8] c"hi\0A\00"
define double @f(i32 %n1, ptr %p2) {
entry:                                            ; preds = %frame
  %1 = icmp slt i32 %0, 10
  br i1 %1, label %body, label %endloop
  %2 = call i32 (ptr, ...) @printf(ptr @.str, i32 %11)
  ret double 0x3FB99999A0000000
}
"#,
            expect![[r#"
                @.str        variable.other.global.llvm               variable.other.global
                private      storage.modifier.llvm                    storage.modifier
                unnamed_addr storage.modifier.llvm                    storage.modifier
                constant     keyword.declaration.llvm                 keyword
                7            constant.numeric.llvm                    constant.numeric
                i8           storage.type.llvm                        storage.type
                c            string.quoted.double.llvm                string
                "            punctuation.definition.string.begin.llvm string
                hi           string.quoted.double.llvm                string
                \0A          constant.character.escape.llvm           constant.character
                \00          constant.character.escape.llvm           constant.character
                "            punctuation.definition.string.end.llvm   string
                define       keyword.declaration.llvm                 keyword
                double       storage.type.llvm                        storage.type
                @f           entity.name.function.llvm                entity.name
                i32          storage.type.llvm                        storage.type
                %n1          variable.other.local.llvm                variable
                ptr          storage.type.llvm                        storage.type
                %p2          variable.other.local.llvm                variable
                entry        entity.name.label.llvm                   entity.name.label
                ; preds = %frame comment.line.semicolon.llvm              comment
                %1           variable.other.local.llvm                variable
                icmp         keyword.instruction.llvm                 keyword
                slt          keyword.operator.predicate.llvm          keyword.operator
                i32          storage.type.llvm                        storage.type
                %0           variable.other.local.llvm                variable
                10           constant.numeric.llvm                    constant.numeric
                br           keyword.control.llvm                     keyword
                i1           storage.type.llvm                        storage.type
                %1           variable.other.local.llvm                variable
                label        storage.type.llvm                        storage.type
                %body        variable.other.local.llvm                variable
                label        storage.type.llvm                        storage.type
                %endloop     variable.other.local.llvm                variable
                %2           variable.other.local.llvm                variable
                call         keyword.instruction.llvm                 keyword
                i32          storage.type.llvm                        storage.type
                ptr          storage.type.llvm                        storage.type
                @printf      entity.name.function.llvm                entity.name
                ptr          storage.type.llvm                        storage.type
                @.str        variable.other.global.llvm               variable.other.global
                i32          storage.type.llvm                        storage.type
                %11          variable.other.local.llvm                variable
                ret          keyword.control.llvm                     keyword
                double       storage.type.llvm                        storage.type
                0x3FB99999A0000000 constant.numeric.llvm                    constant.numeric
            "#]],
        );
    }

    #[test]
    fn assembly() {
        check(
            Language::Assembly,
            r#"f:                                      # @f
	subq	$40, %rsp
	vaddsd	(%rcx,%rdx,8), %xmm0, %xmm0
	jge	.LBB0_3
.LBB0_3:
	callq	printf@PLT
	movq	"g#g1"@GOTPCREL(%rip), %rax
	.p2align	4, 0x90
	.asciz	"hi %d\n"
"#,
            expect![[r#"
                f            entity.name.label.asm                    entity.name.label
                # @f         comment.line.number-sign.asm             comment
                subq         keyword.instruction.asm                  keyword
                $40          constant.numeric.immediate.asm           constant.numeric
                %rsp         variable.other.register.asm              variable
                vaddsd       keyword.instruction.asm                  keyword
                %rcx         variable.other.register.asm              variable
                %rdx         variable.other.register.asm              variable
                8            constant.numeric.asm                     constant.numeric
                %xmm0        variable.other.register.asm              variable
                %xmm0        variable.other.register.asm              variable
                jge          keyword.instruction.asm                  keyword
                .LBB0_3      entity.name.label.asm                    entity.name.label
                .LBB0_3      entity.name.label.asm                    entity.name.label
                callq        keyword.instruction.asm                  keyword
                printf       variable.other.global.asm                variable.other.global
                @PLT         storage.modifier.relocation.asm          storage.modifier
                movq         keyword.instruction.asm                  keyword
                "g#g1"       variable.other.global.asm                variable.other.global
                @GOTPCREL    storage.modifier.relocation.asm          storage.modifier
                %rip         variable.other.register.asm              variable
                %rax         variable.other.register.asm              variable
                .p2align     keyword.directive.asm                    keyword.directive
                4            constant.numeric.asm                     constant.numeric
                0x90         constant.numeric.asm                     constant.numeric
                .asciz       keyword.directive.asm                    keyword.directive
                "            punctuation.definition.string.begin.asm  string
                hi %d        string.quoted.double.asm                 string
                \n           constant.character.escape.asm            constant.character
                "            punctuation.definition.string.end.asm    string
            "#]],
        );
    }

    #[test]
    fn ptx() {
        check(
            Language::Ptx,
            r#"// Generated by LLVM NVPTX Back-End
.target sm_90
.visible .entry k(
	.param .u64 k_param_0
)
{
	.reg .b32 	%r<3>;
	ld.param.u64 	%rd1, [k_param_0];
	mov.u32 	%r1, %tid.x;
	@%p1 bra 	$L__BB0_2;
	mov.b32 	%r2, 1065353216;
$L__BB0_2:
	ret;
}
"#,
            expect![[r#"
                // Generated by LLVM NVPTX Back-End comment.line.double-slash.ptx            comment
                .target      keyword.directive.ptx                    keyword.directive
                .visible     keyword.directive.ptx                    keyword.directive
                .entry       keyword.directive.ptx                    keyword.directive
                k            entity.name.function.ptx                 entity.name
                .param       keyword.directive.ptx                    keyword.directive
                .u64         storage.type.ptx                         storage.type
                .reg         keyword.directive.ptx                    keyword.directive
                .b32         storage.type.ptx                         storage.type
                %r           variable.other.register.ptx              variable
                3            constant.numeric.ptx                     constant.numeric
                ld           keyword.instruction.ptx                  keyword
                .param       storage.modifier.ptx                     storage.modifier
                .u64         storage.type.ptx                         storage.type
                %rd1         variable.other.register.ptx              variable
                mov          keyword.instruction.ptx                  keyword
                .u32         storage.type.ptx                         storage.type
                %r1          variable.other.register.ptx              variable
                %tid.x       variable.language.register.ptx           variable
                @%p1         variable.other.predicate.ptx             variable
                bra          keyword.instruction.ptx                  keyword
                $L__BB0_2    entity.name.label.ptx                    entity.name.label
                mov          keyword.instruction.ptx                  keyword
                .b32         storage.type.ptx                         storage.type
                %r2          variable.other.register.ptx              variable
                1065353216   constant.numeric.ptx                     constant.numeric
                $L__BB0_2    entity.name.label.ptx                    entity.name.label
                ret          keyword.instruction.ptx                  keyword
            "#]],
        );
    }

    #[test]
    fn c_lisp() {
        check(
            Language::CLisp,
            r#"(define ((sq int) (x (ptr float))) ; squares
  (declare s double)
  (for ((set i 0) (lt i 10) (set i (add i 1)))
    (call printf "%d\n" #t -0x10 1.5e3))
  (ret (mul:int x:int 2:int)))
(define-global (total int64) (const 0))
(add 1 ,(incr x 2) ,n ,@(body) `(f))
#| block #| nested |# |# tmp#1
:ir sq
"#,
            expect![[r#"
                define       keyword.declaration.c-lisp               keyword
                sq           entity.name.function.c-lisp              entity.name
                int          storage.type.c-lisp                      storage.type
                ptr          storage.type.c-lisp                      storage.type
                float        storage.type.c-lisp                      storage.type
                ; squares    comment.line.semicolon.c-lisp            comment
                declare      keyword.control.c-lisp                   keyword
                double       storage.type.c-lisp                      storage.type
                for          keyword.control.c-lisp                   keyword
                set          keyword.control.c-lisp                   keyword
                0            constant.numeric.c-lisp                  constant.numeric
                lt           support.function.opcode.c-lisp           support.function
                10           constant.numeric.c-lisp                  constant.numeric
                set          keyword.control.c-lisp                   keyword
                add          support.function.opcode.c-lisp           support.function
                1            constant.numeric.c-lisp                  constant.numeric
                call         keyword.control.c-lisp                   keyword
                printf       variable.function.c-lisp                 variable.function
                "            punctuation.definition.string.begin.c-lisp string
                %d           string.quoted.double.c-lisp              string
                \n           constant.character.escape.c-lisp         constant.character
                "            punctuation.definition.string.end.c-lisp string
                #t           constant.language.boolean.c-lisp         constant.language
                -0x10        constant.numeric.c-lisp                  constant.numeric
                1.5e3        constant.numeric.c-lisp                  constant.numeric
                ret          keyword.control.c-lisp                   keyword
                mul          support.function.opcode.c-lisp           support.function
                int          storage.type.c-lisp                      storage.type
                int          storage.type.c-lisp                      storage.type
                2            constant.numeric.c-lisp                  constant.numeric
                int          storage.type.c-lisp                      storage.type
                define-global keyword.declaration.c-lisp               keyword
                total        entity.name.variable.c-lisp              entity.name
                int64        storage.type.c-lisp                      storage.type
                const        keyword.control.c-lisp                   keyword
                0            constant.numeric.c-lisp                  constant.numeric
                add          support.function.opcode.c-lisp           support.function
                1            constant.numeric.c-lisp                  constant.numeric
                ,            keyword.operator.unquote.c-lisp          keyword.operator
                incr         variable.function.unquote.c-lisp         variable.unquote
                2            constant.numeric.c-lisp                  constant.numeric
                ,            keyword.operator.unquote.c-lisp          keyword.operator
                n            variable.other.unquote.c-lisp            variable.unquote
                ,@           keyword.operator.unquote.c-lisp          keyword.operator
                body         variable.function.unquote.c-lisp         variable.unquote
                `            keyword.operator.quasiquote.c-lisp       keyword.operator
                #|           punctuation.definition.comment.begin.c-lisp comment
                block        comment.block.c-lisp                     comment
                #|           punctuation.definition.comment.begin.c-lisp comment
                nested       comment.block.c-lisp                     comment
                |#           punctuation.definition.comment.end.c-lisp comment
                |#           punctuation.definition.comment.end.c-lisp comment
                :ir          keyword.other.command.c-lisp             keyword
            "#]],
        );
    }

    #[test]
    fn every_grammar_loads() {
        for (language, name, _) in super::GRAMMARS {
            assert!(super::syntax(language).is_some(), "no grammar named `{name}`");
        }
    }
}
