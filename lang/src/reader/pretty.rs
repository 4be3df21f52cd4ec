//! The pretty-printer: a form as indented C-Lisp text (`:expand`, listings, Rhai's `show`).

use super::Sexp;

const WIDTH: usize = 100;

/// A form as indented C-Lisp text: definitions and loops one statement per line, anything
/// else on one line when it fits.
pub(crate) fn pretty(form: &Sexp, indent: usize) -> String {
    let flat = form.to_string();
    let Some(items) = form.list() else { return flat };
    let head = form.head().unwrap_or("");
    let always_break =
        head.starts_with("define") && items.len() > 2 || matches!(head, "c-lisp" | "cuda-lisp" | "brilisp");
    let body_from = match head {
        _ if head.starts_with("define") => 2,
        "for" | "while" => 2,
        "if" => 2,
        _ => 1,
    };
    let loop_breaks = matches!(head, "for" | "while") && items.len() > 3;
    if !always_break && !loop_breaks && indent + flat.len() <= WIDTH {
        return flat;
    }
    if items.len() <= body_from {
        return flat;
    }
    let mut text = String::from("(");
    let first: Vec<String> = items[..body_from].iter().map(|item| item.to_string()).collect();
    text.push_str(&first.join(" "));
    let mut rest = &items[body_from..];
    // Ordinary forms keep their first operand on the head's line, Lisp style.
    if body_from == 1 && !always_break {
        if let Some((operand, others)) = rest.split_first() {
            text.push(' ');
            text.push_str(&pretty(operand, indent + text.len()));
            rest = others;
        }
    }
    for item in rest {
        text.push('\n');
        text.push_str(&" ".repeat(indent + 2));
        text.push_str(&pretty(item, indent + 2));
    }
    text.push(')');
    text
}
