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
        let mut items: Vec<Completion> = if word.starts_with(':') && before[..start].trim().is_empty() {
            crate::command::COMMANDS
                .iter()
                .map(|(usage, description)| Completion {
                    text: usage.split_whitespace().next().unwrap_or(usage).to_string(),
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
            functions.chain(globals).chain(structs).chain(forms).collect()
        };
        items.retain(|item| item.text.starts_with(word));
        items.sort_by(|left, right| left.text.cmp(&right.text));
        items.dedup_by(|later, earlier| later.text == earlier.text);
        (start, items)
    }
}
