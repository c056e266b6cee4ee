//! `runws replay`: its options (clap types only).

use std::path::PathBuf;

use clap::{Args, ValueEnum};

/// What `--expect` holds the comparison to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Expect {
    /// Exit with the replayed command's own status, whatever the comparison
    Any,
    /// Exit 0 when outputs, status and exit code are the same, else 86
    Same,
    /// Exit 0 when anything differs, else 86
    Different,
}

#[derive(Debug, Args)]
pub struct ReplayArgs {
    /// The run to replay: a run id, a unique prefix of one, or `last`; or a sealed
    /// archive (ARCHIVE.tar.zst, its .sha256 beside it)
    #[arg(value_name = "RUN|last|ARCHIVE")]
    pub target: String,

    /// What the comparison must come out as for exit 0 (`any`: the command's own status)
    #[arg(long, value_enum, value_name = "WHAT", default_value = "any")]
    pub expect: Expect,

    /// Give the command KEY=VALUE again (values the original was given are never recorded)
    #[arg(long = "env", value_name = "KEY=VALUE")]
    pub env: Vec<String>,

    /// Read KEY=VALUE lines from FILE, as for `run`
    #[arg(long = "env-file", value_name = "FILE")]
    pub env_file: Vec<PathBuf>,

    /// Copy KEY from runws's own environment (the names the original was passed are
    /// passed again without this)
    #[arg(long = "pass", value_name = "KEY|GLOB")]
    pub pass: Vec<String>,

    /// PATH after the run's own bin/ (the original's was not recorded: the default otherwise)
    #[arg(long, value_name = "DIRS")]
    pub path: Option<String>,

    /// Replay from an archive that lies in quarantine (recorded in the replay)
    #[arg(long)]
    pub from_quarantine: bool,

    /// Keep the copy an archive was restored to under ROOT/restores/ (removed otherwise)
    #[arg(long)]
    pub keep: bool,

    /// Print the comparison as one JSON object on stdout, after the command's own output
    #[arg(long)]
    pub json: bool,

    /// `try`: replay without the original's limits (--memory, --pids, --cpu), and
    /// record why, where no control group can be made here (by default such a replay
    /// is refused, unless the original ran without them)
    #[arg(long, value_name = "MODE", require_equals = true, value_parser = ["on", "try"])]
    pub limits: Option<String>,

    /// Replay in this sandbox instead of the original's isolation (see `runws run --help`)
    #[arg(
        long,
        value_name = "MODE",
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "on",
        value_parser = ["on", "try", "ns", "landlock"]
    )]
    pub sandbox: Option<String>,

    /// With --sandbox: `none`, `allow=PATTERNS` or `host` (the default), as for `run`
    #[arg(long, value_name = "NET", requires = "sandbox")]
    pub net: Option<String>,

    /// With --net allow: resolve NAME to ADDR in the proxy (repeatable)
    #[arg(long = "resolve", value_name = "NAME=ADDR", requires = "net")]
    pub resolve: Vec<String>,

    /// With --sandbox: make PATH writable (repeatable)
    #[arg(long = "rw", value_name = "PATH", requires = "sandbox")]
    pub rw: Vec<PathBuf>,

    /// With --sandbox: make PATH visible, read-only, even where it is hidden (repeatable)
    #[arg(long = "ro", value_name = "PATH", requires = "sandbox")]
    pub ro: Vec<PathBuf>,

    /// With --sandbox: a shared cache DIR[:MOUNTPOINT], as for `run` (repeatable)
    #[arg(long = "cache", value_name = "DIR[:MOUNTPOINT]", requires = "sandbox")]
    pub cache: Vec<String>,

    /// With --sandbox: hide PATH behind an empty, read-only directory or file (repeatable)
    #[arg(long = "hide", value_name = "PATH", requires = "sandbox")]
    pub hide: Vec<PathBuf>,

    /// With --sandbox: let the command create user namespaces of its own
    #[arg(long, requires = "sandbox")]
    pub allow_userns: bool,
}
