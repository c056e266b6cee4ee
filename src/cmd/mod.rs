//! The command layer: one module per subcommand family. Commands use
//! `anyhow` for context; the exit code comes from the library error inside.

pub mod guard;
pub mod ls;
pub mod reap;
pub mod run;

use crate::cli::{Cli, Command};
use crate::error::Error;
use crate::exit;

/// Runs one parsed command line; returns the exit code on success.
pub fn dispatch(cli: Cli) -> anyhow::Result<u8> {
    let root = cli.root.as_deref();
    match cli.command {
        Command::Run(args) => run::run(*args, root),
        Command::Audit(args) => run::audit(*args, root),
        Command::Put { name, file, verbose } => guard::put(&name, file.as_deref(), verbose),
        Command::Get { name, from } => guard::get(&name, from.as_deref()),
        Command::Has { name } => guard::has(&name),
        Command::Import { run, name } => guard::import(&run, &name),
        Command::Info { json } => guard::info(json),
        Command::Claim { kind, value, repo } => guard::claim(&kind, &value, repo.as_deref()),
        Command::Ls { job, json } => ls::ls(root, job.as_deref(), json),
        Command::Show { run, json } => ls::show(root, &run, json),
        Command::Reap { dry_run, keep, grace, json } => reap::reap(root, dry_run, keep, grace, json),
    }
}

/// The error and its causes on one line.
pub fn render(err: &anyhow::Error) -> String {
    let mut parts: Vec<String> = Vec::new();
    for cause in err.chain() {
        let text = cause.to_string();
        // thiserror messages already include their source's text.
        if !parts.last().is_some_and(|p| p.contains(&text)) {
            parts.push(text);
        }
    }
    parts.join(": ")
}

/// The exit code of the first runws error in the chain; 125 otherwise.
pub fn exit_code(err: &anyhow::Error) -> u8 {
    err.chain().find_map(|e| e.downcast_ref::<Error>()).map(Error::exit_code).unwrap_or(exit::FAILURE)
}

/// A closed stdout (`runws ls | head`) is not an error.
pub fn is_broken_pipe(err: &anyhow::Error) -> bool {
    err.chain().any(|e| {
        e.downcast_ref::<std::io::Error>().is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
            || matches!(e.downcast_ref::<Error>(), Some(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::BrokenPipe)
    })
}
