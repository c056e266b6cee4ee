//! The command line: clap types only, one variant per subcommand. Parsing
//! and dispatch live in `cmd`.

use std::ffi::OsString;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::run::defaults;
pub mod fast;
mod lane;
mod replay;
pub use lane::LaneCommand;
pub use replay::{Expect, ReplayArgs};

#[derive(Debug, Parser)]
#[command(
    name = "runws",
    version = env!("RUNWS_VERSION"),
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
    /// Lease and sink store: file:DIR or postgres://... (default: file:ROOT/store)
    #[arg(long, value_name = "URL", env = "RUNWS_STORE", hide_env = true, global = true)]
    pub store: Option<String>,

    /// Directory holding runs/, store/ and archive/ (default: RUNWS_ROOT, else
    /// $XDG_STATE_HOME/runws, else ~/.local/state/runws)
    #[arg(long, value_name = "DIR", env = "RUNWS_ROOT", hide_env = true, global = true)]
    pub root: Option<PathBuf>,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
#[command(defer = true)]
pub enum Command {
    /// Run a command in a fresh run workspace
    #[command(
        long_about = "Run COMMAND once, in a fresh run directory ROOT/runs/<run_id>/, with an \
environment built from empty. The command's cwd is the run's work/ directory; a relative COMMAND \
path is resolved from where runws was started.",
        after_help = "Durations (DUR) are 90s, 10m, 1h30m, 500ms or seconds, at most 1000000000s \
(about 31 years); sizes at most 1PiB.\n\nExamples:\n  runws run -- ./nightly.sh\n  runws run --job report --input data.csv \
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

    /// Run a finished run again from its recorded inputs, and say whether the result is the same
    #[command(
        long_about = "Start a new run (its own id, directory, ports and manifest, which records \
`replay_of`) of the command RUN recorded, with its job, working directory, timeout and isolation, \
and its input copies (imports included) as inputs: its input fingerprint is RUN's. Names RUN was \
passed with --pass are passed again; values it was given with --env or --env-file were never \
recorded, so give them again. Refused, with nothing created, while RUN has not ended, when its \
input copies no longer match their sha256, or when a variable is missing (all are named). Then each \
output is compared by sha256 (same, different, missing, new), and the status and exit code too; the \
comparison goes to stderr, to the replay's manifest under `replay`, and with --json to stdout. An \
ARCHIVE is verified and restored (scanned, as `restore` does) under ROOT/restores/ first.",
        after_help = "Examples:\n  runws replay last\n  runws replay 01927c3e --expect same --env-file prod.env\n  \
runws replay ROOT/archive/report/01927c3e.tar.zst --sandbox --net none"
    )]
    Replay(Box<ReplayArgs>),

    /// Write an output of the current run (called by the command)
    #[command(long_about = "Write outputs/NAME.<run_id> of the current run atomically from FILE, or \
standard input when FILE is `-` or absent, and record its bytes and sha256 in the manifest. \
Writing the same bytes again succeeds without rewriting.")]
    Put {
        /// Output name: one path component, at most 200 bytes (any bytes but `/` and NUL)
        name: OsString,
        /// File to read, or `-` for standard input
        file: Option<PathBuf>,
        /// Say on stderr what was written (or that nothing changed)
        #[arg(short, long)]
        verbose: bool,
    },

    /// Print an output of the current run (called by the command)
    Get {
        /// Output name, as given to `runws put`
        name: OsString,
        /// Refused unless RUN is the current run: read another run's output with `import`
        #[arg(long, value_name = "RUN")]
        from: Option<String>,
    },

    /// Succeed only if the current run produced NAME (exit 1 otherwise)
    #[command(long_about = "Exit 0 only if the current run recorded NAME and its bytes still match; exit 1 \
otherwise, silently. A file on disk is not proof that this run did the work.")]
    Has {
        /// Output name, as given to `runws put`
        name: OsString,
    },

    /// Copy a finished run's output into this run's inputs, recorded
    #[command(
        long_about = "The one deliberate cross-run read: copy output NAME of run RUN (which must have \
succeeded, with bytes matching its manifest) into inputs/RUN/NAME of the current run, and record \
the producer run and sha256 in the inputs and the input fingerprint."
    )]
    Import {
        /// The id of the run that produced NAME
        run: String,
        /// Output name in that run
        name: OsString,
    },

    /// Record something this run created, for `reap` (called by the command)
    #[command(
        long_about = "Record in the manifest something the run created outside plain files of its own \
directory, so that `runws reap` removes exactly that and nothing else: a `path` (removed only if it \
lies inside the run directory), a git `worktree` (of --repo, default the current directory; it must \
lie inside the run directory), a git `branch` (its name must carry the run id, as `runws/<id>`, or \
start with $RUNWS_PREFIX), or a process group `pgid` (accepted only while its leader is alive and \
every member descends from this run's runws; signalled only while every member provably belongs to \
the run). A claim that breaks these rules is refused (exit 125)."
    )]
    Claim {
        /// What is claimed: a path, a git branch or worktree, or a process group
        #[arg(value_parser = ["path", "branch", "worktree", "pgid"])]
        kind: String,
        /// The path, branch name, worktree path or process group id
        value: String,
        /// The git repository of a branch or worktree (default: the current directory)
        #[arg(long, value_name = "DIR")]
        repo: Option<PathBuf>,
    },

    /// Show the current run (called by the command)
    Info {
        /// Print the run as JSON
        #[arg(long)]
        json: bool,
    },

    /// Print an output of a finished run, checked against its sha256
    #[command(
        long_about = "Print output NAME of a finished run on standard output, once its bytes have \
been read into a private copy and their sha256 matches the one the run's manifest records (exit 4 \
when it does not, 1 when the run recorded no such output). RUN is a run id, a prefix of exactly one \
run id, or `last`: the most recently started run (of --job JOB when given).",
        after_help = "Examples:\n  runws cat last report.json\n  runws cat --job nightly last summary.txt | mail -s nightly ops\n  runws cat 0193a4 out.csv > out.csv"
    )]
    Cat {
        /// A run id, a unique prefix of one, or `last`
        run: String,
        /// The output's name, as `runws put` wrote it
        name: OsString,
        /// With `last`: the most recently started run of this job
        #[arg(long, value_name = "JOB")]
        job: Option<String>,
    },

    /// List runs
    #[command(
        long_about = "List runs, newest first (--oldest-first: oldest first), printed as each run's \
manifest is read. The runs come from ROOT/runs.index, an append-only index that `runws run` adds a \
line to; it is only a hint: what is shown of a run is read from its manifest, and the index is \
rebuilt from runs/ when it is missing, unreadable, or does not list every run there. --limit, \
--job and --since read only the manifests of the runs they print.",
        after_help = "Examples:\n  runws ls --limit 20\n  runws ls --job nightly --since 2d --oldest-first --json-lines"
    )]
    Ls {
        /// Only runs of this job
        #[arg(long, value_name = "JOB")]
        job: Option<String>,
        /// Only runs started within DUR of now (e.g. 90m, 2d)
        #[arg(long, value_name = "DUR", value_parser = crate::duration::parse)]
        since: Option<std::time::Duration>,
        /// Only the N newest runs (still printed in the chosen order)
        #[arg(long, value_name = "N")]
        limit: Option<usize>,
        /// Oldest first (the N newest with --limit, still oldest first)
        #[arg(long)]
        oldest_first: bool,
        /// Print the runs as one JSON array
        #[arg(long)]
        json: bool,
        /// Print one JSON object per run, one a line (JSON Lines)
        #[arg(long, alias = "jsonl", conflicts_with = "json")]
        json_lines: bool,
        /// The runs of every host that shares the PostgreSQL store (--store or
        /// RUNWS_STORE), from the store's fleet view
        #[arg(long)]
        fleet: bool,
        /// With --fleet: only runs of this host
        #[arg(long, value_name = "HOST", requires = "fleet")]
        host: Option<String>,
    },

    /// Reclaim runs nobody owns: expired leases, finished runs' scratch
    #[command(
        long_about = "Reclaim what nobody owns. A running run is taken over only when its lease has \
expired and (on this host) its runws process is gone: its process groups are ended (only while \
every member provably belongs to the run), its claimed worktrees and paths (inside the run) and \
branches (named after the run, with no commit only they hold, unless --drop-unmerged) removed, its \
scratch (home, tmp, cache, run, bin) deleted, and its manifest marked `abandoned`. Finished runs \
lose their scratch and claims too. The manifest, inputs/, outputs/, work/ and logs/ are kept as \
evidence. Symlinks are never followed, mount points are never entered (they are left and \
reported), and nothing is matched by name. --dry-run lists every step it would take.",
        after_help = "Examples:\n  runws reap --dry-run\n  runws reap --keep 30d --json"
    )]
    Reap {
        /// Report what would be done; change nothing
        #[arg(long)]
        dry_run: bool,
        /// Also remove whole finished or abandoned runs older than DUR (each torn
        /// down first, and kept when that fails)
        #[arg(long, value_name = "DUR", value_parser = crate::duration::parse, allow_negative_numbers = true)]
        keep: Option<std::time::Duration>,
        /// Keep claimed branches (worktrees are still removed)
        #[arg(long)]
        keep_branch: bool,
        /// Also delete a claimed branch whose commits are on no other ref
        /// (by default it is kept: those commits would be lost)
        #[arg(long)]
        drop_unmerged: bool,
        /// Wait between SIGTERM and SIGKILL to a leftover process group
        #[arg(long, value_name = "DUR", value_parser = crate::duration::parse, allow_negative_numbers = true, default_value = crate::reap::DEFAULT_GRACE_SHOWN)]
        grace: std::time::Duration,
        /// With --keep, a run whose seal saved nothing is removed when this
        /// store holds its archive (default: RUNWS_ARCHIVE_STORE); kept
        /// while the store does not answer
        #[arg(long, value_name = "URL")]
        archive_store: Option<String>,
        /// Print the steps as JSON
        #[arg(long)]
        json: bool,
    },

    /// Fill a shared cache for `run --sandbox --cache` (its only writer)
    #[command(subcommand)]
    Cache(CacheCommand),

    /// Take, renew, release or show a lease with a fencing token
    #[command(subcommand)]
    Lease(LeaseCommand),

    /// Write a payload for KEY only if its fencing token is not stale
    #[command(
        long_about = "The sink: write the payload (FILE, or standard input) for KEY only when --fence N is \
the highest fencing token the store has issued for the lease KEY (a lower one is stale, a higher \
one was never issued), and greater than the highest fence recorded for KEY in the sink, or equal \
with identical bytes (an idempotent retry: success, nothing rewritten). Otherwise nothing is \
written and runws exits 76. With --to DIR the payload becomes DIR/<key> atomically, with the fence \
recorded in DIR/.runws-fence/; when the store cannot be reached, DIR's fences alone are checked, \
with a warning. Without --to it goes to the store (a table in PostgreSQL). Inside `runws run \
--lease`, --fence defaults to RUNWS_FENCE; inside a sandbox, runws publishes for the command, \
under the run's own lease only.",
        after_help = "Example:\n  runws run --lease report/$(date +%F) -- sh -c 'make report && runws publish \"$RUNWS_LEASE_KEY\" report.json --to /srv/reports'"
    )]
    Publish {
        /// The lease the payload belongs to
        key: String,
        /// Payload file, or `-` for standard input
        file: Option<PathBuf>,
        /// The fencing token of the lease that allowed this write [default: RUNWS_FENCE]
        #[arg(long, value_name = "N")]
        fence: Option<u64>,
        /// Publish as a file in DIR instead of into the store
        #[arg(long = "to", value_name = "DIR")]
        to: Option<PathBuf>,
        /// Say on stderr what happened
        #[arg(short, long)]
        verbose: bool,
        /// Print the result as one JSON object on stdout (see the README's "Output for machines")
        #[arg(long)]
        json: bool,
    },

    /// Seal a finished run into a checksummed archive, after a secret scan
    #[command(
        long_about = "Pack the run's evidence (manifest.json, inputs/, outputs/, work/, logs/; home/ and \
cache/ with --include) into DIR/<run_id>.tar.zst (default DIR: the archive store's <job>/, else \
ROOT/archive/<job>), with a sha256sum-style checksum file and a receipt beside it. DIR may be \
s3://BUCKET/PREFIX: the seal is made on this disk, then uploaded create-only (credentials from \
the AWS environment or profile). Never packed: .env and .env.*, *.pem, \
*id_rsa*, *id_ed25519*, kubeconfig, credentials.json, .netrc, .git-credentials, .ssh/, \
.docker/config.json, .npmrc, .pypirc. Every packed byte is scanned for secrets in the same read. \
When the scan finds something, or a budget, an I/O error or the deadline stops the seal, the same \
evidence is saved unscanned under DIR/quarantine/ instead, and runws exits 80; 81 when that failed \
too. The scan looks inside gzip, zstd, tar and zip files; one it cannot look inside (over a \
budget, corrupt, encrypted, or in a format it does not open) also sends the run to quarantine, \
unless --allow-unscanned is given.",
        after_help = "Examples:\n  runws seal last\n  runws seal 01a2... --to /backups/nightly --format gz\n  runws seal last --to s3://evidence/nightly"
    )]
    Seal {
        /// A run id, or `last`
        run: String,
        #[command(flatten)]
        opts: SealArgs,
        /// Print the result as one JSON object on stdout (see the README's "Output for machines")
        #[arg(long)]
        json: bool,
    },

    /// Scan files for secrets (the seal's scan, alone)
    #[command(long_about = "Scan files and directories (symlinks inside are not followed) with the rules \
the seal uses, looking inside gzip, zstd, tar and zip files (a member is named \
archive!/member, a compressed stream's content archive!gzip). Each finding is printed as \
path:line:rule with the secret redacted; whatever could not be looked inside is named on stderr \
with the reason. Exit 0 when nothing is found and everything was scanned, 82 when something is \
found, 83 when nothing is but something could not be scanned.")]
    Scan {
        /// Files and directories to scan
        #[arg(required_unless_present = "rules", value_name = "PATH")]
        paths: Vec<PathBuf>,
        /// Print the findings as JSON
        #[arg(long)]
        json: bool,
        /// Print the rules as ripgrep patterns (one regex per line) and exit
        #[arg(long)]
        rules: bool,
    },

    /// List the sealed and quarantined archives an archive store holds
    #[command(
        long_about = "List the archives in the archive store (--archive-store, else RUNWS_ARCHIVE_STORE, \
else ROOT/archive), one job directory each, sealed or in its quarantine/: one line per archive \
(sealed|quarantine, bytes, time stored, where), or JSON. With RUN, only that run's archives, and \
exit 1 when the store holds none.",
        after_help = "Examples:\n  runws archives --job nightly\n  runws archives last --archive-store s3://evidence/ci --json"
    )]
    Archives {
        /// A run id (or `last`): only its archives
        run: Option<String>,
        /// Only this job's archives
        #[arg(long, value_name = "NAME")]
        job: Option<String>,
        /// The store: s3://BUCKET/PREFIX or a directory (default: RUNWS_ARCHIVE_STORE, else ROOT/archive)
        #[arg(long, value_name = "URL")]
        archive_store: Option<String>,
        /// Print the archives as one JSON array on stdout
        #[arg(long)]
        json: bool,
    },

    /// Check an archive against its .sha256 file
    Verify {
        /// The archive (a file or s3://BUCKET/KEY); its checksum is ARCHIVE.sha256
        archive: PathBuf,
        /// Print the result as one JSON object on stdout (see the README's "Output for machines")
        #[arg(long)]
        json: bool,
    },

    /// Extract a verified archive safely into a new or empty directory
    #[command(
        long_about = "Extract ARCHIVE (a regular file, or s3://BUCKET/KEY: its .sha256 object is read \
first and the archive downloaded under ROOT/uploads and checked before anything is extracted) into \
a private directory beside DIR, \
hashing it as it is read (once) and scanning every byte for secrets as it is written; DIR, which \
must be new or empty, receives the whole of it in one rename, and only once the archive matched \
ARCHIVE.sha256 and the extraction and the scan are complete (a mismatch is exit 4). Refused (and DIR left as it was): absolute names, `..`, names through a symlink, \
links pointing outside DIR, duplicates, devices, fifos, setuid bits, more than --max-bytes of file \
content or --max-files entries, and, for an archive from an ordinary location, any secret the scan \
finds (exit 82). An archive whose path is under a `quarantine/` directory is restored whatever the \
scan finds, and its findings are listed."
    )]
    Restore {
        /// The archive to restore, a file or s3://BUCKET/KEY (its .sha256 must lie beside it)
        archive: PathBuf,
        /// Directory to extract into (must not exist, or be empty)
        #[arg(long, value_name = "DIR")]
        to: PathBuf,
        /// Most bytes of file content to write (the seal's default)
        #[arg(long, value_name = "SIZE", default_value = crate::seal::DEFAULT_MAX_BYTES_SHOWN, value_parser = crate::duration::parse_size, allow_negative_numbers = true)]
        max_bytes: u64,
        /// Most entries (files, directories, links) to create (the seal's default)
        #[arg(long, value_name = "N", default_value_t = crate::seal::DEFAULT_MAX_FILES)]
        max_files: u64,
        /// Print the result as one JSON object on stdout (see the README's "Output for machines")
        #[arg(long)]
        json: bool,
    },

    /// Promotion lanes: claim, run, seal, review, stamp, promote or scrap, reset
    #[command(
        long_about = "A promotion lane takes one ticket from claim to a branch of the real repository, \
in an enforced order: claim, run, seal, review, stamp, then promote (after approve) or nothing more \
(after scrap), then reset; a `return` stamp sends the lane back to run. The lane lives in \
ROOT/lanes/lane-<ticket>-<initials>/; its kit in ROOT/archive/lanes/.",
        after_help = "Example:\n  runws lane claim PROJ-42 --claimant Ann --operator Bob --reviewer Cy --resetter Di\n  \
runws lane run lane-PROJ-42-abcd -- ./session.sh\n  runws lane seal lane-PROJ-42-abcd\n  \
runws lane review ROOT/archive/lanes/lane-PROJ-42-abcd.tar.zst\n  \
runws lane stamp lane-PROJ-42-abcd approve --reviewer Cy\n  runws lane promote lane-PROJ-42-abcd --repo .\n  \
runws lane reset lane-PROJ-42-abcd --resetter Di"
    )]
    Lane {
        #[command(subcommand)]
        command: LaneCommand,
    },

    /// Show one run's manifest (`last` for the most recently started)
    #[command(long_about = "Show one run: its status, command, times, outputs (with the path of each \
file), logs, seal state (sealed, quarantined or not saved, with the archive) and, for a sandboxed \
run that went without a protection (`--sandbox=try`), each protection missing. RUN is a run id, a \
prefix of exactly one run id, or `last`. With --json, the manifest as it is recorded.")]
    Show {
        /// A run id, a unique prefix of one, or `last`
        run: String,
        /// Print the manifest as JSON
        #[arg(long)]
        json: bool,
    },

    /// Print a shell completion script (bash, zsh, fish)
    #[command(
        long_about = "Print the completion script of SHELL on stdout, generated from the same \
definitions as --help: subcommands, options and their fixed values.",
        after_help = "Install:\n  runws completions bash > /etc/bash_completion.d/runws\n  \
runws completions zsh > /usr/local/share/zsh/site-functions/_runws\n  \
runws completions fish > ~/.config/fish/completions/runws.fish"
    )]
    Completions {
        /// The shell to complete for
        #[arg(value_enum, value_name = "SHELL")]
        shell: clap_complete::Shell,
    },

    /// Print the manual page (roff), generated from the same definitions as --help
    #[command(
        long_about = "Print the manual page runws(1) on stdout, in roff: the description and \
options of runws and of every subcommand, generated from the same definitions as --help.",
        after_help = "Install:\n  runws man > /usr/local/share/man/man1/runws.1\n  man runws"
    )]
    Man,
}

#[derive(Debug, Subcommand)]
#[command(defer = true)]
pub enum CacheCommand {
    /// Run COMMAND in DIR holding the cache's exclusive lock
    #[command(
        long_about = "Run COMMAND with DIR as its working directory while holding DIR's exclusive \
lock (DIR/.runws-cache.lock). Sandboxed runs that show DIR with --cache hold the same lock shared \
for as long as they live, so a warmer waits for the runs using the old cache, runs started while \
it works wait for the new one, and no run ever sees a half-written cache. Two warmers are \
serialised. The command's exit status is runws's.",
        after_help = "Example:\n  runws cache warm /srv/npm-cache -- npm ci --cache /srv/npm-cache"
    )]
    Warm {
        /// The cache directory (it must exist)
        dir: PathBuf,
        /// The command and its arguments
        #[arg(required = true, trailing_var_arg = true, value_name = "COMMAND")]
        command: Vec<OsString>,
    },
}

#[derive(Debug, Subcommand)]
#[command(defer = true)]
pub enum LeaseCommand {
    /// Take the lease on KEY and print its fencing token (exit 75 when held)
    #[command(long_about = "Take the lease on KEY when it is free or expired, and print its fencing \
token: strictly greater than every token ever issued for KEY. When someone else holds it, wait \
up to --wait (default: not at all, like `flock -n`), then exit 75 naming the holder. stdout is \
the token alone; the holder taken is said on stderr. `lease renew` and `lease release` from the \
same shell default to the same holder.")]
    Acquire {
        /// The lease's name
        key: String,
        /// Who holds it (default: HOST:PPID, the calling shell)
        #[arg(long, value_name = "ID")]
        holder: Option<String>,
        /// How long the lease lasts unless renewed
        #[arg(long, value_name = "DUR", value_parser = crate::duration::parse, allow_negative_numbers = true, default_value = defaults::LEASE_TTL_SHOWN)]
        ttl: std::time::Duration,
        /// How long to wait for a lease someone else holds
        #[arg(long, value_name = "DUR", value_parser = crate::duration::parse, allow_negative_numbers = true, default_value = defaults::LEASE_WAIT_SHOWN)]
        wait: std::time::Duration,
        /// Print the result as one JSON object on stdout (see the README's "Output for machines")
        #[arg(long)]
        json: bool,
    },
    /// Extend the lease the holder has; the token stays the same
    #[command(long_about = "Extend the lease the holder has; the token stays the same. Inside \
`runws run --lease KEY`, --holder defaults to the run's own holder; inside a sandbox, runws renews \
the run's own lease for the command, for at most the run's --lease-ttl.")]
    Renew {
        /// The lease's name
        key: String,
        /// Who holds it [default: the run's holder inside `run --lease KEY`, else HOST:PPID, the calling shell]
        #[arg(long, value_name = "ID")]
        holder: Option<String>,
        /// How long the renewed lease lasts from now
        #[arg(long, value_name = "DUR", value_parser = crate::duration::parse, allow_negative_numbers = true, default_value = defaults::LEASE_TTL_SHOWN)]
        ttl: std::time::Duration,
    },
    /// Give the lease up (only its holder can)
    Release {
        /// The lease's name
        key: String,
        /// Who holds it [default: the run's holder inside `run --lease KEY`, else HOST:PPID, the calling shell]
        #[arg(long, value_name = "ID")]
        holder: Option<String>,
    },
    /// Show the holder, the token and when the lease expires
    Show {
        /// The lease's name
        key: String,
        /// Print the lease as JSON
        #[arg(long)]
        json: bool,
    },
}

// Options of a seal, for `runws seal` and `runws run --seal`. (Not a doc
// comment: clap would show it atop the help of every command that flattens
// these options.)
#[derive(Debug, Args, Clone)]
pub struct SealArgs {
    /// Directory or s3://BUCKET/PREFIX for the archive (default: the archive
    /// store's <job>, else ROOT/archive/<job>)
    #[arg(long = "to", value_name = "DIR|URL", id = "seal_to")]
    pub to: Option<String>,
    /// Where a run of job J seals to, as J/ under it: s3://BUCKET/PREFIX or
    /// a directory (default: RUNWS_ARCHIVE_STORE, else ROOT/archive)
    #[arg(long, value_name = "URL")]
    pub archive_store: Option<String>,
    /// Archive format
    #[arg(long, value_name = "FMT", default_value = crate::seal::DEFAULT_FORMAT_SHOWN, value_parser = crate::seal::archive::Format::NAMES)]
    pub format: String,
    /// Also pack a scratch directory: home or cache (repeatable)
    #[arg(long = "include", value_name = "DIR")]
    pub include: Vec<String>,
    /// Most bytes of file content to pack
    #[arg(long, value_name = "SIZE", default_value = crate::seal::DEFAULT_MAX_BYTES_SHOWN, value_parser = crate::duration::parse_size, allow_negative_numbers = true)]
    pub max_bytes: u64,
    /// Most entries to pack
    #[arg(long, value_name = "N", default_value_t = crate::seal::DEFAULT_MAX_FILES)]
    pub max_files: u64,
    /// Time for the seal and, if it fails, the quarantine together
    #[arg(long, value_name = "DUR", default_value = crate::seal::DEFAULT_DEADLINE_SHOWN, value_parser = crate::duration::parse, allow_negative_numbers = true)]
    pub deadline: std::time::Duration,
    /// Seal even when a compressed file or archive member could not be
    /// scanned (over a budget, corrupt, encrypted, or a format the scan does
    /// not open); the receipt lists each one. Without it, such a run goes to
    /// quarantine.
    #[arg(long)]
    pub allow_unscanned: bool,
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

    /// Copy KEY from runws's own environment (an absent KEY is recorded as absent); a glob
    /// (`GITHUB_*`, `CI_?`) copies every variable it matches
    #[arg(long = "pass", value_name = "KEY|GLOB")]
    pub pass: Vec<String>,

    /// Read KEY=VALUE lines from FILE (`#` comments and blank lines skipped)
    #[arg(long = "env-file", value_name = "FILE")]
    pub env_file: Vec<PathBuf>,

    /// PATH after the run's own bin/
    #[arg(long, value_name = "DIRS", default_value = defaults::PATH)]
    pub path: String,

    /// How many kernel-assigned ports to reserve (PORT, PORT_1, ...)
    #[arg(long, value_name = "N", default_value_t = defaults::PORTS)]
    pub ports: u16,

    /// Address the ports are bound on
    #[arg(long, value_name = "ADDR", default_value = defaults::PORT_HOST)]
    pub port_host: String,

    /// Hand the bound, listening sockets to the command (fd 3 on, LISTEN_FDS; at most 60)
    #[arg(long)]
    pub listen: bool,

    /// Copy FILE or DIR into inputs/ and fingerprint it (repeatable); durable before it is recorded
    #[arg(long = "input", value_name = "PATH")]
    pub inputs: Vec<PathBuf>,

    /// Record a fingerprint computed elsewhere
    #[arg(long, value_name = "TEXT")]
    pub fingerprint: Option<String>,

    /// Let `runws import` read run RUN, or any succeeded run of job NAME
    /// (repeatable). A sandboxed run imports nothing else (nothing at all
    /// without this option); a plain run's guard refuses the rest too (exit 3)
    #[arg(long = "allow-import", value_name = "RUN|job:NAME")]
    pub allow_import: Vec<String>,

    /// Send SIGTERM to the command's process group after DUR, saying so on stderr; exit 124 (0: no timeout)
    #[arg(long, value_name = "DUR", value_parser = crate::duration::parse, allow_negative_numbers = true)]
    pub timeout: Option<std::time::Duration>,

    /// After the timeout's SIGTERM, send SIGKILL when DUR more has passed
    #[arg(long, value_name = "DUR", value_parser = crate::duration::parse, allow_negative_numbers = true, requires = "timeout")]
    pub kill_after: Option<std::time::Duration>,

    /// How long the run's lease lasts (at least 30ms); runws renews it every third of this
    #[arg(long, value_name = "DUR", value_parser = crate::duration::parse, allow_negative_numbers = true, default_value = defaults::LEASE_TTL_SHOWN)]
    pub lease_ttl: std::time::Duration,

    /// Also write the command's stdout and stderr to logs/
    #[arg(long)]
    pub capture: bool,

    /// When the run ends, write its final record (the manifest, as `show --json`
    /// gives it) as one line of JSON to descriptor FD (3 or above), as bubblewrap's
    /// --json-status-fd; nothing when no run was created
    #[arg(long, value_name = "FD")]
    pub json_status_fd: Option<i32>,

    /// Give the run its own git worktree of REPO (at <run>/repo, on branch
    /// runws/<run id>) and start the command there
    #[arg(long, value_name = "REPO")]
    pub worktree: Option<PathBuf>,

    /// The commit the run's branch starts from
    #[arg(long, value_name = "REF", default_value = defaults::BASE, requires = "worktree")]
    pub base: String,

    /// The command's working directory (default: the run's work/)
    #[arg(long, value_name = "DIR")]
    pub cwd: Option<PathBuf>,

    /// Hold the lease KEY while the command runs (exit 75 when it is held elsewhere)
    #[arg(long, value_name = "KEY")]
    pub lease: Option<String>,

    /// How long to wait for --lease
    #[arg(long, value_name = "DUR", value_parser = crate::duration::parse, allow_negative_numbers = true, default_value = defaults::LEASE_WAIT_SHOWN, requires = "lease")]
    pub wait: std::time::Duration,

    /// Tell URL (healthchecks.io protocol, http:// only) of the run: URL/start when the
    /// command starts, URL when it succeeds, URL/<exit code> when it fails; never delays
    /// or fails the run (each ping's outcome is in the manifest under `pings`)
    #[arg(long, value_name = "URL")]
    pub ping: Option<String>,

    /// How long one attempt of a --ping may take (it is tried up to 3 times)
    #[arg(long, value_name = "DUR", value_parser = crate::duration::parse, allow_negative_numbers = true, default_value = defaults::PING_TIMEOUT_SHOWN, requires = "ping")]
    pub ping_timeout: std::time::Duration,

    /// Write DIR/runws_<job>.prom for Prometheus' textfile collector at the end of the run
    #[arg(long, value_name = "DIR")]
    pub metrics_dir: Option<PathBuf>,

    /// Most memory the run's processes may use together (a control group of its own;
    /// beyond it the kernel ends a process, and the run's status is `oom`)
    #[arg(long, value_name = "SIZE", value_parser = crate::duration::parse_size)]
    pub memory: Option<u64>,

    /// Most processes (and threads) the run may have at once
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub pids: Option<u64>,

    /// Most CPU the run may use, in cores (fractions allowed: 0.5, 1.5)
    #[arg(long, value_name = "CORES", value_parser = crate::cgroup::parse_cores)]
    pub cpu: Option<f64>,

    /// `try`: run without the limits, and record why, where no control group can be
    /// made (by default such a run is refused)
    #[arg(long, value_name = "MODE", require_equals = true, value_parser = ["on", "try"])]
    pub limits: Option<String>,

    /// Seal the run after the command exits (see `runws seal --help`)
    #[arg(long)]
    pub seal: bool,

    #[command(flatten)]
    pub seal_opts: SealArgs,

    /// Run inside a sandbox: read-only file system, hidden home and ROOT, no
    /// privileges; refuse the run if a protection fails (`try`: run without
    /// it and record it). Namespaces where they work, else Landlock;
    /// `ns` or `landlock` forces one
    #[arg(
        long,
        value_name = "MODE",
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "on",
        value_parser = ["on", "try", "ns", "landlock"]
    )]
    pub sandbox: Option<String>,

    /// With --sandbox: `none` for a network with only loopback; `allow=PATTERNS` for
    /// loopback plus a proxy runws runs outside, which reaches only the hosts named
    /// (`host`, `*.domain`, `host:PORT`, an IP literal; ports 443 and 80 unless
    /// given; `@FILE` reads one pattern a line) and records every connection;
    /// `host` for the host's network (the default). With `runws audit`, `--net`
    /// alone: every destination allowed through the proxy, and reported
    #[arg(long, value_name = "NET", num_args = 0..=1, default_missing_value = "")]
    pub net: Option<String>,

    /// With --net allow: resolve NAME to ADDR in the proxy instead of asking DNS
    /// (repeatable; as curl's --resolve). The way to let a name reach this host's
    /// own addresses (loopback, link-local): from DNS, those are refused
    #[arg(long = "resolve", value_name = "NAME=ADDR")]
    pub resolve: Vec<String>,

    /// With --sandbox: make PATH writable (repeatable)
    #[arg(long = "rw", value_name = "PATH", requires = "sandbox")]
    pub rw: Vec<PathBuf>,

    /// With --sandbox: make PATH visible, read-only, even where it is hidden (repeatable)
    #[arg(long = "ro", value_name = "PATH", requires = "sandbox")]
    pub ro: Vec<PathBuf>,

    /// With --sandbox: show the shared cache DIR read-only at MOUNTPOINT (default: DIR)
    /// with a writable layer of the run's own on top (repeatable)
    #[arg(long = "cache", value_name = "DIR[:MOUNTPOINT]", requires = "sandbox")]
    pub cache: Vec<String>,

    /// With --sandbox: hide PATH behind an empty, read-only directory or file (repeatable)
    #[arg(long = "hide", value_name = "PATH", requires = "sandbox")]
    pub hide: Vec<PathBuf>,

    /// With --sandbox: let the command create user namespaces of its own (refused by
    /// default: a nested user namespace hands its creator a fresh set of capabilities)
    #[arg(long, requires = "sandbox")]
    pub allow_userns: bool,

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

#[cfg(test)]
mod tests {
    /// Subcommands are built only when invoked; this builds every one of
    /// them and checks clap's rules (names, conflicts, defaults) at once.
    #[test]
    fn the_whole_command_line_is_consistent() {
        use clap::CommandFactory;
        super::Cli::command().debug_assert();
    }

    /// `--help` teaches: every subcommand has a description of its own
    /// (not one borrowed from a flattened struct) and every option and
    /// argument says what it is for.
    #[test]
    fn every_command_and_argument_has_help_text() {
        use clap::CommandFactory;
        fn walk(cmd: &clap::Command, path: &str, missing: &mut Vec<String>) {
            match cmd.get_about() {
                None => missing.push(format!("{path}: no description")),
                // A doc comment on a flattened struct takes the command's place.
                Some(about) if cmd.get_subcommands().any(|sub| sub.get_about() == Some(about)) => {
                    missing.push(format!("{path}: a subcommand opens with its description"))
                }
                Some(_) => {}
            }
            let mut abouts: Vec<String> =
                cmd.get_subcommands().filter_map(|s| s.get_about()).map(|a| a.to_string()).collect();
            abouts.sort();
            if abouts.windows(2).any(|w| w[0] == w[1]) {
                missing.push(format!("{path}: two subcommands open with the same description"));
            }
            for arg in cmd.get_arguments() {
                if !arg.is_hide_set() && arg.get_help().is_none() && arg.get_long_help().is_none() {
                    missing.push(format!("{path}: {} has no help", arg.get_id()));
                }
            }
            // clap's own `help` lists the commands again.
            for sub in cmd.get_subcommands().filter(|sub| sub.get_name() != "help") {
                walk(sub, &format!("{path} {}", sub.get_name()), missing);
            }
        }
        let mut cmd = super::Cli::command();
        cmd.build();
        let mut missing = Vec::new();
        walk(&cmd, "runws", &mut missing);
        assert!(missing.is_empty(), "{}", missing.join("\n"));
    }
}
