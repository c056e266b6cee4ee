//! The command line: clap types only, one variant per subcommand, and the
//! entry point that maps a command's result to an exit code.

use std::ffi::OsString;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::exit;

#[derive(Debug, Parser)]
#[command(
    name = "runws",
    version,
    about = "Give one execution of a command its own run id, directory, environment and record",
    long_about = "Give one execution of a command its own world: a run id, a run directory, an \
environment built from empty (its own HOME, TMPDIR, XDG and git config paths, a kernel-assigned \
port), a manifest with the fingerprint of its inputs, and a guard the command calls to write \
outputs stamped with its run id.\n\nStart with `runws run -- ./job.sh`, then `runws ls` and \
`runws show last`.",
    after_help = "Exit codes: `runws run` exits with the command's own status (128+N when signal N \
ended it), 124 on --timeout, 125 when runws itself failed, 126 when the command cannot be \
executed, 127 when it was not found. See the README for the codes of the other subcommands."
)]
pub struct Cli {
    /// Directory holding runs/, store/ and archive/ (default: RUNWS_ROOT, else
    /// $XDG_STATE_HOME/runws, else ~/.local/state/runws)
    #[arg(long, value_name = "DIR", env = "RUNWS_ROOT", hide_env = true, global = true)]
    pub root: Option<PathBuf>,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a command in a fresh run workspace
    #[command(
        long_about = "Run COMMAND once, in a fresh run directory ROOT/runs/<run_id>/, with an \
environment built from empty. The command's cwd is the run's work/ directory; a relative COMMAND \
path is resolved from where runws was started.",
        after_help = "Examples:\n  runws run -- ./nightly.sh\n  runws run --job report --input data.csv \
--timeout 10m --capture -- python3 make_report.py\n  runws run --ports 2 --pass AWS_PROFILE -- ./server.sh"
    )]
    Run(Box<RunArgs>),

    /// Run a command as it would run, behind a copy-on-write layer, and report
    /// what it changed outside its run
    #[command(
        long_about = "Run COMMAND with every location outside its run directory behind a \
copy-on-write layer (an overlay with a per-run upper layer), so it behaves as it would without \
runws (it sees your real HOME, caches and config paths) but nothing it writes there reaches the \
file system. Afterwards, list every file and directory it created, changed or deleted outside \
the run (on stderr, or as JSON on stdout with --json) and record the list in the manifest.",
        after_help = "Examples:\n  runws audit -- git config --global user.name x\n  runws audit --json -- npm cache add left-pad"
    )]
    Audit(Box<AuditArgs>),

    /// Write an output of the current run (called by the command)
    #[command(long_about = "Write outputs/NAME.<run_id> of the current run atomically from FILE, or \
standard input when FILE is `-` or absent, and record its bytes and sha256 in the manifest. \
Writing the same bytes again succeeds without rewriting.")]
    Put {
        /// Output name: one path component, at most 200 bytes
        name: String,
        /// File to read, or `-` for standard input
        file: Option<PathBuf>,
        /// Say on stderr what was written (or that nothing changed)
        #[arg(short, long)]
        verbose: bool,
    },

    /// Print an output of the current run (called by the command)
    Get {
        name: String,
        /// Refused unless RUN is the current run: read another run's output with `import`
        #[arg(long, value_name = "RUN")]
        from: Option<String>,
    },

    /// Succeed only if the current run produced NAME (exit 1 otherwise)
    #[command(long_about = "Exit 0 only if the current run recorded NAME and its bytes still match; exit 1 \
otherwise, silently. A file on disk is not proof that this run did the work.")]
    Has { name: String },

    /// Copy a finished run's output into this run's inputs, recorded
    #[command(
        long_about = "The one deliberate cross-run read: copy output NAME of run RUN (which must have \
succeeded, with bytes matching its manifest) into inputs/RUN/NAME of the current run, and record \
the producer run and sha256 in the inputs and the input fingerprint."
    )]
    Import { run: String, name: String },

    /// Record something this run created, for `reap` (called by the command)
    #[command(
        long_about = "Record in the manifest something the run created outside plain files of its own \
directory, so that `runws reap` removes exactly that and nothing else: a `path` (removed only if it \
lies inside the run directory), a git `branch` or `worktree` (of --repo, default the current \
directory), or a process group `pgid` (signalled only while it is still that group)."
    )]
    Claim {
        #[arg(value_parser = ["path", "branch", "worktree", "pgid"])]
        kind: String,
        value: String,
        /// The git repository of a branch or worktree (default: the current directory)
        #[arg(long, value_name = "DIR")]
        repo: Option<PathBuf>,
    },

    /// Show the current run (called by the command)
    Info {
        #[arg(long)]
        json: bool,
    },

    /// List runs
    Ls {
        /// Only runs of this job
        #[arg(long, value_name = "JOB")]
        job: Option<String>,
        #[arg(long)]
        json: bool,
    },

    /// Reclaim runs nobody owns: expired leases, finished runs' scratch
    #[command(
        long_about = "Reclaim what nobody owns. A running run is taken over only when its lease has \
expired and (on this host) its runws process is gone: its process group is ended, its claimed \
worktrees, branches and paths (inside the run) removed, its scratch (home, tmp, cache, run, bin) \
deleted, and its manifest marked `abandoned`. Finished runs lose their scratch and claims too. \
The manifest, inputs/, outputs/, work/ and logs/ are kept as evidence. Symlinks are never \
followed, and nothing is matched by name.",
        after_help = "Examples:\n  runws reap --dry-run\n  runws reap --keep 30d --json"
    )]
    Reap {
        /// Report what would be done; change nothing
        #[arg(long)]
        dry_run: bool,
        /// Also remove whole finished or abandoned runs older than DUR
        #[arg(long, value_name = "DUR", value_parser = crate::duration::parse)]
        keep: Option<std::time::Duration>,
        /// Wait between SIGTERM and SIGKILL to a leftover process group
        #[arg(long, value_name = "DUR", value_parser = crate::duration::parse, default_value = "2s")]
        grace: std::time::Duration,
        #[arg(long)]
        json: bool,
    },

    /// Show one run's manifest (`last` for the most recently started)
    Show {
        /// A run id, or `last`
        run: String,
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// Use this run id instead of a new UUIDv7 (also read from RUNWS_RUN_ID,
    /// except inside a run, where that variable names the enclosing run)
    #[arg(long, value_name = "ID")]
    pub run_id: Option<String>,

    /// Job name recorded in the manifest (default: the command's file name)
    #[arg(long, value_name = "NAME")]
    pub job: Option<String>,

    /// Give the command KEY=VALUE (the value is never recorded)
    #[arg(long = "env", value_name = "KEY=VALUE")]
    pub env: Vec<String>,

    /// Copy KEY from runws's own environment (an absent KEY is recorded as absent)
    #[arg(long = "pass", value_name = "KEY")]
    pub pass: Vec<String>,

    /// Read KEY=VALUE lines from FILE (`#` comments and blank lines skipped)
    #[arg(long = "env-file", value_name = "FILE")]
    pub env_file: Vec<PathBuf>,

    /// PATH after the run's own bin/
    #[arg(long, value_name = "DIRS", default_value = "/usr/local/bin:/usr/bin:/bin")]
    pub path: String,

    /// How many kernel-assigned ports to reserve (PORT, PORT_1, ...)
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub ports: u16,

    /// Address the ports are bound on
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1")]
    pub port_host: String,

    /// Hand the bound, listening sockets to the command (fd 3 on, LISTEN_FDS)
    #[arg(long)]
    pub listen: bool,

    /// Copy FILE or DIR into inputs/ and fingerprint it (repeatable)
    #[arg(long = "input", value_name = "PATH")]
    pub inputs: Vec<PathBuf>,

    /// Record a fingerprint computed elsewhere
    #[arg(long, value_name = "TEXT")]
    pub fingerprint: Option<String>,

    /// Send SIGTERM to the command's process group after DUR; exit 124
    #[arg(long, value_name = "DUR", value_parser = crate::duration::parse)]
    pub timeout: Option<std::time::Duration>,

    /// After the timeout's SIGTERM, send SIGKILL when DUR more has passed
    #[arg(long, value_name = "DUR", value_parser = crate::duration::parse, requires = "timeout")]
    pub kill_after: Option<std::time::Duration>,

    /// How long the run's lease lasts; runws renews it every third of this
    #[arg(long, value_name = "DUR", value_parser = crate::duration::parse, default_value = "60s")]
    pub lease_ttl: std::time::Duration,

    /// Also write the command's stdout and stderr to logs/
    #[arg(long)]
    pub capture: bool,

    /// The command's working directory (default: the run's work/)
    #[arg(long, value_name = "DIR")]
    pub cwd: Option<PathBuf>,

    /// Run inside a sandbox: read-only file system, private /tmp, hidden home,
    /// own PID namespace; refuse the run if a protection fails (`try`: run
    /// without it and record it)
    #[arg(
        long,
        value_name = "MODE",
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "on",
        value_parser = ["on", "try"]
    )]
    pub sandbox: Option<String>,

    /// With --sandbox: `none` for a network with only loopback (default: host)
    #[arg(long, value_enum, value_name = "NET", requires = "sandbox")]
    pub net: Option<crate::sandbox::Net>,

    /// With --sandbox: make PATH writable (repeatable)
    #[arg(long = "rw", value_name = "PATH", requires = "sandbox")]
    pub rw: Vec<PathBuf>,

    /// With --sandbox: make PATH visible, read-only, even where it is hidden (repeatable)
    #[arg(long = "ro", value_name = "PATH", requires = "sandbox")]
    pub ro: Vec<PathBuf>,

    /// With --sandbox: hide PATH behind an empty, read-only directory or file (repeatable)
    #[arg(long = "hide", value_name = "PATH", requires = "sandbox")]
    pub hide: Vec<PathBuf>,

    /// The command and its arguments
    #[arg(required = true, trailing_var_arg = true, value_name = "COMMAND")]
    pub command: Vec<OsString>,
}

#[derive(Debug, Args)]
pub struct AuditArgs {
    /// Print the report as JSON on stdout (after the command's own output)
    #[arg(long)]
    pub json: bool,

    #[command(flatten)]
    pub run: RunArgs,
}

/// Parses the command line, runs the command, prints an error once, and
/// returns the exit code.
pub fn main() -> u8 {
    // The sandbox init (runws re-executed by itself) skips the command-line
    // parser: it sits on the start-up path of every sandboxed run.
    let mut args = std::env::args_os();
    if args.nth(1).is_some_and(|a| a == crate::sandbox::INIT_COMMAND) {
        return crate::sandbox::init::main_from_args(args.collect());
    }
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if !e.use_stderr() => {
            // --help and --version.
            let _ = e.print();
            return exit::OK;
        }
        Err(e) => {
            // One line, like every other refusal.
            let text = e.to_string();
            let first = text.lines().next().unwrap_or("invalid usage");
            let first = first.strip_prefix("error: ").unwrap_or(first);
            eprintln!("runws: {first} (see `runws --help`)");
            return exit::FAILURE;
        }
    };
    match crate::cmd::dispatch(cli) {
        Ok(code) => code,
        Err(err) => {
            if crate::cmd::is_broken_pipe(&err) {
                return exit::OK;
            }
            eprintln!("runws: {}", crate::cmd::render(&err));
            crate::cmd::exit_code(&err)
        }
    }
}
