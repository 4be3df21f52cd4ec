//! History: what a session remembers of its cells — every source text (diagnostics point into
//! them), the cell counter, the last cell with its expansion and timing, and the order in
//! which names were first defined (for `:defs`).

use std::collections::BTreeMap;

use crate::reader::Sexp;
use crate::source::{SourceFile, SourceId, Span};
use crate::timeline::Trace;
use crate::timing::PhaseTimes;
use crate::Outcome;

/// A defined name in the order `:defs` lists them.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum DefinitionKey {
    Struct(String),
    Global(String),
    Function(String),
}

#[derive(Default)]
pub(super) struct History {
    /// Every text read, by `SourceId` (cells, files, Rhai scripts, the prelude).
    pub(super) sources: Vec<SourceFile>,
    pub(super) cell_count: u32,
    /// Code compiled out of sight (`(bench …)`, `(autotune …)` variants): counted apart, so cell
    /// numbers in diagnostics stay those of the prompts.
    pub(super) quiet_count: u32,
    /// The last cell's text, the default subject of `:expand`.
    pub(super) last_cell: Option<String>,
    /// The last cell's expansion as it was compiled (same gensyms), for `:expand` and `:ptx`.
    pub(super) last_expansion: Option<Vec<Sexp>>,
    /// Show the timing table after every cell (`:time on`).
    pub(super) show_timing: bool,
    /// The last cell's phase times, for `:time last` and `:timeline`.
    pub(super) last_timing: Option<PhaseTimes>,
    /// Every cell's code and device work since the last `:trace FILE`.
    pub(super) trace: Trace,
    /// When each name was first defined.
    definitions: BTreeMap<DefinitionKey, u32>,
    definition_counter: u32,
    /// The cells that made the session, for a Slurm worker's replay (`journal`).
    pub(super) journal: Vec<JournalEntry>,
    /// What the includes of the last cell that included headers left out: their headers' names
    /// and a line per item (why, where), for `:skipped`.
    pub(super) skipped: Vec<(String, Vec<String>)>,
    /// What the running cell's autotunes asked a replay to write instead of them.
    pub(super) replacements: Vec<(Span, String)>,
}

/// A cell of the journal.
#[derive(Clone, Debug)]
pub(super) enum JournalEntry {
    /// A cell's source, with the byte ranges a replay writes differently (an autotune's).
    Cell { source: SourceId, replaced: Vec<(usize, usize, String)> },
    /// A Rhai script `:load`ed.
    Rhai { source: SourceId },
}

impl History {
    /// Keeps a text; diagnostics point into it by the returned id.
    pub(super) fn add_source(&mut self, name: String, text: String) -> SourceId {
        self.sources.push(SourceFile { name, text });
        SourceId(self.sources.len() as u32 - 1)
    }

    /// The name of a source this history holds (`cell 3`, a file's path).
    pub(super) fn source_name(&self, source: SourceId) -> &str {
        self.sources.get(source.0 as usize).map_or("", |file| file.name.as_str())
    }

    /// The text of a source this history holds.
    pub(super) fn text(&self, source: SourceId) -> &str {
        self.sources.get(source.0 as usize).map_or("", |file| file.text.as_str())
    }

    /// The text a span covers in its source.
    pub(super) fn span_text(&self, span: Span) -> Option<String> {
        self.sources
            .get(span.source.0 as usize)
            .and_then(|file| file.text.get(span.start as usize..span.end as usize))
            .map(str::to_string)
    }

    /// Adds every source a diagnostic of the outcome points into, and resolves positions Rhai
    /// gave as line and column into bytes.
    pub(super) fn attach_sources(&self, outcome: &mut Outcome) {
        let mut ids: Vec<SourceId> = outcome
            .diagnostics
            .iter()
            .flat_map(|diagnostic| diagnostic.labels.iter().map(|label| label.span.source))
            .collect();
        ids.sort();
        ids.dedup();
        for id in ids {
            if !outcome.sources.iter().any(|(existing, _)| *existing == id) {
                if let Some(file) = self.sources.get(id.0 as usize) {
                    outcome.sources.push((id, file.clone()));
                }
            }
        }
    }

    /// Remembers when a name was first defined.
    pub(super) fn note_definition(&mut self, key: DefinitionKey) {
        if !self.definitions.contains_key(&key) {
            self.definition_counter += 1;
            self.definitions.insert(key, self.definition_counter);
        }
    }

    /// Every defined name, in the order of first definition.
    pub(super) fn definitions_in_order(&self) -> Vec<&DefinitionKey> {
        let mut ordered: Vec<(&u32, &DefinitionKey)> =
            self.definitions.iter().map(|(key, order)| (order, key)).collect();
        ordered.sort();
        ordered.into_iter().map(|(_, key)| key).collect()
    }
}
