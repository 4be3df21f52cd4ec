//! Completion: candidates for the word before the cursor — session names, forms and opcodes,
//! or `:commands` — read from the environment without running anything.

use super::api::{Completion, CompletionKind};
use super::report;
use super::Session;
use crate::check;

impl Session {
    /// Completion candidates for the word that ends at byte `cursor` of `text`: session names,
    /// forms and opcodes, or `:commands` at the start of a line. Returns the byte offset where
    /// the word starts and the sorted candidates.
    pub fn completions(&self, text: &str, cursor: usize) -> (usize, Vec<String>) {
        let (start, items) = self.completion_items(text, cursor);
        (start, items.into_iter().map(|item| item.text).collect())
    }

    /// `completions` with what each candidate is: its kind and a detail (a function's signature,
    /// a global's type, a command's description). Asks nothing of the session's code and changes
    /// nothing: no cell runs.
    pub fn completion_items(&self, text: &str, cursor: usize) -> (usize, Vec<Completion>) {
        let cursor = cursor.min(text.len());
        let cursor = (0..=cursor).rev().find(|index| text.is_char_boundary(*index)).unwrap_or(0);
        let before = &text[..cursor];
        let start = before
            .rfind(|character: char| character.is_whitespace() || "()[]\"`,;".contains(character))
            .map_or(0, |index| index + 1);
        let word = &before[start..];
        if let Some(headers) = header_completions(&before[..start], before) {
            return headers;
        }
        // The first operand of `call` and `fn-ptr` is a function: nothing else completes there.
        let opened = before[..start].trim_end();
        let function_only = (opened.ends_with("(call") || opened.ends_with("(fn-ptr")) && opened.len() < start;
        let mut items: Vec<Completion> = if word.starts_with(':') && before[..start].trim().is_empty() {
            crate::command::COMMANDS
                .iter()
                .map(|(usage, description)| Completion {
                    text: crate::command::command_name(usage).to_string(),
                    kind: CompletionKind::Command,
                    detail: format!("{usage}: {description}"),
                })
                .collect()
        } else {
            let functions = self.env.functions.iter().map(|(name, entry)| Completion {
                text: name.clone(),
                kind: CompletionKind::Function,
                detail: format!("{}{}", entry.signature, report::function_note(entry, false)),
            });
            let globals = self.env.globals.iter().map(|(name, entry)| Completion {
                text: name.clone(),
                kind: CompletionKind::Global,
                detail: entry.ty.to_string(),
            });
            let structs = self.env.structs.iter().map(|(name, entry)| Completion {
                text: name.clone(),
                kind: CompletionKind::Struct,
                detail: report::struct_line(name, entry),
            });
            let forms = check::FORM_NAMES.iter().map(|name| Completion {
                text: name.to_string(),
                kind: CompletionKind::Form,
                detail: String::new(),
            });
            if function_only {
                functions.collect()
            } else {
                functions.chain(globals).chain(structs).chain(forms).collect()
            }
        };
        items.retain(|item| item.text.starts_with(word));
        items.sort_by(|left, right| left.text.cmp(&right.text));
        items.dedup_by(|later, earlier| later.text == earlier.text);
        (start, items)
    }
}

/// Inside the string of `(include "…`: header files and folders whose path starts with what is
/// typed, from QUASI_INCLUDE_PATH and the system's include folders (where libclang looks).
/// Returns where the typed path starts and the candidates, or `None` anywhere else.
fn header_completions(opened: &str, before: &str) -> Option<(usize, Vec<Completion>)> {
    let quote = opened.rfind('"')?;
    // The string is open (an odd number of quotes before it) and belongs to an `include`.
    if opened.matches('"').count().is_multiple_of(2) {
        return None;
    }
    let form = &opened[opened[..quote].rfind('(')?..quote];
    if form.split_whitespace().next() != Some("(include") {
        return None;
    }
    let start = quote + 1;
    let typed = &before[start..];
    let (folder, prefix) = typed.rsplit_once('/').map_or(("", typed), |(folder, prefix)| (folder, prefix));
    let roots = crate::header::include_path()
        .into_iter()
        .map(std::path::PathBuf::from)
        .chain(["/usr/local/include", "/usr/include/x86_64-linux-gnu", "/usr/include"].map(std::path::PathBuf::from));
    let mut items = Vec::new();
    for root in roots {
        let Ok(entries) = std::fs::read_dir(root.join(folder)) else { continue };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let is_folder = entry.file_type().is_ok_and(|kind| kind.is_dir());
            if !name.starts_with(prefix) || !(is_folder || name.ends_with(".h")) {
                continue;
            }
            let path = if folder.is_empty() { name } else { format!("{folder}/{name}") };
            let detail = entry.path().display().to_string();
            items.push(Completion {
                text: if is_folder { format!("{path}/") } else { path },
                kind: CompletionKind::Header,
                detail,
            });
        }
    }
    items.sort_by(|left, right| left.text.cmp(&right.text));
    items.dedup_by(|later, earlier| later.text == earlier.text);
    Some((start, items))
}
