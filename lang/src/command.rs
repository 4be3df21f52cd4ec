//! Commands: the `:` lines every front end shares (`:help`, `:opt`, `:reset`, `:load`…).

use crate::diagnostics::{Diagnostic, Kind};
use crate::inspect;
use crate::session::Session;
use crate::{Item, Outcome};

/// Every command, for completion and `:help`.
pub const COMMANDS: &[(&str, &str)] = &[
    (":help", "show this help"),
    (":quit", "leave Quasi (or Ctrl-D)"),
    (":reset", "start a fresh session: definitions, globals and memory are dropped"),
    (":load FILE", "evaluate a file as one cell; a .rhai file runs as Rhai"),
    (":opt [N]", "show or set the optimisation level for later cells (0-3)"),
    (":defs", "list the session's definitions"),
    (":expand [1] [TEXT]", "show the expansion of TEXT (default: the last cell); 1: one level"),
    (":limits [NAME N]", "show or set the staging limits"),
    (":stages [NAME]", "every stage of NAME (default: the last cell): source to assembly"),
    (":types [NAME|TEXT]", "the typed tree"),
    (":ir [opt] [NAME]", "LLVM IR before (or after) optimisation"),
    (":asm [NAME]", "x86-64 assembly"),
    (":ptx [NAME]", "PTX of a kernel (or any void function) and what it calls; no GPU needed"),
    (":gpu-arch [sm_XX]", "show or set the GPU target of PTX (default sm_90)"),
    (":time on|off|last", "show phase times after every cell, or of the last cell"),
    (":bench TEXT", "benchmark TEXT, as (bench TEXT)"),
];

const HELP: &str = "Quasi: C-Lisp, compiled with LLVM and run as you type.

Type forms to define and run code:
  (define ((sq int) (x int)) (ret (mul x x)))   defines a function
  (call sq 7)                                    runs at once and prints 49 : int
A cell continues while parentheses are open.";

pub(crate) fn run(session: &mut Session, line: &str) -> Outcome {
    let mut words = line.split_whitespace();
    let command = words.next().unwrap_or("");
    let argument = line[command.len()..].trim();
    let mut outcome = Outcome::default();
    let message = |outcome: &mut Outcome, text: String| outcome.items.push(Item::Message(text));
    match command {
        ":help" | ":h" | ":?" => {
            let mut text = HELP.to_string();
            text.push_str("\n\nCommands:\n");
            for (name, description) in COMMANDS {
                text.push_str(&format!("  {name:<12} {description}\n"));
            }
            message(&mut outcome, text.trim_end().to_string());
        }
        ":quit" | ":q" | ":exit" => outcome.quit = true,
        ":reset" => match session.reset() {
            Ok(()) => message(&mut outcome, "session reset".into()),
            Err(error) => {
                outcome.diagnostics.push(Diagnostic::error(Kind::Internal, format!("could not reset: {error}")))
            }
        },
        ":opt" => {
            if argument.is_empty() {
                message(&mut outcome, format!("optimisation level {}", session.opt_level()));
            } else {
                match argument.parse::<u8>() {
                    Ok(level @ 0..=3) => {
                        session.set_opt_level(level);
                        message(&mut outcome, format!("optimisation level {level}"));
                    }
                    _ => outcome.diagnostics.push(Diagnostic::error(
                        Kind::Syntax,
                        format!("`:opt` takes a level from 0 to 3, found `{argument}`"),
                    )),
                }
            }
        }
        ":defs" => {
            let lines = session.definition_lines();
            message(&mut outcome, if lines.is_empty() { "no definitions yet".into() } else { lines.join("\n") });
        }
        ":load" => {
            if argument.is_empty() {
                outcome.diagnostics.push(Diagnostic::error(Kind::Syntax, "`:load` needs a file name"));
            } else {
                return session.load_file(argument);
            }
        }
        ":expand" => {
            let (single_level, rest) =
                match argument.split_once(char::is_whitespace).map_or((argument, ""), |(first, rest)| (first, rest)) {
                    ("1", rest) => (true, rest.trim()),
                    _ if argument == "1" => (true, ""),
                    _ => (false, argument),
                };
            return session.expand_command((!rest.is_empty()).then_some(rest), single_level);
        }
        ":stages" => return session.inspect_command(&inspect::Stage::ALL, subject(argument)),
        ":types" => return session.inspect_command(&[inspect::Stage::Typed], subject(argument)),
        ":ir" => {
            let (stage, rest) = match argument.strip_prefix("opt") {
                Some(rest) if rest.is_empty() || rest.starts_with(char::is_whitespace) => {
                    (inspect::Stage::OptimisedIr, rest.trim())
                }
                _ => (inspect::Stage::Ir, argument),
            };
            return session.inspect_command(&[stage], subject(rest));
        }
        ":asm" => return session.inspect_command(&[inspect::Stage::Assembly], subject(argument)),
        ":ptx" => match subject(argument).map(str::to_string).or_else(|| session.default_ptx_subject()) {
            Some(name) => return session.inspect_command(&[inspect::Stage::Ptx], Some(&name)),
            None => outcome.diagnostics.push(
                Diagnostic::error(Kind::Syntax, "`:ptx` needs a kernel: the last cell defined or launched none")
                    .with_note("write `:ptx NAME`"),
            ),
        },
        ":gpu-arch" => match session.gpu_arch_command(argument) {
            Ok(text) => message(&mut outcome, text),
            Err(diagnostic) => outcome.diagnostics.push(diagnostic),
        },
        ":time" => match argument {
            "on" | "off" => {
                session.show_timing = argument == "on";
                message(&mut outcome, format!("timing {argument}"));
            }
            "last" | "" => match session.last_timing.clone() {
                Some(timing) => outcome.items.push(Item::Timing(timing)),
                None => message(&mut outcome, "no cell has run yet".into()),
            },
            _ => outcome
                .diagnostics
                .push(Diagnostic::error(Kind::Syntax, format!("`:time` takes on, off or last, found `{argument}`"))),
        },
        ":bench" => {
            if argument.is_empty() {
                outcome.diagnostics.push(Diagnostic::error(Kind::Syntax, "`:bench` needs an expression"));
            } else {
                return session.eval_bench_command(argument);
            }
        }
        ":limits" => {
            let mut words = argument.split_whitespace();
            return session.limits_command(words.next(), words.next());
        }
        _ => outcome.diagnostics.push(
            Diagnostic::error(Kind::Syntax, format!("unknown command `{command}`"))
                .with_note("`:help` lists the commands"),
        ),
    }
    outcome
}

fn subject(argument: &str) -> Option<&str> {
    (!argument.is_empty()).then_some(argument)
}
