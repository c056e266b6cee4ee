//! A usage error, as runws reports it: one line that keeps clap's tip and
//! points at the help of the command it was made in; a command group given
//! without its subcommand (bare `runws`, `runws lease`) lists its commands.

use std::ffi::OsString;

use clap::CommandFactory;
use clap::error::ErrorKind;

use crate::cli::Cli;

/// What to print on stderr for clap's error `e` on the command line `args`
/// (the program name first).
pub fn report(e: &clap::Error, args: &[OsString]) -> String {
    let mut cmd = Cli::command();
    // Subcommands add their arguments (and their own subcommands) when built.
    cmd.build();
    let path = command_path(&cmd, args);
    if matches!(e.kind(), ErrorKind::MissingSubcommand | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand)
    {
        let mut sub = &mut cmd;
        for name in &path {
            sub = sub.find_subcommand_mut(name).expect("a subcommand found on the line");
        }
        let bin =
            std::iter::once("runws").chain(path.iter().map(String::as_str)).collect::<Vec<_>>().join(" ");
        let mut sub = sub.clone().bin_name(bin);
        return sub.render_help().to_string();
    }
    let shown = std::iter::once("runws").chain(path.iter().map(String::as_str)).collect::<Vec<_>>().join(" ");
    format!("runws: {} (see `{shown} --help`)\n", crate::shown::line(&one_line(&e.to_string())))
}

/// The subcommands named on `args`, outermost first: each word that names
/// a subcommand of the one before it, skipping options and their values,
/// up to `--`.
fn command_path(root: &clap::Command, args: &[OsString]) -> Vec<String> {
    let mut path = Vec::new();
    let mut cmd = root;
    let mut words = args.iter().skip(1).filter_map(|w| w.to_str());
    while let Some(word) = words.next() {
        if word == "--" {
            break;
        }
        if let Some(long) = word.strip_prefix("--") {
            let takes_value = !long.contains('=')
                && [cmd, root].iter().flat_map(|c| c.get_arguments()).any(|a| {
                    a.get_long() == Some(long)
                        && a.get_action().takes_values()
                        && a.get_num_args().is_none_or(|n| n.min_values() > 0)
                });
            if takes_value {
                words.next();
            }
            continue;
        }
        if word.starts_with('-') {
            continue;
        }
        match cmd.find_subcommand(word) {
            Some(sub) => {
                path.push(sub.get_name().to_string());
                cmd = sub;
            }
            // A positional argument: no subcommand follows one.
            None => break,
        }
    }
    path
}

/// clap's message on one line, like every other refusal: its first lines
/// (which may list the missing arguments below the first) and its tips
/// (`a similar argument exists: '--capture'`), without the usage section.
fn one_line(text: &str) -> String {
    let text = text.strip_prefix("error: ").unwrap_or(text);
    let mut lines = text.lines().map(str::trim);
    let mut message: Vec<String> = lines.by_ref().take_while(|l| !l.is_empty()).map(str::to_string).collect();
    let tips: Vec<&str> = lines
        .take_while(|l| !l.starts_with("Usage:") && !l.starts_with("For more information"))
        .filter(|l| l.starts_with("tip:"))
        .collect();
    // `--captur` is far likelier a typo than a value meant for the command.
    let typo = tips.iter().any(|t| t.contains("similar"));
    for tip in tips.into_iter().filter(|t| !(typo && t.starts_with("tip: to pass"))) {
        message.push(format!("; {tip}"));
    }
    if message.is_empty() { "invalid usage".into() } else { message.join(" ").replace(" ; ", "; ") }
}
