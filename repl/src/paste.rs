//! Bracketed pastes in the line editor. rustyline inserts a paste as it came, without the
//! margins that Enter puts under continuation prompts (`MARGIN`), so `cell_text` would take the
//! first columns of each pasted line's own indentation for a margin and the cell would lose
//! them. The editor notes where each paste went (`PasteStarts`) and what it brought (settled by
//! the next paste or Enter); the cell submitted, and the validator's view of it, get a margin at
//! the start of every line a paste brought, so its own indentation is kept, neither cut nor
//! added to (Enter's indentation for open lists is not applied inside a paste either).

use std::sync::{Arc, Mutex, MutexGuard};

use rustyline::{Cmd, ConditionalEventHandler, Event, EventContext, RepeatCount};

use crate::MARGIN;

/// The pastes of the cell being edited.
#[derive(Clone, Debug, Default)]
pub(crate) struct Pastes {
    /// The last paste, until something else changes the buffer's lines: the buffer before it and
    /// where it went.
    open: Option<(String, usize)>,
    /// Earlier pastes: where each is and the text it brought.
    settled: Vec<(usize, String)>,
}

/// The editor's pastes, shared by its handlers, its validator and the main loop.
pub(crate) type PendingPastes = Arc<Mutex<Pastes>>;

pub(crate) fn lock(pending: &PendingPastes) -> MutexGuard<'_, Pastes> {
    pending.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Pastes {
    /// The open paste becomes a settled one: in `buffer`, it is what stands between the text that
    /// was before it and the text that was after it. What was typed on its lines since counts
    /// as pasted (without Enter it holds no newline). A buffer edited around it forgets it.
    pub(crate) fn settle(&mut self, buffer: &str) {
        let Some((before, at)) = self.open.take() else { return };
        let (head, tail) = before.split_at(at);
        if let Some(pasted) = buffer.strip_prefix(head).and_then(|rest| rest.strip_suffix(tail)) {
            if pasted.contains('\n') {
                self.settled.push((at, pasted.to_string()));
            }
        }
    }

    /// `buffer` with a margin after each newline a paste brought. A paste whose text is no
    /// longer where it went (the buffer was edited before it) is left as it is.
    pub(crate) fn with_margins(&self, buffer: &str) -> String {
        let mut pastes = self.clone();
        pastes.settle(buffer);
        pastes.settled.sort_by_key(|(at, _)| std::cmp::Reverse(*at));
        let mut fixed = buffer.to_string();
        let mut end = buffer.len();
        for (at, pasted) in &pastes.settled {
            // Later pastes first, and none overlapping one already given its margins.
            if at + pasted.len() <= end && buffer.get(*at..).is_some_and(|rest| rest.starts_with(pasted.as_str())) {
                fixed.replace_range(at..&(at + pasted.len()), &pasted.replace('\n', &format!("\n{MARGIN}")));
                end = *at;
            }
        }
        fixed
    }
}

/// Bound to the start of a bracketed paste: settles the last paste and notes the buffer and the
/// cursor, then lets rustyline read and insert the paste.
pub(crate) struct PasteStarts(pub(crate) PendingPastes);

impl ConditionalEventHandler for PasteStarts {
    fn handle(&self, _: &Event, _: RepeatCount, _: bool, context: &EventContext<'_>) -> Option<Cmd> {
        let mut pastes = lock(&self.0);
        pastes.settle(context.line());
        pastes.open = Some((context.line().to_string(), context.pos()));
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_pasted_line_gets_a_margin() {
        let mut pastes = Pastes { open: Some(("(f)".to_string(), 2)), settled: Vec::new() };
        // " 1\n    2\n 3" pasted before `)`.
        assert_eq!(pastes.with_margins("(f 1\n    2\n 3)"), "(f 1\n      2\n   3)");
        // Settled by an Enter, which then adds a line of its own: that line is left alone.
        pastes.settle("(f 1\n    2\n 3)");
        assert_eq!(pastes.with_margins("(f 1\n    2\n 3\n  4)"), "(f 1\n      2\n   3\n  4)");
        // A second paste after it.
        pastes.open = Some(("(f 1\n    2\n 3\n  4)".to_string(), 17));
        assert_eq!(pastes.with_margins("(f 1\n    2\n 3\n  4 5\n6)"), "(f 1\n      2\n   3\n  4 5\n  6)");
        // Text put in before the pastes: they are no longer where they went, and left alone.
        pastes.settle("(f 1\n    2\n 3\n  4 5\n6)");
        assert_eq!(pastes.with_margins("(fg 1\n    2\n 3\n  4 5\n6)"), "(fg 1\n    2\n 3\n  4 5\n6)");
    }
}
