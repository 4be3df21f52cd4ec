//! Cases aimed at the surfaces that once killed or hung sessions (issue 31): simulator copies
//! and Lapis arguments with wild host pointers, libraries whose initialisers end the process or
//! take its signal handlers, headers that make libclang take gigabytes or declare thousands of
//! functions, and `:save` into odd places. A case is a few cells, run and judged as a mutated
//! case is (no crash, hang or internal error), and ends with cells that must still work.

use std::path::{Path, PathBuf};

use crate::rng::Rng;

/// What the cases use: libraries built from `tests/ffi/ctor*.c`, and a folder for the headers
/// they write.
#[derive(Clone, Debug)]
pub struct Resources {
    /// Hostile libraries (absolute paths); none when clang is missing.
    pub libraries: Vec<PathBuf>,
    /// Where headers are written.
    pub folder: PathBuf,
}

impl Resources {
    /// Builds `tests/ffi/ctor*.c` under `tests` with `clang` into `folder` (what does not build
    /// is left out).
    pub fn build(tests: &Path, clang: Option<&str>, folder: &Path) -> Resources {
        let _ = std::fs::create_dir_all(folder);
        let mut libraries = Vec::new();
        let mut sources: Vec<PathBuf> = std::fs::read_dir(tests.join("ffi"))
            .map(|entries| entries.flatten().map(|entry| entry.path()).collect())
            .unwrap_or_default();
        sources.retain(|path| {
            let name = path.file_name().and_then(|name| name.to_str()).unwrap_or("");
            name.starts_with("ctor") && name.ends_with(".c")
        });
        sources.sort();
        for source in sources.iter().filter(|_| clang.is_some()) {
            let stem = source.file_stem().and_then(|stem| stem.to_str()).unwrap_or("ctor");
            let library = folder.join(format!("lib{stem}.so"));
            let built = std::process::Command::new(clang.unwrap_or("clang-19"))
                .args(["-shared", "-fPIC", "-o"])
                .arg(&library)
                .arg(source)
                .output();
            if built.is_ok_and(|output| output.status.success()) {
                libraries.push(library);
            }
        }
        Resources { libraries, folder: folder.to_path_buf() }
    }
}

/// Host addresses a wild pointer may hold.
const ADDRESSES: &[&str] = &["0", "16", "4096", "-4096", "140737488355327", "-9223372036854775808", "4294963200"];
/// Element counts of a copy.
const COUNTS: &[&str] = &["0", "1", "4", "64", "65", "-1", "1048576"];
/// Where `:save` may be asked to write.
const SAVE_NAMES: &[&str] =
    &["t.repl", "sub/../t.repl", "/dev/null", "/dev/full", "missing/folder/t.repl", ".", "t.ipynb", "/"];

/// Case `case` of the run seeded `seed`: where it came from, and its cells. Headers it includes
/// are written into `resources.folder` now.
pub fn case(seed: u64, case: u64, resources: &Resources) -> (String, Vec<String>) {
    let mut rng = Rng::for_case(seed ^ 0x5375_7266, case);
    let (origin, mut cells) = match rng.below(4) {
        0 => ("wild copies".to_string(), copies(&mut rng)),
        1 if !resources.libraries.is_empty() => ("hostile libraries".to_string(), libraries(&mut rng, resources)),
        2 | 1 => headers(&mut rng, resources, case),
        _ => ("odd saves".to_string(), saves(&mut rng)),
    };
    // Whatever came before, the session answers and reports faults as faults.
    cells.push("(load (inttoptr 0 (ptr int)))".into());
    cells.push("(div 1 (sub 1 1))".into());
    cells.push("(add 1 2)".into());
    (origin, cells)
}

fn copies(rng: &mut Rng) -> Vec<String> {
    let mode = if rng.chance(1, 3) { ":gpu sim unchecked" } else { ":gpu sim" };
    let length = rng.pick(&["1", "4", "64"]);
    let mut cells = vec![
        mode.to_string(),
        "(declare b (gpu-buf int))".into(),
        format!("(set b (gpu-alloc int {length}))"),
        "(define-kernel ((fill void) (a (ptr int) inout n) (n int)) (if (gt n 0) (store a 7)))".into(),
    ];
    for _ in 0..rng.range(1, 4) {
        let pointer = format!("(inttoptr (int64 {}) (ptr int))", rng.pick(ADDRESSES));
        let count = rng.pick(COUNTS);
        cells.push(match rng.below(4) {
            0 => format!("(gpu-copy b {pointer} {count})"),
            1 => format!("(gpu-copy {pointer} b {count})"),
            2 => {
                let direction = rng.pick(&["in", "out", "inout"]);
                format!("(launch fill (grid 1) (block 1) ({direction} {pointer} {count}) {count})")
            }
            _ => format!("(launch fill (grid 1) (block 1) {pointer} {count})"),
        });
    }
    cells.push("(gpu-len b)".into());
    cells
}

fn libraries(rng: &mut Rng, resources: &Resources) -> Vec<String> {
    let mut cells = Vec::new();
    for _ in 0..rng.range(1, 3) {
        let library = rng.pick(&resources.libraries);
        cells.push(format!("(load-library \"{}\")", library.display()));
    }
    cells
}

/// A header written for the case: macros that expand exponentially (at depth 23 libclang
/// takes about a gigabyte), thousands of declarations, or text that is not C.
fn headers(rng: &mut Rng, resources: &Resources, case: u64) -> (String, Vec<String>) {
    let (origin, text) = match rng.below(3) {
        0 => {
            let depth = rng.range(8, 23);
            let mut text = "#define A0 1\n".to_string();
            for level in 1..=depth {
                text.push_str(&format!("#define A{level} (A{} + A{})\n", level - 1, level - 1));
            }
            text.push_str(&format!("enum {{ BIG = A{depth} }};\n"));
            (format!("a header of macros {depth} deep"), text)
        }
        1 => {
            let count = rng.range(1, 20_000);
            let text: String = (0..count).map(|index| format!("int fuzz_f{index}(int a, double b);\n")).collect();
            (format!("a header of {count} declarations"), text)
        }
        _ => {
            let garbage = ["#define X(", "struct {", "int f(;", "#include \"itself.h\"", "\u{0}\u{1}", "#if\n"];
            let text: String = (0..rng.range(1, 6)).map(|_| format!("{}\n", rng.pick(&garbage))).collect();
            ("a header that is not C".to_string(), text)
        }
    };
    let path = resources.folder.join(format!("fuzz-{case}.h"));
    if std::fs::write(&path, text).is_err() {
        return (origin, Vec::new());
    }
    (origin, vec![format!("(include \"{}\")", path.display())])
}

fn saves(rng: &mut Rng) -> Vec<String> {
    let mut cells = vec!["(define ((f int) (x int)) (ret (add x 1)))".to_string(), "(call f 1)".into()];
    for _ in 0..rng.range(1, 3) {
        cells.push(format!(":save {}", rng.pick(SAVE_NAMES)));
    }
    cells
}
