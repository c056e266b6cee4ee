//! The command layer: one module per subcommand family. Commands use
//! `anyhow` for context; the exit code comes from the library error inside.

mod archives;
mod cache;
mod docs;
mod fleet;
mod guard;
mod hint;
mod lane;
mod lease;
mod ls;
mod reap;
mod replay;
mod run;
mod seal;
mod usage;

use clap::Parser;

use crate::cli::{Cli, Command};
use crate::error::Error;
use crate::exit;

/// Parses the command line, runs the command, prints an error once, and
/// returns the exit code.
pub fn main() -> u8 {
    // The sandbox init (runws re-executed by itself) skips the command-line
    // parser: it sits on the start-up path of every sandboxed run.
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if args.get(1).is_some_and(|a| a == crate::sandbox::INIT_COMMAND) {
        return crate::sandbox::init::main_from_args(args[2..].to_vec());
    }
    // A plain `runws run` line skips building clap's parser, on the start-up
    // path of every job; every other line, and every usage error, is clap's.
    let parsed = match crate::cli::fast::parse_run(&args, |name| std::env::var_os(name)) {
        Some(cli) => Ok(cli),
        None => Cli::try_parse_from(&args),
    };
    let cli = match parsed {
        Ok(cli) => cli,
        Err(e) if !e.use_stderr() => {
            // --help and --version.
            let _ = e.print();
            return exit::OK;
        }
        Err(e) => {
            eprint!("{}", usage::report(&e, &args));
            return exit::FAILURE;
        }
    };
    match dispatch(cli) {
        Ok(code) => code,
        Err(err) => {
            if is_broken_pipe(&err) {
                return exit::OK;
            }
            eprintln!("runws: {}", crate::error::render(&err));
            crate::error::exit_code_of(&err)
        }
    }
}

/// `show`'s error when this ROOT does not hold the run (or there is no
/// ROOT here at all): the run may be another host's.
fn not_here(e: &anyhow::Error, root: Option<&std::path::Path>) -> bool {
    matches!(e.downcast_ref::<crate::error::Error>(), Some(crate::error::Error::NoSuchRun { .. }))
        || crate::workspace::resolve_root(root).is_ok_and(|r| !r.path().is_dir())
}

/// Runs one parsed command line; returns the exit code on success.
pub(crate) fn dispatch(cli: Cli) -> anyhow::Result<u8> {
    let root = cli.root.as_deref();
    let store = cli.store.as_deref();
    match cli.command {
        Command::Run(args) => run::run(*args, root, store),
        Command::Lease(cmd) => lease::lease(root, store, cmd),
        Command::Cache(cmd) => cache::cache(cmd),
        Command::Publish { key, file, fence, to, verbose, json } => lease::publish(
            root,
            store,
            &key,
            file.as_deref(),
            fence,
            to.as_deref(),
            lease::Say { verbose, json },
        ),
        Command::Audit(args) => run::audit(*args, root, store),
        Command::Replay(args) => replay::replay(*args, root, store),
        Command::Put { name, file, verbose } => guard::put(&name, file.as_deref(), verbose),
        Command::Get { name, from } => guard::get(&name, from.as_deref()),
        Command::Has { name } => guard::has(&name),
        Command::Import { run, name } => guard::import(&run, &name),
        Command::Info { json } => guard::info(json),
        Command::Claim { kind, value, repo } => guard::claim(&kind, &value, repo.as_deref()),
        Command::Ls { job, since, limit, oldest_first, json, json_lines, fleet: true, host } => {
            let q = crate::store::FleetQuery { job, host, run: None, since, limit };
            fleet::ls(root, store, &q, oldest_first, json, json_lines)
        }
        Command::Ls { job, since, limit, oldest_first, json, json_lines, .. } => {
            let f = ls::Filter { job: job.as_deref(), since, limit, newest_first: !oldest_first };
            ls::ls(root, &f, json, json_lines)
        }
        Command::Show { run, json } => match ls::show(root, &run, json) {
            // A run this ROOT does not hold may be another host's.
            Err(e) if not_here(&e, root) => fleet::show(root, store, &run, json).unwrap_or(Err(e)),
            other => other,
        },
        Command::Cat { run, name, job } => ls::cat(root, &run, &name, job.as_deref()),
        Command::Seal { run, opts, json } => seal::seal(root, store, &run, &opts, json),
        Command::Scan { paths, json, rules } => seal::scan(&paths, json, rules),
        Command::Archives { run, job, archive_store, json } => {
            archives::list(root, run.as_deref(), job.as_deref(), archive_store.as_deref(), json)
        }
        Command::Verify { archive, json } => seal::verify(&archive, json),
        Command::Restore { archive, to, max_bytes, max_files, json } => {
            seal::restore(root, &archive, &to, crate::restore::Limits { max_bytes, max_files }, json)
        }
        Command::Reap { dry_run, keep, keep_branch, drop_unmerged, grace, archive_store, json } => {
            let opts = crate::reap::Options {
                dry_run,
                keep,
                keep_branch,
                drop_unmerged,
                grace,
                archive_store: crate::archive_store::configured(archive_store.as_deref())?,
                ..Default::default()
            };
            let code = reap::reap(root, &opts, json)?;
            // Records of this ROOT's runs that the fleet store could not
            // take when they ended go now.
            if !dry_run && crate::fleet::keeps_fleet(store) {
                fleet::flush(root, store.unwrap_or_default());
                fleet::mark_stale(store.unwrap_or_default());
            }
            Ok(code)
        }
        Command::Lane { command } => lane::dispatch(root, command),
        Command::Completions { shell } => docs::completions(shell),
        Command::Man => docs::man(),
    }
}

/// The schema of every JSON object a command prints with `--json`: fields
/// are only added within it, never renamed or removed.
pub(crate) const JSON_SCHEMA: u32 = 1;

/// Prints `value` (an object) on stdout as one line of JSON, with the
/// schema number first.
pub(crate) fn print_json(value: serde_json::Value) -> std::io::Result<()> {
    use std::io::Write;
    let mut object = serde_json::Map::new();
    object.insert("schema".into(), JSON_SCHEMA.into());
    if let serde_json::Value::Object(fields) = value {
        object.extend(fields);
    }
    let mut out = std::io::stdout().lock();
    serde_json::to_writer(&mut out, &serde_json::Value::Object(object))?;
    writeln!(out)?;
    out.flush()
}

/// A closed stdout (`runws ls | head`) is not an error.
pub(crate) fn is_broken_pipe(err: &anyhow::Error) -> bool {
    err.chain().any(|e| {
        e.downcast_ref::<std::io::Error>().is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
            || matches!(e.downcast_ref::<Error>(), Some(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::BrokenPipe)
    })
}
