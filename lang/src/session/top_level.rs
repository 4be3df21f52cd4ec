//! What a cell's batched top-level code reports while it runs (items finished, output written),
//! made into the items of the cell's outcome in the order that running the items one by one
//! gives: each item's output, then its value.

use std::collections::VecDeque;

use crate::run::{self, ItemDone, Progress};
use crate::tree::TopItem;
use crate::types::Ty;
use crate::{Item, Outcome, Stream};

const STREAMS: [Stream; 2] = [Stream::Stdout, Stream::Stderr];

/// The outcome so far of a cell's top-level code.
pub(super) struct TopLevelRun<'c> {
    items: &'c [TopItem],
    show_values: bool,
    /// How many items finished and are shown.
    shown_items: usize,
    /// Items finished whose output has not all arrived yet: an item is noted after its output
    /// is written, but the waiting thread may look at the notes before it takes the output.
    waiting: VecDeque<ItemDone>,
    /// Bytes of stdout and stderr not yet shown, and how many were shown before them.
    unshown: [Vec<u8>; 2],
    shown_bytes: [usize; 2],
    /// Bytes of a UTF-8 sequence cut by a chunk boundary wait for the next chunk.
    pending: [Vec<u8>; 2],
}

impl<'c> TopLevelRun<'c> {
    pub(super) fn new(items: &'c [TopItem], show_values: bool) -> TopLevelRun<'c> {
        TopLevelRun {
            items,
            show_values,
            shown_items: 0,
            waiting: VecDeque::new(),
            unshown: [Vec::new(), Vec::new()],
            shown_bytes: [0, 0],
            pending: [Vec::new(), Vec::new()],
        }
    }

    /// How many items finished; after a fault, the index of the item that faulted.
    pub(super) fn finished(&self) -> usize {
        self.shown_items
    }

    /// Adds what the code did to `outcome`: each finished item's output, then its value; then
    /// what the running item wrote so far. `ended`: the call is over, and a UTF-8 sequence
    /// still cut short is what the program wrote.
    pub(super) fn absorb(
        &mut self,
        progress: Progress,
        ended: bool,
        outcome: &mut Outcome,
        value_text: &dyn Fn(&[u8], &Ty) -> String,
    ) {
        self.waiting.extend(progress.items);
        self.unshown[0].extend(progress.output);
        self.unshown[1].extend(progress.errors);
        while let Some(done) = self.waiting.front() {
            let arrived = |slot: usize| self.shown_bytes[slot] + self.unshown[slot].len();
            if done.written[0] > arrived(0) || done.written[1] > arrived(1) {
                break;
            }
            let written = done.written;
            for (slot, end) in written.into_iter().enumerate() {
                let cut = end.saturating_sub(self.shown_bytes[slot]).min(self.unshown[slot].len());
                let bytes: Vec<u8> = self.unshown[slot].drain(..cut).collect();
                self.show(slot, &bytes, true, outcome);
            }
            let value = self.waiting.pop_front().map(|done| done.value).unwrap_or_default();
            if let (Some(Some(ty)), true) = (self.items.get(self.shown_items).map(|item| &item.value), self.show_values)
            {
                outcome.items.push(Item::Value { text: value_text(&value, ty), ty: ty.to_string() });
            }
            self.shown_items += 1;
        }
        for slot in 0..2 {
            let bytes = std::mem::take(&mut self.unshown[slot]);
            self.show(slot, &bytes, ended, outcome);
        }
    }

    fn show(&mut self, slot: usize, bytes: &[u8], item_ended: bool, outcome: &mut Outcome) {
        let mut text = run::complete_text(&mut self.pending[slot], bytes);
        if item_ended {
            text.push_str(&String::from_utf8_lossy(&std::mem::take(&mut self.pending[slot])));
        }
        self.shown_bytes[slot] += bytes.len();
        if !text.is_empty() {
            outcome.items.push(Item::Output { stream: STREAMS[slot], text });
        }
    }
}
