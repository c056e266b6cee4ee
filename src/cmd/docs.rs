//! `runws completions SHELL` and `runws man`: generated from the clap
//! definitions `--help` shows, and reached only from these subcommands (a
//! `runws run` never builds them).

use std::io::Write;

use clap::CommandFactory;
use roff::{Roff, bold, italic, roman};

use crate::cli::Cli;
use crate::exit;

pub fn completions(shell: clap_complete::Shell) -> anyhow::Result<u8> {
    let mut cmd = Cli::command();
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut cmd, "runws", &mut script);
    print(&script)
}

/// runws(1): the top-level page, then a COMMANDS section with every
/// subcommand's synopsis, description and options on the same page.
pub fn man() -> anyhow::Result<u8> {
    let mut cmd = Cli::command();
    cmd.build();
    let page = clap_mangen::Man::new(cmd.clone());
    let mut out = Vec::new();
    page.render_title(&mut out)?;
    page.render_name_section(&mut out)?;
    page.render_synopsis_section(&mut out)?;
    page.render_description_section(&mut out)?;
    page.render_options_section(&mut out)?;
    let mut roff = Roff::new();
    roff.control("SH", ["COMMANDS"]);
    for sub in cmd.get_subcommands() {
        command(&mut roff, sub, "runws");
    }
    roff.to_writer(&mut out)?;
    page.render_extra_section(&mut out)?;
    page.render_version_section(&mut out)?;
    print(&out)
}

fn command(roff: &mut Roff, cmd: &clap::Command, parent: &str) {
    if cmd.get_name() == "help" || cmd.is_hide_set() {
        return;
    }
    let path = format!("{parent} {}", cmd.get_name());
    roff.control("SS", [path.as_str()]);
    let usage = cmd.clone().bin_name(&path).render_usage().to_string();
    roff.text([bold(usage.trim().trim_start_matches("Usage:").trim())]);
    if let Some(about) = cmd.get_long_about().or_else(|| cmd.get_about()) {
        roff.control("PP", []);
        roff.text([roman(about.to_string())]);
    }
    for arg in cmd.get_arguments().filter(|a| !a.is_hide_set() && !a.is_global_set()) {
        let name = arg
            .get_value_names()
            .map(|v| v.iter().map(|n| format!("<{n}>")).collect::<Vec<_>>().join(" "))
            .or_else(|| arg.is_positional().then(|| format!("<{}>", arg.get_id().as_str().to_uppercase())));
        let mut spec = vec![];
        match (arg.get_short(), arg.get_long()) {
            (Some(s), Some(l)) => spec.push(bold(format!("-{s}, --{l}"))),
            (Some(s), None) => spec.push(bold(format!("-{s}"))),
            (None, Some(l)) => spec.push(bold(format!("--{l}"))),
            (None, None) => {}
        }
        let takes = arg.get_num_args().is_some_and(|n| n.takes_values());
        if let Some(name) = name.filter(|_| takes || arg.is_positional()) {
            if !spec.is_empty() {
                spec.push(roman(" "));
            }
            spec.push(italic(name));
        }
        roff.control("TP", []);
        roff.text(spec);
        if let Some(help) = arg.get_long_help().or_else(|| arg.get_help()) {
            roff.text([roman(help.to_string())]);
        }
    }
    for sub in cmd.get_subcommands() {
        command(roff, sub, &path);
    }
}

fn print(bytes: &[u8]) -> anyhow::Result<u8> {
    let mut out = std::io::stdout().lock();
    out.write_all(bytes)?;
    out.flush()?;
    Ok(exit::OK)
}
