//! History: the cells this kernel executed with `store_history`, answered to
//! `history_request`s the way IPython answers them (tail, range, glob search).
//!
//! Nothing is persisted: a kernel process is one history session, numbered `SESSION`.

use jupyter_protocol::HistoryEntry;
use serde::Deserialize;

/// The number this kernel's history session goes by; 0 also means "the current session".
pub const SESSION: usize = 1;

/// A `history_request`'s content, read leniently: clients leave out the fields that do not
/// apply to their access type.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct Query {
    #[serde(default)]
    pub output: bool,
    #[serde(default)]
    pub hist_access_type: String,
    #[serde(default)]
    pub session: Option<i64>,
    #[serde(default)]
    pub start: Option<i64>,
    #[serde(default)]
    pub stop: Option<i64>,
    #[serde(default)]
    pub n: Option<i64>,
    #[serde(default)]
    pub pattern: Option<String>,
    #[serde(default)]
    pub unique: Option<bool>,
}

#[derive(Clone, Debug)]
struct Entry {
    /// The execution count, IPython's line number.
    line: usize,
    input: String,
    /// What the terminal would have printed for the cell.
    output: String,
}

/// The executed cells, oldest first.
#[derive(Default)]
pub struct History {
    entries: Vec<Entry>,
}

impl History {
    /// Records a cell.
    pub fn push(&mut self, line: usize, input: &str, output: String) {
        self.entries.push(Entry { line, input: input.to_string(), output });
    }

    /// The entries a query asks for.
    pub fn answer(&self, query: &Query) -> Vec<HistoryEntry> {
        let selected: Vec<&Entry> = match query.hist_access_type.as_str() {
            "tail" => last(self.entries.iter().collect(), query.n),
            "range" => self.range(query),
            "search" => self.search(query),
            _ => Vec::new(),
        };
        selected
            .into_iter()
            .map(|entry| {
                if query.output {
                    HistoryEntry::InputOutput(SESSION, entry.line, (entry.input.clone(), entry.output.clone()))
                } else {
                    HistoryEntry::Input(SESSION, entry.line, entry.input.clone())
                }
            })
            .collect()
    }

    /// Lines `start..stop` of the current session; a missing or zero `stop` means to the end.
    fn range(&self, query: &Query) -> Vec<&Entry> {
        if !matches!(query.session, None | Some(0)) && query.session != Some(SESSION as i64) {
            return Vec::new();
        }
        let start = query.start.unwrap_or(0).max(0) as usize;
        let stop = query.stop.filter(|stop| *stop > 0).map_or(usize::MAX, |stop| stop as usize);
        self.entries.iter().filter(|entry| entry.line >= start && entry.line < stop).collect()
    }

    /// Inputs matching a glob (`*`, `?`), the whole input as SQL's GLOB matches; with `unique`
    /// the latest of equal inputs; the last `n`.
    fn search(&self, query: &Query) -> Vec<&Entry> {
        let pattern: Vec<char> = query.pattern.as_deref().unwrap_or("*").chars().collect();
        let mut matches: Vec<&Entry> =
            self.entries.iter().filter(|entry| glob(&pattern, &entry.input.chars().collect::<Vec<_>>())).collect();
        if query.unique.unwrap_or(false) {
            let mut seen = std::collections::HashSet::new();
            matches.reverse();
            matches.retain(|entry| seen.insert(entry.input.as_str()));
            matches.reverse();
        }
        last(matches, query.n)
    }
}

/// The last `n` entries (all of them without a positive `n`).
fn last(entries: Vec<&Entry>, n: Option<i64>) -> Vec<&Entry> {
    match n {
        Some(n) if n > 0 => {
            let skip = entries.len().saturating_sub(n as usize);
            entries.into_iter().skip(skip).collect()
        }
        _ => entries,
    }
}

/// Whether `text` matches `pattern`, where `*` is any run and `?` any one character.
fn glob(pattern: &[char], text: &[char]) -> bool {
    // Greedy with one backtrack point (the last `*`), linear in practice.
    let (mut p, mut t) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        match pattern.get(p) {
            Some('*') => {
                star = Some((p, t));
                p += 1;
            }
            Some('?') => (p, t) = (p + 1, t + 1),
            Some(character) if *character == text[t] => (p, t) = (p + 1, t + 1),
            _ => match star {
                Some((star_p, star_t)) => {
                    (p, t) = (star_p + 1, star_t + 1);
                    star = Some((star_p, star_t + 1));
                }
                None => return false,
            },
        }
    }
    pattern[p..].iter().all(|character| *character == '*')
}

#[cfg(test)]
mod tests {
    use super::{History, Query};
    use expect_test::{expect, Expect};

    fn history() -> History {
        let mut history = History::default();
        for (line, input) in ["(add 1 2)", "(mul 6 7)", "(add 1 2)", "(mul 6 8)", "(mul 6 7)"].iter().enumerate() {
            history.push(line + 1, input, format!("out {}", line + 1));
        }
        history
    }

    fn check(query: &str, expected: Expect) {
        let query: Query = serde_json::from_str(query).expect("a query");
        let entries = history().answer(&query);
        expected.assert_eq(&serde_json::to_string(&entries).expect("serialises"));
    }

    #[test]
    fn tail_range_search() {
        check(
            r#"{"hist_access_type": "tail", "n": 2, "output": false, "raw": true}"#,
            expect![[r#"[[1,4,"(mul 6 8)"],[1,5,"(mul 6 7)"]]"#]],
        );
        check(
            r#"{"hist_access_type": "tail", "n": 1, "output": true, "raw": true}"#,
            expect![[r#"[[1,5,["(mul 6 7)","out 5"]]]"#]],
        );
        check(
            r#"{"hist_access_type": "range", "session": 1, "start": 2, "stop": 3, "output": false, "raw": true}"#,
            expect![[r#"[[1,2,"(mul 6 7)"]]"#]],
        );
        check(
            r#"{"hist_access_type": "range", "session": 0, "start": 4, "stop": 0, "output": false, "raw": true}"#,
            expect![[r#"[[1,4,"(mul 6 8)"],[1,5,"(mul 6 7)"]]"#]],
        );
        check(
            r#"{"hist_access_type": "range", "session": 7, "start": 1, "stop": 3, "output": false, "raw": true}"#,
            expect!["[]"],
        );
        check(
            r#"{"hist_access_type": "search", "pattern": "(mul 6*", "output": false, "raw": true}"#,
            expect![[r#"[[1,2,"(mul 6 7)"],[1,4,"(mul 6 8)"],[1,5,"(mul 6 7)"]]"#]],
        );
        check(
            r#"{"hist_access_type": "search", "pattern": "(mul 6 ?)", "unique": true, "output": false, "raw": true}"#,
            expect![[r#"[[1,4,"(mul 6 8)"],[1,5,"(mul 6 7)"]]"#]],
        );
        check(
            r#"{"hist_access_type": "search", "pattern": "*1*", "n": 1, "output": false, "raw": true}"#,
            expect![[r#"[[1,3,"(add 1 2)"]]"#]],
        );
    }

    #[test]
    fn glob_matches_whole_text() {
        let glob = |pattern: &str, text: &str| {
            super::glob(&pattern.chars().collect::<Vec<_>>(), &text.chars().collect::<Vec<_>>())
        };
        assert!(glob("a*c", "abbc"));
        assert!(glob("*", ""));
        assert!(!glob("a*c", "abcd"));
        assert!(glob("a*b*c", "axbxbxc"));
        assert!(!glob("?", ""));
    }
}
