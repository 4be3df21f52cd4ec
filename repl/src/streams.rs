//! `print!`, `println!`, `eprint!` and `eprintln!` for the binaries, in place of std's: std's
//! panic when the stream is closed or full (`quasi run x.cl 2>&1 | head` ended with a panic and
//! status 101). These drop what cannot be written, as C's stdio does; the exit status still
//! says how the run ended. Included with `#[macro_use]` before every other module, so they
//! shadow std's everywhere in the binary.

// A binary need not use all four.
#![allow(unused_macros)]

macro_rules! print {
    ($($argument:tt)*) => {{
        use std::io::Write as _;
        let _ = write!(std::io::stdout(), $($argument)*);
    }};
}

macro_rules! println {
    ($($argument:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), $($argument)*);
    }};
}

macro_rules! eprint {
    ($($argument:tt)*) => {{
        use std::io::Write as _;
        let _ = write!(std::io::stderr(), $($argument)*);
    }};
}

macro_rules! eprintln {
    ($($argument:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($argument)*);
    }};
}
