//! The cost of C headers and libraries: a cell holding `(include …)` the first time in the
//! process (libclang loaded, headers parsed) and again (the parse cached), next to `clang-19
//! -fsyntax-only` of the same headers; `(load-library …)`.

use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::Result;
use quasi_lang::{Session, SessionConfig};

use crate::stats::{ms, Samples};
use crate::{eval, new_table, Options};

/// Header sets, from one small header to the headers of a typical numeric program.
const HEADERS: [&[&str]; 2] = [&["stdio.h"], &["stdio.h", "stdlib.h", "string.h", "math.h", "time.h"]];

pub fn run(options: &Options) -> Result<()> {
    println!("== C headers and libraries: include and load-library, per cell ==");
    println!(
        "A new session per row. First: the first include of these headers in this process (for the first\n\
         row it also loads libclang). Cached: the same cell again in a fresh session (the parse is cached\n\
         while no header changed; the declarations are still checked and linked). clang: `{} -fsyntax-only`\n\
         of a file including them (a process, for scale).\n",
        options.clang
    );
    let mut table =
        new_table(&["cell", "first ms", "cached p50 ms", "cached min ms", "clang -fsyntax-only ms"], &[1, 2, 3, 4]);
    for headers in HEADERS {
        let quoted: Vec<String> = headers.iter().map(|header| format!("\"{header}\"")).collect();
        let cell = format!("(include {})", quoted.join(" "));
        let first = time_in_new_session(&cell)?;
        let cached = Samples::new((0..options.runs.max(5)).map(|_| time_in_new_session(&cell)).collect::<Result<_>>()?);
        table.add_row(vec![
            cell,
            ms(first),
            ms(cached.median()),
            ms(cached.best()),
            clang_syntax_only(&options.clang, headers).map_or("?".into(), ms),
        ]);
    }
    let load = Samples::new(
        (0..options.runs.max(5)).map(|_| time_in_new_session("(load-library \"libm.so.6\")")).collect::<Result<_>>()?,
    );
    table.add_row(vec![
        "(load-library \"libm.so.6\")".to_string(),
        "".into(),
        ms(load.median()),
        ms(load.best()),
        "".into(),
    ]);
    println!("{table}\n");
    Ok(())
}

fn time_in_new_session(cell: &str) -> Result<Duration> {
    let mut session = Session::new(SessionConfig { capture_output: true, ..SessionConfig::default() })?;
    let start = Instant::now();
    eval(&mut session, cell)?;
    Ok(start.elapsed())
}

fn clang_syntax_only(clang: &str, headers: &[&str]) -> Option<Duration> {
    let source = std::env::temp_dir().join(format!("quasi-bench-include-{}.c", std::process::id()));
    let text: String = headers.iter().map(|header| format!("#include <{header}>\n")).collect();
    std::fs::write(&source, text).ok()?;
    let samples: Option<Vec<Duration>> = (0..5)
        .map(|_| {
            let start = Instant::now();
            let status = Command::new(clang).arg("-fsyntax-only").arg(&source).status().ok()?;
            status.success().then(|| start.elapsed())
        })
        .collect();
    let _ = std::fs::remove_file(&source);
    Some(Samples::new(samples?).median())
}
