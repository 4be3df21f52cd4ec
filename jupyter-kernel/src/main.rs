//! `quasi-kernel`: Quasi's Jupyter kernel. `quasi-kernel --connection-file FILE` serves one
//! session over ZeroMQ (Jupyter protocol 5.3); `quasi-kernel install` writes the kernelspec and
//! the JupyterLab extension that highlights C-Lisp.
//!
//! Only this crate knows ZeroMQ, Jupyter messages and MIME types; the language and the
//! session are `quasi-lang`'s, the text of every output `quasi-repl`'s.

mod channel;
mod chart;
mod control;
mod display;
mod engine;
mod history;
mod html;
mod install;
mod interrupt;
mod iopub;
mod kernel;
mod labextension;
mod logging;
mod parent;
mod shell;
mod wire;

use std::path::Path;

const USAGE: &str = "usage: quasi-kernel --connection-file FILE   serve a Jupyter client
       quasi-kernel install [--user | --sys-prefix | --prefix DIR] [--gpu MODE]
       quasi-kernel --version                  print the version
       quasi-kernel --help                     print this help";

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let status = match args.first().map(String::as_str) {
        Some("install") => report(install::run(&args[1..]).map(|()| 0)),
        // `-f FILE` is ipykernel's spelling; kernelspecs written by hand may use it.
        Some("--connection-file" | "-f") => match args.get(1) {
            Some(path) => serve(Path::new(path)),
            None => usage(),
        },
        Some(flag) if flag.starts_with("--connection-file=") => serve(Path::new(&flag["--connection-file=".len()..])),
        Some("--version" | "-V") => {
            println!("quasi-kernel {}", env!("CARGO_PKG_VERSION"));
            0
        }
        Some("--help" | "-h") => {
            println!("{USAGE}\n\n{}", install::USAGE);
            0
        }
        _ => usage(),
    };
    std::process::exit(status);
}

fn serve(connection_file: &Path) -> i32 {
    logging::init();
    report(kernel::serve(connection_file))
}

fn report(result: anyhow::Result<i32>) -> i32 {
    result.unwrap_or_else(|error| {
        eprintln!("quasi-kernel: {error:#}");
        1
    })
}

fn usage() -> i32 {
    eprintln!("{USAGE}");
    2
}
