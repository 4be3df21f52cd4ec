//! Mutated cells: the cells of the transcripts under `tests/`, of `docs/*.md` and the Rhai
//! functions of the prelude, changed a little (forms deleted, duplicated, swapped, replaced;
//! atoms replaced by other atoms, types and extreme numbers; text truncated; random bytes and
//! brackets inserted; forms nested deeply). A case is a run of a transcript's cells in one fresh
//! session, its last few cells mutated, so the mutated cells meet the definitions they expect.

use std::path::Path;

use crate::rng::Rng;
use crate::sexp::{self, Node};

/// A sequence of cells taken from one file: the unit a case is cut from.
#[derive(Clone, Debug)]
pub struct Seed {
    /// Where the cells come from, for reports.
    pub name: String,
    /// The cells in order, header commands first.
    pub cells: Vec<String>,
}

/// Everything mutations draw from.
#[derive(Debug, Default)]
pub struct Corpus {
    /// Cell sequences.
    pub seeds: Vec<Seed>,
    /// Rhai functions of the prelude, each one cell `(rhai "…")` when mutated.
    pub rhai_functions: Vec<String>,
    /// Atoms seen in the cells, deduplicated.
    atoms: Vec<String>,
    /// Lists seen in the cells, for replacing forms with other forms.
    forms: Vec<Node>,
}

/// A mutated case: cells to run in order in one fresh session.
#[derive(Clone, Debug)]
pub struct MutatedCase {
    /// The seed's name and what was done, for reports.
    pub origin: String,
    /// The cells.
    pub cells: Vec<String>,
    /// How many of them were mutated.
    pub mutated: usize,
}

/// Numbers at the edges of every type, and some that are past them.
const EXTREME_NUMBERS: &[&str] = &[
    "0",
    "-1",
    "1",
    "2",
    "7",
    "8",
    "31",
    "32",
    "63",
    "64",
    "127",
    "128",
    "-128",
    "255",
    "256",
    "32767",
    "-32768",
    "65536",
    "2147483647",
    "-2147483648",
    "2147483648",
    "4294967295",
    "4294967296",
    "9223372036854775807",
    "-9223372036854775808",
    "9223372036854775808",
    "99999999999999999999999",
    "0.0",
    "-0.0",
    "1.5",
    "1e308",
    "1e-320",
    "3.4028235e38",
    "1e39",
    "+inf.0",
    "-inf.0",
    "+nan.0",
    "#x7fffffff",
    "#b101",
    "0xffffffffffffffff",
    "100000000",
    "#t",
    "#f",
];

/// Types and forms every mutation may bring in.
const VOCABULARY: &[&str] = &[
    "int",
    "int8",
    "int16",
    "int32",
    "int64",
    "float",
    "double",
    "bool",
    "void",
    "(ptr int)",
    "(ptr (ptr int8))",
    "(arr 4 int)",
    "(arr 0 int)",
    "(arr 100000000 int64)",
    "(struct point)",
    "(struct nothing)",
    "(gpu-buf float)",
    "(ptr int (addrspace 3))",
    "()",
    "(())",
    "(ret)",
    "(break)",
    "(continue)",
    "(declare x int)",
    "(set x 1)",
    "(call f)",
    "(alloc int 4)",
    "(load (inttoptr 0 (ptr int)))",
    "(ptr-to x)",
    "...",
    "\"\"",
    "\"%d %s %f\\n\"",
    ",x",
    ",@(range 3)",
    "`(add 1 2)",
    "#:key",
    "define",
    "define-inline",
    "define-brilisp",
    "define-global",
    "define-struct",
    "define-kernel",
    "declare",
    "c-lisp",
    "cuda-lisp",
    "rhai",
    "quasiquote",
    "unquote",
    "unquote-splicing",
];

/// Cells that would act outside the session (files, libraries, the process) are not fuzzed:
/// those are the user's to ask for, and ending the process is another issue's row.
const SHUNNED: &[&str] = &[
    "load-library",
    "include",
    "rhai-file",
    "exit",
    "abort",
    "system",
    "fork",
    "kill",
    "raise",
    "signal",
    "sigaction",
    "longjmp",
    "execl",
    "free",
    "realloc",
    "memcpy",
    "memset",
    "memmove",
    "fopen",
    "fclose",
    "fwrite",
    "write",
    "close",
    "dup2",
    "unlink",
    "sleep",
    "usleep",
    "getchar",
    "scanf",
    "fgets",
    "read",
    "pthread",
    "asm",
    "setjmp",
    "mmap",
    "munmap",
    "mprotect",
    "dlopen",
    "putenv",
    "setenv",
    "chdir",
];

/// Whether a cell may be run by the fuzzer (see `SHUNNED`; commands that touch files are out too).
pub fn runnable(cell: &str) -> bool {
    let trimmed = cell.trim_start();
    if trimmed.starts_with(':') {
        return !(trimmed.starts_with(":save") || trimmed.starts_with(":load") || trimmed.starts_with(":quit"));
    }
    !cell
        .split(|character: char| character.is_whitespace() || "()[]\"`,".contains(character))
        .any(|word| SHUNNED.contains(&word) || word.starts_with("pthread_"))
}

impl Corpus {
    /// Reads every `.repl` file under `tests`, the ```` ```repl ```` blocks of every Markdown file
    /// in `docs`, and the prelude.
    pub fn load(tests: &Path, docs: &Path) -> Corpus {
        let mut corpus = Corpus::default();
        let mut paths = Vec::new();
        find_files(tests, "repl", &mut paths);
        find_files(docs, "md", &mut paths);
        paths.sort();
        for path in paths {
            let Ok(text) = std::fs::read_to_string(&path) else { continue };
            let transcript = if path.extension().is_some_and(|extension| extension == "md") {
                quasi_repl::transcript::parse_markdown(&text).transcript()
            } else {
                quasi_repl::transcript::parse(&text)
            };
            let mut cells: Vec<String> =
                transcript.setup_commands().into_iter().map(str::to_string).filter(|cell| runnable(cell)).collect();
            cells.extend(transcript.cells.iter().map(|cell| cell.input.clone()).filter(|cell| runnable(cell)));
            if !cells.is_empty() {
                corpus.seeds.push(Seed { name: path.display().to_string(), cells });
            }
        }
        for (_, text) in quasi_prelude::FILES {
            corpus.rhai_functions.extend(rhai_functions(text));
        }
        corpus.index();
        corpus
    }

    fn index(&mut self) {
        let mut atoms = std::collections::BTreeSet::new();
        for seed in &self.seeds {
            for cell in seed.cells.iter().filter(|cell| !cell.trim_start().starts_with(':')) {
                let mut nodes = Vec::new();
                for form in sexp::parse(cell) {
                    form.collect(&mut nodes);
                }
                for node in nodes {
                    match node {
                        Node::Atom(atom) => {
                            atoms.insert(atom);
                        }
                        list @ Node::List { .. } if list.size() <= 40 => self.forms.push(list),
                        _ => {}
                    }
                }
            }
        }
        self.atoms = atoms.into_iter().filter(|atom| runnable(atom)).collect();
        self.forms.retain(|form| runnable(&sexp::print(std::slice::from_ref(form))));
    }

    /// Case `case` of the run seeded `seed`.
    pub fn case(&self, seed: u64, case: u64) -> MutatedCase {
        let mut rng = Rng::for_case(seed, case);
        // A quarter of the cases mutate a twin program instead (bigger well-typed code).
        let generated;
        let source = if rng.chance(1, 4) {
            let twin = crate::program::generate(seed ^ 0x6d75_7461, case);
            generated = Seed { name: "a twin program".to_string(), cells: vec![twin.clisp, "(call main)".to_string()] };
            &generated
        } else {
            rng.pick(&self.seeds)
        };
        let end = 1 + rng.below(source.cells.len());
        let first_mutated = end.saturating_sub(1 + rng.below(4));
        let mut cells: Vec<String> = source.cells[..end].to_vec();
        let mut done = Vec::new();
        let mut mutated = 0;
        for cell in cells.iter_mut().skip(first_mutated) {
            if cell.trim_start().starts_with(':') {
                continue;
            }
            for _ in 0..1 + rng.below(3) {
                let (text, what) = self.mutate(cell, &mut rng);
                *cell = text;
                done.push(what);
            }
            mutated += 1;
        }
        // A mutation may have spelt a shunned name; such a cell runs unmutated.
        for (cell, original) in cells.iter_mut().zip(&source.cells) {
            if !runnable(cell) {
                cell.clone_from(original);
            }
        }
        if !self.rhai_functions.is_empty() && rng.chance(1, 8) {
            let function = rng.pick(&self.rhai_functions).clone();
            let (text, what) = mutate_text(&function, &mut rng);
            let cell = format!("(rhai \"{}\")", escape(&text));
            if runnable(&cell) {
                cells.insert(first_mutated, cell);
                done.push(format!("rhai {what}"));
                mutated += 1;
            }
        }
        // Half of the cases run at another optimisation level than the default.
        if rng.chance(1, 2) {
            cells.insert(0, format!(":opt {}", rng.below(4)));
        }
        MutatedCase { origin: format!("{} cells 1..={end}: {}", source.name, done.join(", ")), cells, mutated }
    }

    /// One mutation of a cell's text, and its name.
    fn mutate(&self, cell: &str, rng: &mut Rng) -> (String, String) {
        let mut forms = sexp::parse(cell);
        if forms.is_empty() || rng.chance(1, 6) {
            return mutate_text(cell, rng);
        }
        let mut root = Node::List { square: false, items: std::mem::take(&mut forms) };
        let what = self.mutate_tree(&mut root, rng);
        let Node::List { items, .. } = root else { unreachable!("the root stays a list") };
        (sexp::print(&items), what.to_string())
    }

    fn mutate_tree(&self, root: &mut Node, rng: &mut Rng) -> &'static str {
        let size = root.size();
        let target = 1 + rng.below(size.saturating_sub(1).max(1));
        match rng.below(9) {
            0..=2 => {
                let Some(node) = root.nth_mut(target) else { return "nothing" };
                *node = self.replacement(node, rng);
                "replace"
            }
            3 => {
                let edited = edit_list(root, rng, |items, rng| {
                    let index = rng.below(items.len());
                    items.remove(index);
                });
                if edited {
                    "delete"
                } else {
                    "nothing"
                }
            }
            4 => {
                let edited = edit_list(root, rng, |items, rng| {
                    let index = rng.below(items.len());
                    let copy = items[index].clone();
                    items.insert(index, copy);
                });
                if edited {
                    "duplicate"
                } else {
                    "nothing"
                }
            }
            5 => {
                let edited = edit_list(root, rng, |items, rng| {
                    let (first, second) = (rng.below(items.len()), rng.below(items.len()));
                    items.swap(first, second);
                });
                if edited {
                    "swap"
                } else {
                    "nothing"
                }
            }
            6 => {
                let Some(node) = root.nth_mut(target) else { return "nothing" };
                let head = Node::Atom(
                    rng.pick(&[
                        "add", "fadd", "call", "not", "load", "ret", "if", "while", "sext", "set", "ptradd", "select",
                    ])
                    .to_string(),
                );
                let inner = std::mem::replace(node, Node::Atom(String::new()));
                let mut items = vec![head, inner.clone()];
                if rng.chance(1, 2) {
                    items.push(inner);
                }
                *node = Node::List { square: false, items };
                "wrap"
            }
            7 => {
                let Some(node) = root.nth_mut(target) else { return "nothing" };
                *node = nest(node.clone(), rng);
                "nest"
            }
            _ => {
                let Some(node) = root.nth_mut(target) else { return "nothing" };
                if let Node::List { items, .. } = node {
                    items.truncate(rng.below(items.len() + 1));
                    "shorten"
                } else {
                    *node = Node::Atom(rng.pick(EXTREME_NUMBERS).to_string());
                    "number"
                }
            }
        }
    }

    /// A form to put where `node` was: an atom of the corpus, a type or form of the language, an
    /// extreme number, or another list of the corpus.
    fn replacement(&self, node: &Node, rng: &mut Rng) -> Node {
        let text = match rng.below(5) {
            0 if !self.atoms.is_empty() => rng.pick(&self.atoms).clone(),
            1 => rng.pick(VOCABULARY).to_string(),
            2 => rng.pick(EXTREME_NUMBERS).to_string(),
            3 if !self.forms.is_empty() => return rng.pick(&self.forms).clone(),
            _ => match node {
                Node::Atom(atom) if atom.parse::<i64>().is_ok() => rng.range(-300, 300).to_string(),
                _ => rng.pick(EXTREME_NUMBERS).to_string(),
            },
        };
        sexp::parse(&text).into_iter().next().unwrap_or(Node::Atom(text))
    }
}

/// Applies `edit` to the items of a random non-empty list of the tree; false if there is none.
fn edit_list(root: &mut Node, rng: &mut Rng, edit: impl FnOnce(&mut Vec<Node>, &mut Rng)) -> bool {
    let size = root.size();
    for _ in 0..8 {
        let index = rng.below(size);
        if let Some(Node::List { items, .. }) = root.nth_mut(index) {
            if !items.is_empty() {
                edit(items, rng);
                return true;
            }
        }
    }
    false
}

/// The form nested deeply: inside an arithmetic chain, a tower of compounds or of backquotes.
fn nest(node: Node, rng: &mut Rng) -> Node {
    let depth = *rng.pick(&[10, 100, 255, 256, 999, 1000, 5000]);
    let mut text = sexp::print(&[node]);
    let (open, close) = match rng.below(4) {
        0 => ("(add 1 ", ")"),
        1 => ("(", ")"),
        2 => ("(if #t ", ")"),
        _ => ("`", ""),
    };
    text = format!("{}{text}{}", open.repeat(depth), close.repeat(depth));
    Node::Atom(text)
}

/// A mutation of the raw text: truncation, inserted bytes or brackets, deleted spans.
pub fn mutate_text(text: &str, rng: &mut Rng) -> (String, String) {
    let mut bytes = text.as_bytes().to_vec();
    let position = rng.below(bytes.len() + 1);
    let what = match rng.below(5) {
        0 => {
            bytes.truncate(position);
            "truncate"
        }
        1 => {
            let insert = rng.pick(&["(", ")", "[", "]", "\"", "`", ",", ",@", "#", "#|", "#;", ";", "\\", "\n"]);
            bytes.splice(position..position, insert.bytes());
            "insert bracket"
        }
        2 => {
            let count = 1 + rng.below(8);
            let random: Vec<u8> = (0..count).map(|_| rng.next_u64() as u8).collect();
            bytes.splice(position..position, random);
            "insert bytes"
        }
        3 => {
            let end = (position + 1 + rng.below(20)).min(bytes.len());
            bytes.drain(position..end);
            "delete span"
        }
        _ => {
            let depth = 1 + rng.below(300);
            bytes.splice(position..position, "(".repeat(depth).into_bytes());
            "insert opens"
        }
    };
    // Cells are text: bytes that are not UTF-8 are replaced, as a front end would refuse them.
    (String::from_utf8_lossy(&bytes).into_owned(), what.to_string())
}

fn escape(text: &str) -> String {
    text.replace('\\', "\\\\").replace('"', "\\\"")
}

/// The top-level `fn` definitions of a Rhai file, each with its body (braces counted, strings
/// and comments ignored only roughly: a fuzzer's seed need not be exact).
fn rhai_functions(text: &str) -> Vec<String> {
    let mut functions = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find("\nfn ").or_else(|| rest.starts_with("fn ").then_some(0)) {
        let body = &rest[start..];
        let mut depth = 0usize;
        let mut end = body.len();
        let mut opened = false;
        for (index, character) in body.char_indices() {
            match character {
                '{' => {
                    depth += 1;
                    opened = true;
                }
                '}' => {
                    depth = depth.saturating_sub(1);
                    if opened && depth == 0 {
                        end = index + 1;
                        break;
                    }
                }
                _ => {}
            }
        }
        functions.push(body[..end].trim().to_string());
        rest = &body[end..];
    }
    functions
}

fn find_files(directory: &Path, extension: &str, found: &mut Vec<std::path::PathBuf>) {
    let Ok(entries) = std::fs::read_dir(directory) else { return };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            find_files(&path, extension, found);
        } else if path.extension().is_some_and(|found| found == extension) {
            found.push(path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{rhai_functions, runnable};

    #[test]
    fn shuns_cells_that_act_outside_the_session() {
        assert!(!runnable("(call exit 1)"));
        assert!(!runnable(":save x.repl"));
        assert!(runnable("(add 1 2)"));
    }

    #[test]
    fn finds_rhai_functions() {
        let functions = rhai_functions("// c\nfn a(x) { if x { 1 } else { 2 } }\nlet y = 1;\nfn b() { 3 }\n");
        assert_eq!(functions, vec!["fn a(x) { if x { 1 } else { 2 } }", "fn b() { 3 }"]);
    }
}
