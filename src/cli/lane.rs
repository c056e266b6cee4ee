//! `runws lane ...`: the promotion lane's subcommands (clap types only).

use std::ffi::OsString;
use std::path::PathBuf;

use clap::Subcommand;

// The steps of a promotion lane. (Not a doc comment: clap would show it
// atop `runws lane --help` instead of the command's own description.)
#[derive(Debug, Subcommand)]
#[command(defer = true)]
pub enum LaneCommand {
    /// Claim a lane for TICKET; prints its name, lane-<ticket>-<initials>
    #[command(long_about = "Create ROOT/lanes/lane-<ticket>-<initials>/ (initials: the first letter or \
digit of each of the four names, lowercased) with TICKET, the card, replay/prompt.md and \
replay/eval.sh templates to edit, logs/, and work/: a git repository with an empty base commit. \
Refused when the lane exists.")]
    Claim {
        /// `[A-Za-z0-9][A-Za-z0-9._-]{0,63}`
        ticket: String,
        /// Who claims the lane
        #[arg(long, value_name = "NAME")]
        claimant: String,
        /// Who works in the lane (`lane run`)
        #[arg(long, value_name = "NAME")]
        operator: String,
        /// Who reviews the kit and is the only one who may stamp it
        #[arg(long, value_name = "NAME")]
        reviewer: String,
        /// The only one who may reset the lane
        #[arg(long, value_name = "NAME")]
        resetter: String,
        /// The problem, recorded on the card and in TICKET
        #[arg(long, value_name = "TEXT", default_value = "")]
        problem: String,
        /// When the work is done, recorded on the card
        #[arg(long, value_name = "TEXT", default_value = "")]
        done_when: String,
    },

    /// Run the operator's session through `runws run`, in the lane's work/
    #[command(long_about = "Run COMMAND through `runws run` (a fresh run, an environment built from \
empty) with its working directory the lane's work/ and the job named after the lane. The run id and \
the command's process group are recorded on the card; `lane reset` ends that group. Allowed after \
the claim, and after a `return` stamp.")]
    Run {
        /// The lane's name, lane-<ticket>-<initials>
        lane: String,
        /// Also copy the command's stdout and stderr into the lane's logs/
        #[arg(long)]
        capture: bool,
        /// SIGTERM to the command's process group after DUR; exit 124 (0: no timeout)
        #[arg(long, value_name = "DUR", value_parser = crate::duration::parse, allow_negative_numbers = true)]
        timeout: Option<std::time::Duration>,
        /// Copy KEY from the environment (the value is never recorded)
        #[arg(long = "pass", value_name = "KEY")]
        pass: Vec<String>,
        /// Read KEY=VALUE lines from FILE
        #[arg(long = "env-file", value_name = "FILE")]
        env_file: Vec<PathBuf>,
        /// The command and its arguments
        #[arg(required = true, trailing_var_arg = true, value_name = "COMMAND")]
        command: Vec<OsString>,
    },

    /// Remove .env files, check the kit, seal it with the secret scan
    #[command(long_about = "Remove .env and .env.* from work/ and replay/, check the kit (TICKET, \
replay/prompt.md, an executable replay/eval.sh, work/ a git repository, nothing on the never-packed \
list), then seal the lane into ROOT/archive/lanes/<lane>.tar.zst with its .sha256 and receipt, \
scanning every packed byte and the git history for secrets. Prints the kit's path. Exit 92 when \
the check fails (nothing sealed), 80 when the scan found something (saved to quarantine), 81 when \
nothing could be saved.")]
    Seal {
        /// The lane's name, lane-<ticket>-<initials>
        lane: String,
        /// Also place the kit, create-only, under lanes/ in this archive
        /// store: s3://BUCKET/PREFIX or a directory (default:
        /// RUNWS_ARCHIVE_STORE); the seal fails, and takes the local kit
        /// back, when that fails
        #[arg(long, value_name = "URL")]
        archive_store: Option<String>,
    },

    /// Restore a kit, show its diff stat, run its replay/eval.sh in a clean run
    #[command(long_about = "Verify KIT against KIT.sha256, restore it into a fresh directory under \
ROOT/restores/ and rescan it (a quarantine kit is refused), show `git diff --stat` of its work/ \
against the lane's base commit, and run replay/eval.sh from its work/ inside a clean `runws run`. \
The result (pass or fail, the kit's sha256, eval's exit code, the run id) is recorded on the lane's \
card. Exit 0 when eval passed, 93 when it failed.")]
    Review {
        /// The sealed kit, ROOT/archive/lanes/<lane>.tar.zst
        kit: PathBuf,
        /// Time allowed for replay/eval.sh (0: no limit)
        #[arg(long, value_name = "DUR", value_parser = crate::duration::parse, allow_negative_numbers = true, default_value = "10m")]
        timeout: std::time::Duration,
        /// Keep the restored copy and print where it is
        #[arg(long)]
        keep: bool,
    },

    /// Stamp the reviewed kit: approve, return (for more work) or scrap
    Stamp {
        /// The lane's name, lane-<ticket>-<initials>
        lane: String,
        /// approve (may be promoted), return (back to run) or scrap
        #[arg(value_parser = ["approve", "return", "scrap"])]
        verdict: String,
        /// Must be the reviewer named at claim
        #[arg(long, value_name = "NAME")]
        reviewer: String,
    },

    /// Copy the approved kit's work/ onto a new branch, in a new worktree, uncommitted
    #[command(long_about = "Create BRANCH (default lane/<ticket>) from HEAD of the repository at DIR \
in a new `git worktree` (default ROOT/worktrees/<lane>), and copy the approved kit's work/ into it \
(restored from the kit and checked against the approved sha256; .git entries are skipped). Nothing \
is committed or pushed, and the repository's own checkout is not touched. Refused when the branch \
exists. Prints the worktree's path.")]
    Promote {
        /// The lane's name, lane-<ticket>-<initials>
        lane: String,
        /// The repository to promote into
        #[arg(long, value_name = "DIR")]
        repo: PathBuf,
        /// The new branch (default: lane/<ticket>)
        #[arg(long, value_name = "BRANCH")]
        branch: Option<String>,
        /// Where the new worktree goes (default: ROOT/worktrees/<lane>)
        #[arg(long, value_name = "DIR")]
        worktree: Option<PathBuf>,
    },

    /// End the lane's leftover processes and remove the lane; the kit stays
    #[command(long_about = "Only by the resetter named at claim, and only after a promote or a scrap \
stamp: end each process group the lane's runs recorded (only while every member provably belongs \
to its run), keep a \
copy of the final card beside the kit (ROOT/archive/lanes/<lane>.card.json and .md), and remove the \
lane directory without following symlinks.")]
    Reset {
        /// The lane's name, lane-<ticket>-<initials>
        lane: String,
        /// Must be the resetter named at claim
        #[arg(long, value_name = "NAME")]
        resetter: String,
        /// Wait between SIGTERM and SIGKILL to a leftover process group
        #[arg(long, value_name = "DUR", value_parser = crate::duration::parse, allow_negative_numbers = true, default_value = crate::reap::DEFAULT_GRACE_SHOWN)]
        grace: std::time::Duration,
    },

    /// Show a lane's card (or, after a reset, the copy kept beside its kit)
    Show {
        /// The lane's name, lane-<ticket>-<initials>
        lane: String,
        /// Print the card as JSON
        #[arg(long)]
        json: bool,
    },
}
