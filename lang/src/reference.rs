//! Reference: what each form of the language is, read from docs/language.md's own tables (and
//! its bold form headings), so that `:help FORM`, Jupyter's inspection (Shift-Tab) and the
//! document can never disagree: there is one table, the document's. A test checks that every
//! form, opcode, cast and type name (`check::FORM_NAMES`) has an entry.

use std::collections::HashMap;
use std::sync::OnceLock;

/// The language reference, built into the binary.
const LANGUAGE: &str = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/language.md"));

/// One row of a reference table, or a paragraph that opens with a form, that describes a name.
#[derive(Clone, Debug)]
struct Entry {
    /// The section it is in (`§3.5 Expressions`).
    section: String,
    /// The row's cells, each with its column's heading (empty for the first column).
    cells: Vec<(String, String)>,
    /// Whether the name heads a form there (`(ptradd p i)`), not just one of a list
    /// (`rhai, bench, launch …` → `§6–§9`), which is shown only when nothing better is.
    heads: bool,
}

/// Every name the document's tables describe, in document order per name.
fn entries() -> &'static HashMap<String, Vec<Entry>> {
    static ENTRIES: OnceLock<HashMap<String, Vec<Entry>>> = OnceLock::new();
    ENTRIES.get_or_init(|| read(LANGUAGE))
}

/// What `:help NAME` and inspection show of a form, opcode or type name: each row that
/// describes it, with its section; `None` when the document describes no such name.
pub(crate) fn describe(name: &str) -> Option<String> {
    let found = entries().get(name)?;
    // The rows where it heads a form, of the first section that has one (`define`'s of §3.2,
    // not §3.3's `(define ((print int) …))`); else every row that names it.
    let heads = found.iter().find(|entry| entry.heads).map(|entry| entry.section.as_str());
    let shown = found.iter().filter(|entry| heads.is_none_or(|section| entry.heads && entry.section == section));
    let mut text = String::new();
    for entry in shown.take(4) {
        let mut cells = entry.cells.iter().filter(|(_, cell)| !cell.is_empty());
        let Some((_, first)) = cells.next() else { continue };
        text.push_str(&format!("{first}    ({})\n", entry.section));
        for (heading, cell) in cells {
            match heading.as_str() {
                "" => text.push_str(&format!("  {cell}\n")),
                heading => text.push_str(&format!("  {heading}: {cell}\n")),
            }
        }
    }
    text.push_str("docs/language.md has the details");
    Some(text)
}

/// Reads the document: table rows whose first cell names forms in backticks, and paragraphs
/// that open with a form (`` `(bench EXPR …)` repeats… ``, `**`(include "HEADER"…)`**`), with
/// their first sentence.
fn read(document: &str) -> HashMap<String, Vec<Entry>> {
    let mut entries: HashMap<String, Vec<Entry>> = HashMap::new();
    let mut add = |names: Vec<(String, bool)>, section: &str, cells: Vec<(String, String)>| {
        for (name, heads) in names {
            entries.entry(name).or_default().push(Entry { section: section.to_string(), cells: cells.clone(), heads });
        }
    };
    let mut section = String::new();
    let mut headings: Vec<String> = Vec::new();
    let lines: Vec<&str> = document.lines().collect();
    let mut in_code = false;
    for (index, line) in lines.iter().enumerate() {
        let previous = if index == 0 { "" } else { lines[index - 1] };
        if line.starts_with("```") {
            in_code = !in_code;
        }
        if in_code {
            continue;
        }
        if let Some(title) = line.strip_prefix("### ").or_else(|| line.strip_prefix("## ")) {
            section = section_name(title);
        } else if line.starts_with("| ---") {
            headings = cells(previous).into_iter().map(|heading| plain(&heading)).collect();
        } else if line.starts_with('|') && !headings.is_empty() {
            let row = cells(line);
            let Some(first) = row.first() else { continue };
            let described = row
                .iter()
                .enumerate()
                .map(|(column, cell)| {
                    let heading =
                        if column == 0 { String::new() } else { headings.get(column).cloned().unwrap_or_default() };
                    (heading, plain(cell))
                })
                .collect();
            add(names_in(first), &section, described);
        } else if previous.trim().is_empty() {
            let opening = line.trim_start_matches("**").trim_start_matches("[Quasi] ");
            if let Some(rest) = opening.strip_prefix("`(") {
                let Some((signature, after)) = rest.split_once('`') else { continue };
                let name: String = signature.chars().take_while(|&c| c != ' ' && c != ')').collect();
                // The paragraph, to the end of its first sentence.
                let mut paragraph = after.trim_start_matches("**").to_string();
                for next in lines[index + 1..].iter().take_while(|next| !next.trim().is_empty()) {
                    paragraph.push(' ');
                    paragraph.push_str(next.trim());
                }
                let sentence = first_sentence(&paragraph);
                let cells = vec![(String::new(), format!("({signature}")), (String::new(), plain(&sentence))];
                add(vec![(name, true)], &section, cells);
            }
        }
        if !line.starts_with('|') {
            headings.clear();
        }
    }
    entries
}

/// A paragraph's text up to the end of its first sentence (a `.` before a space and a capital
/// letter, or the end).
fn first_sentence(paragraph: &str) -> String {
    let text = paragraph.trim().trim_start_matches("[Quasi]").trim();
    let characters: Vec<char> = text.chars().collect();
    let mut end = characters.len();
    for (index, window) in characters.windows(3).enumerate() {
        if window[0] == '.' && window[1] == ' ' && window[2].is_uppercase() {
            end = index + 1;
            break;
        }
    }
    // A long sentence is cut at a word, past which the document goes on.
    if end > SENTENCE_LIMIT {
        let cut = characters[..SENTENCE_LIMIT].iter().rposition(|&c| c == ' ').unwrap_or(SENTENCE_LIMIT);
        return format!("{} …", characters[..cut].iter().collect::<String>().trim_end_matches([',', ';', ':']));
    }
    characters[..end].iter().collect()
}

/// How much of a paragraph's first sentence inspection shows.
const SENTENCE_LIMIT: usize = 320;

/// `§3.5 Expressions` of `3.5 Expressions`, `§8 Inspection…` of `8. Inspection…`.
fn section_name(title: &str) -> String {
    let title = plain(title);
    match title.split_once(' ') {
        Some((number, rest)) if number.starts_with(|c: char| c.is_ascii_digit()) => {
            format!("§{} {rest}", number.trim_end_matches('.'))
        }
        _ => title,
    }
}

/// A table row's cells (`\|` is a bar inside a cell).
fn cells(line: &str) -> Vec<String> {
    let inner = line.trim().trim_start_matches('|').trim_end_matches('|');
    let mut cells = vec![String::new()];
    let mut characters = inner.chars().peekable();
    while let Some(character) = characters.next() {
        if character == '|' {
            cells.push(String::new());
            continue;
        }
        let Some(cell) = cells.last_mut() else { continue };
        if character == '\\' && characters.peek() == Some(&'|') {
            cell.push('|');
            characters.next();
        } else {
            cell.push(character);
        }
    }
    cells.into_iter().map(|cell| cell.trim().to_string()).collect()
}

/// A cell as plain text: no backticks, bold or `[Quasi]` marks.
fn plain(cell: &str) -> String {
    cell.replace("[Quasi] ", "").replace("[Quasi]", "").replace("**", "").replace('`', "").trim().to_string()
}

/// The names a first cell describes, each with whether it heads a form there: the head of each
/// backticked form (`(add a b)` → `add`) and the lowercase heads nested in it (`grid` of
/// `(launch K (grid X) …)`: not heads), and each bare word of a backticked run of names
/// (`` `ne lt gt` ``, `` `float` ``: heads when they open the cell).
fn names_in(cell: &str) -> Vec<(String, bool)> {
    let is_word = |word: &str| !word.is_empty() && word.chars().all(|c| c.is_alphanumeric() || "-_.".contains(c));
    let mut names: Vec<(String, bool)> = Vec::new();
    for (index, quoted) in cell.split('`').enumerate() {
        if index % 2 == 0 {
            continue;
        }
        let quoted = quoted.trim();
        if quoted.starts_with('(') {
            for (depth, form) in quoted.split('(').skip(1).enumerate() {
                let head: String = form.chars().take_while(|&c| c != ' ' && c != ')').collect();
                // Uppercase nested heads are placeholders (`(NAME RET)`).
                if is_word(&head) && (depth == 0 || !head.chars().any(char::is_uppercase)) {
                    names.push((head, depth == 0));
                }
            }
        } else if quoted.split(' ').all(is_word) {
            // A run that opens the cell names what the row is about (`int8 int16`); later runs
            // are a list (`rhai`, `bench`, … → §6–§9).
            let opens = index == 1 && cell.trim_start().starts_with('`');
            names.extend(quoted.split(' ').map(|word| (word.to_string(), opens)));
        }
    }
    let mut seen = std::collections::HashSet::new();
    names.retain(|(name, _)| seen.insert(name.clone()));
    names
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_form_opcode_and_type_has_an_entry() {
        let missing: Vec<&str> =
            crate::check::FORM_NAMES.iter().copied().filter(|name| super::describe(name).is_none()).collect();
        assert!(missing.is_empty(), "docs/language.md describes none of {missing:?} in a table");
    }

    #[test]
    fn an_entry_is_its_row_with_the_columns_headings() {
        let text = super::describe("ptradd").expect("ptradd is in the expressions table");
        assert!(text.starts_with("(ptradd p i)    (§3.5"), "{text}");
        assert!(text.contains("  C: p + i\n"), "{text}");
        let text = super::describe("ne").expect("ne shares eq's row");
        assert!(text.starts_with("(eq a b) ne lt gt le ge"), "{text}");
    }
}
