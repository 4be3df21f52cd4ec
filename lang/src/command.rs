//! Commands: the `:` lines every front end shares (`:help`, `:opt`, `:reset`, `:load`…), read
//! into a closed `Command`; the session runs them (`session::command`).
//!
//! Reading a line knows no session, so a malformed command fails here with the same diagnostic
//! in every front end, before anything runs.

use crate::diagnostics::{Diagnostic, Kind};
use crate::inspect::Stage;

/// Every command, for completion and `:help`.
pub(crate) const COMMANDS: &[(&str, &str)] = &[
    (":help [TOPIC]", "show this help, or the commands about TOPIC (`:help ptx`)"),
    (":quit", "leave Quasi (or Ctrl-D)"),
    (":reset", "start a fresh session: definitions, globals and memory are dropped"),
    (":load FILE", "evaluate a file as one cell; a .rhai file runs as Rhai"),
    (":save FILE", "write the session so far as a transcript that `quasi test` checks"),
    (":opt [N|tiered]", "show or pin the optimisation level of later cells (0-3), or go back to tiered"),
    (":defs", "list the session's definitions"),
    (":skipped", "what the last cell's includes left out (no C-Lisp equivalent), and why"),
    (":tier [wait]", "each function's optimisation level; wait: until background promotions are done"),
    (":expand [1] [TEXT]", "show the expansion of TEXT (default: the last cell); 1: one level"),
    (":limits [NAME N]", "show or set the staging limits"),
    (":stages [N] [NAME]", "every stage of NAME (default: the last cell): source to assembly"),
    (":types [NAME|TEXT]", "the typed tree"),
    (":ir [opt] [N] [NAME]", "LLVM IR before (or after) optimisation, at level N (default: the code that runs)"),
    (":asm [N] [NAME]", "x86-64 assembly, at level N (default: the code that runs)"),
    (":ptx [NAME]", "PTX of a kernel (or any void function) and what it calls; no GPU needed"),
    (":gpu-arch [sm_XX]", "show or set the GPU target of PTX (default sm_90)"),
    (":gpu [sim [unchecked]|device]", "show or choose where launches run: the CUDA device or the CPU simulator"),
    (":time on|off|last", "show phase times after every cell, or of the last cell"),
    (":timeline", "the last cell's code and device work as lanes: the host and each submission"),
    (":trace FILE", "write the device work since the last :trace as Chrome trace JSON (Perfetto opens it)"),
    (":bench TEXT", "benchmark TEXT, as (bench TEXT)"),
    (
        ":tune cache [clear]",
        "what the tuning cache keeps of earlier autotunes (results, bytes, folder); clear: forget them",
    ),
    (":tune on [slurm …|local]", "where autotunes time their variants: on a Slurm cluster, or here"),
];

const HELP: &str = "Quasi: C-Lisp, compiled with LLVM and run as you type.

Type forms to define and run code:
  (define ((sq int) (x int)) (ret (mul x x)))   defines a function
  (call sq 7)                                    runs at once and prints 49 : int
A cell continues while parentheses are open.";

/// A command's name in its usage line: `:asm` of `:asm [N] [NAME]`.
pub(crate) fn command_name(usage: &'static str) -> &'static str {
    usage.split_whitespace().next().unwrap_or(usage)
}

/// The `:help` text: what Quasi is and every command, in a column as wide as the longest.
pub(crate) fn help() -> String {
    format!("{HELP}\n\nCommands:\n{}", command_lines(COMMANDS.iter()))
}

fn command_lines<'a>(commands: impl Iterator<Item = &'a (&'a str, &'a str)> + Clone) -> String {
    let width = commands.clone().map(|(usage, _)| usage.chars().count()).max().unwrap_or(0);
    let lines: Vec<String> = commands.map(|(usage, description)| format!("  {usage:<width$}  {description}")).collect();
    lines.join("\n")
}

/// `:help TOPIC`: the commands whose name or usage names TOPIC (`ptx`, `:ptx`, `opt`), and
/// what TOPIC is when it is a form, opcode or type (docs/language.md's row for it), else an
/// error with the nearest command or form.
pub(crate) fn help_on(topic: &str) -> Result<String, Diagnostic> {
    let word = topic.trim_start_matches(':');
    let named = |usage: &str| {
        usage.split(|character: char| !character.is_alphanumeric() && character != '-').any(|part| part == word)
    };
    let commands: Vec<&(&str, &str)> = COMMANDS.iter().filter(|(usage, _)| named(usage)).collect();
    let form = if topic.starts_with(':') { None } else { crate::reference::describe(word) };
    match (commands.is_empty(), form) {
        (false, Some(form)) => {
            return Ok(format!(
                "{}

{form}",
                command_lines(commands.into_iter())
            ))
        }
        (false, None) => return Ok(command_lines(commands.into_iter())),
        (true, Some(form)) => return Ok(form),
        (true, None) => {}
    }
    let names = COMMANDS.iter().map(|(usage, _)| command_name(usage).trim_start_matches(':'));
    Err(Diagnostic::error(Kind::Syntax, format!("no help on `{topic}`"))
        .with_note("`:help` lists the commands")
        .with_suggestion(word, names.chain(crate::check::FORM_NAMES.iter().copied())))
}

/// What inspection (Shift-Tab) shows of a built-in name: a command's usage line (`:ptx`), or a
/// form's reference rows (`ptradd`, `launch`, `bench`).
pub(crate) fn builtin_help(name: &str) -> Option<String> {
    if name.starts_with(':') {
        let commands: Vec<&(&str, &str)> = COMMANDS.iter().filter(|(usage, _)| command_name(usage) == name).collect();
        return (!commands.is_empty()).then(|| command_lines(commands.into_iter()).trim_start().to_string());
    }
    crate::reference::describe(name)
}

/// What `:opt` does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum OptSetting {
    /// Show the level and whether it is pinned.
    Show,
    /// Pin later cells to a level: no background promotion.
    Pin(u8),
    /// Compile later cells at the default level and promote them in the background.
    Tiered,
}

/// What `:time` does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TimeSetting {
    /// `:time on`: the phase table after every cell.
    On,
    /// `:time off`.
    Off,
    /// `:time` or `:time last`: the last cell's phase table.
    Last,
}

/// One command line, read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Command<'a> {
    /// `:help [TOPIC]`.
    Help(Option<&'a str>),
    Quit,
    Reset,
    Load(&'a str),
    /// `:save FILE`: the front end writes the session so far as a transcript.
    Save(&'a str),
    /// `:opt` shows the level; `:opt N` pins it; `:opt tiered` goes back to tiered compilation.
    Opt(OptSetting),
    Defs,
    /// `:skipped`: what the last cell's includes left out.
    Skipped,
    /// `:tier`: each function's optimisation level; `:tier wait` first waits for the background
    /// compiler.
    Tier {
        wait: bool,
    },
    /// `:expand [1] [TEXT]`: the subject (default: the last cell) and whether one level only.
    Expand {
        text: Option<&'a str>,
        single_level: bool,
    },
    /// `:stages`, `:types`, `:ir [opt]`, `:asm`: stages of a definition, cell text or the last cell,
    /// at an optimisation level given first (`:asm 1 fib`), else the level of the code that runs.
    Inspect {
        stages: &'a [Stage],
        subject: Option<&'a str>,
        level: Option<u8>,
    },
    /// `:ptx [NAME]` (default: the last cell's kernel).
    Ptx(Option<&'a str>),
    /// `:gpu-arch [sm_XX]`.
    GpuArch(&'a str),
    /// `:gpu` shows where launches run; `:gpu sim`, `:gpu sim unchecked`, `:gpu device` choose.
    Gpu(Option<crate::gpu::Mode>),
    Time(TimeSetting),
    /// `:timeline`: the last cell's work as lanes.
    Timeline,
    /// `:trace FILE`: the session's device work since the last `:trace`, as trace-event JSON.
    Trace(&'a str),
    /// `:bench TEXT` is `(bench TEXT)`.
    Bench(&'a str),
    /// `:tune cache [clear]`.
    TuneCache {
        clear: bool,
    },
    /// `:tune on [slurm …|local]`: the text after `on`.
    TuneOn(&'a str),
    /// `:limits [NAME VALUE]`.
    Limits {
        name: Option<&'a str>,
        value: Option<&'a str>,
    },
}

/// Reads a command line (it starts with `:`).
pub(crate) fn parse(line: &str) -> Result<Command<'_>, Diagnostic> {
    let line = line.trim();
    let command = line.split_whitespace().next().unwrap_or("");
    let argument = line[command.len()..].trim();
    let syntax = |message: String| Diagnostic::error(Kind::Syntax, message);
    Ok(match command {
        ":help" | ":h" | ":?" => Command::Help(subject(argument)),
        ":quit" | ":q" | ":exit" => Command::Quit,
        ":reset" => Command::Reset,
        ":opt" if argument.is_empty() => Command::Opt(OptSetting::Show),
        ":opt" if argument == "tiered" => Command::Opt(OptSetting::Tiered),
        ":opt" => match argument.parse::<u8>() {
            Ok(level @ 0..=3) => Command::Opt(OptSetting::Pin(level)),
            _ => return Err(syntax(format!("`:opt` takes a level from 0 to 3 or `tiered`, found `{argument}`"))),
        },
        ":defs" => Command::Defs,
        ":skipped" if argument.is_empty() => Command::Skipped,
        ":skipped" => return Err(syntax(format!("`:skipped` takes nothing, found `{argument}`"))),
        ":tier" if argument.is_empty() => Command::Tier { wait: false },
        ":tier" if argument == "wait" => Command::Tier { wait: true },
        ":tier" => return Err(syntax(format!("`:tier` takes nothing or `wait`, found `{argument}`"))),
        ":load" if argument.is_empty() => return Err(syntax("`:load` needs a file name".into())),
        ":load" => Command::Load(argument),
        ":save" if argument.is_empty() => {
            return Err(syntax("`:save` needs a file name, e.g. `:save session.repl`".into()))
        }
        ":save" => Command::Save(argument),
        ":expand" => {
            let (single_level, rest) =
                match argument.split_once(char::is_whitespace).map_or((argument, ""), |(first, rest)| (first, rest)) {
                    ("1", rest) => (true, rest.trim()),
                    _ if argument == "1" => (true, ""),
                    _ => (false, argument),
                };
            Command::Expand { text: subject(rest), single_level }
        }
        ":stages" => inspect(&Stage::ALL, argument)?,
        ":types" => Command::Inspect { stages: &[Stage::Typed], subject: subject(argument), level: None },
        ":ir" => match argument.strip_prefix("opt") {
            Some(rest) if rest.is_empty() || rest.starts_with(char::is_whitespace) => {
                inspect(&[Stage::OptimisedIr], rest.trim())?
            }
            _ => inspect(&[Stage::Ir], argument)?,
        },
        ":asm" => inspect(&[Stage::Assembly], argument)?,
        ":ptx" => Command::Ptx(subject(argument)),
        ":gpu-arch" => Command::GpuArch(argument),
        ":gpu" => Command::Gpu(match argument.split_whitespace().collect::<Vec<_>>().as_slice() {
            [] => None,
            ["device"] => Some(crate::gpu::Mode::Device),
            ["sim"] => Some(crate::gpu::Mode::Sim { check: true }),
            ["sim", "unchecked"] => Some(crate::gpu::Mode::Sim { check: false }),
            _ => return Err(syntax(format!("`:gpu` takes `sim`, `sim unchecked` or `device`, found `{argument}`"))),
        }),
        ":time" => Command::Time(match argument {
            "on" => TimeSetting::On,
            "off" => TimeSetting::Off,
            "last" | "" => TimeSetting::Last,
            _ => return Err(syntax(format!("`:time` takes on, off or last, found `{argument}`"))),
        }),
        ":timeline" if argument.is_empty() => Command::Timeline,
        ":timeline" => return Err(syntax(format!("`:timeline` takes nothing, found `{argument}`"))),
        ":trace" if argument.is_empty() => {
            return Err(syntax("`:trace` needs a file name, e.g. `:trace cells.json`".into()))
        }
        ":trace" => Command::Trace(argument),
        ":bench" if argument.is_empty() => return Err(syntax("`:bench` needs an expression".into())),
        ":bench" => Command::Bench(argument),
        ":tune" => match argument.split_whitespace().collect::<Vec<_>>().as_slice() {
            ["cache"] => Command::TuneCache { clear: false },
            ["cache", "clear"] => Command::TuneCache { clear: true },
            ["on", ..] => Command::TuneOn(argument.trim_start()["on".len()..].trim()),
            [] => return Err(syntax("`:tune` takes `cache`, `cache clear` or `on slurm …|local`".into())),
            _ => {
                return Err(syntax(format!(
                    "`:tune` takes `cache`, `cache clear` or `on slurm …|local`, found `{argument}`"
                )))
            }
        },
        ":limits" => {
            let mut words = argument.split_whitespace();
            Command::Limits { name: words.next(), value: words.next() }
        }
        _ => {
            let commands = COMMANDS.iter().map(|(usage, _)| command_name(usage));
            return Err(syntax(format!("unknown command `{command}`"))
                .with_note("`:help` lists the commands")
                .with_suggestion(command, commands));
        }
    })
}

fn subject(argument: &str) -> Option<&str> {
    (!argument.is_empty()).then_some(argument)
}

/// A listing command's argument: an optimisation level 0–3 first, when a subject follows it.
fn inspect<'a>(stages: &'a [Stage], argument: &'a str) -> Result<Command<'a>, Diagnostic> {
    let leading = argument.split_once(char::is_whitespace).and_then(|(first, rest)| {
        let rest = rest.trim();
        (!rest.is_empty()).then_some((first.parse::<u64>().ok()?, rest))
    });
    Ok(match leading {
        Some((level, rest)) if level <= 3 => {
            Command::Inspect { stages, subject: subject(rest), level: Some(level as u8) }
        }
        Some((level, _)) => {
            return Err(Diagnostic::error(Kind::Syntax, format!("optimisation levels are 0–3, not {level}"))
                .with_note("e.g. `:asm 1 fib` lists fib's code at level 1"))
        }
        None => Command::Inspect { stages, subject: subject(argument), level: None },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_command_is_in_the_documents_command_tables() {
        // One table of commands: this one, which :help and inspection show; docs/language.md §8
        // and the README list each of them too.
        let language = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/language.md"));
        let readme = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md"));
        for (usage, _) in super::COMMANDS {
            let name = super::command_name(usage);
            for (document, text) in [("docs/language.md", language), ("README.md", readme)] {
                let listed = text.lines().filter(|line| line.starts_with("| `:")).any(|line| {
                    line.split('`').skip(1).step_by(2).any(|cell| cell.split_whitespace().next() == Some(name))
                });
                assert!(listed, "{document}'s command table lacks `{name}`");
            }
        }
    }

    #[test]
    fn reads_every_form_of_a_command() {
        assert_eq!(parse(":opt").ok(), Some(Command::Opt(OptSetting::Show)));
        assert_eq!(parse(":opt 3").ok(), Some(Command::Opt(OptSetting::Pin(3))));
        assert_eq!(parse(":opt tiered").ok(), Some(Command::Opt(OptSetting::Tiered)));
        assert!(parse(":opt fast").is_err());
        assert_eq!(parse(":tier").ok(), Some(Command::Tier { wait: false }));
        assert_eq!(parse(":tier wait").ok(), Some(Command::Tier { wait: true }));
        assert!(parse(":tier now").is_err());
        assert_eq!(parse(":expand 1 (f)").ok(), Some(Command::Expand { text: Some("(f)"), single_level: true }));
        assert_eq!(parse(":expand 1").ok(), Some(Command::Expand { text: None, single_level: true }));
        assert_eq!(parse(":expand (f 1)").ok(), Some(Command::Expand { text: Some("(f 1)"), single_level: false }));
        assert_eq!(
            parse(":ir opt fib").ok(),
            Some(Command::Inspect { stages: &[Stage::OptimisedIr], subject: Some("fib"), level: None })
        );
        assert_eq!(
            parse(":ir optimus").ok(),
            Some(Command::Inspect { stages: &[Stage::Ir], subject: Some("optimus"), level: None })
        );
        assert_eq!(parse(":limits ops 10").ok(), Some(Command::Limits { name: Some("ops"), value: Some("10") }));
        assert_eq!(parse(":time").ok(), Some(Command::Time(TimeSetting::Last)));
        assert_eq!(parse(":save my session.repl").ok(), Some(Command::Save("my session.repl")));
    }

    #[test]
    fn malformed_commands_are_syntax_errors() {
        for line in [":opt 4", ":load", ":save", ":time sometimes", ":bench", ":frobnicate"] {
            let error = parse(line).expect_err(line);
            assert_eq!(error.kind, Kind::Syntax, "{line}");
        }
    }
}
