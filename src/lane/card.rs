//! A lane's card: the one record every lane step reads and writes, as JSON
//! (authoritative) and as a Markdown rendering for people.
//!
//! The card names the four people of the lane, says what the problem is and
//! when it is done, lists every `lane run` (the replay), and records each
//! later step's result: the kit check, the kit, the review, the stamp, the
//! promotion and the reset. Fields this version does not know are kept, as
//! the run manifest does.

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

pub const SCHEMA: u32 = 1;

/// Where a lane is in its life. The order is enforced by [`super::allowed`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum State {
    /// Claimed; nothing has run yet.
    Claimed,
    /// At least one `lane run` since the claim or the last `return`.
    Working,
    /// Sealed into a kit that passed the kit check and the secret scan.
    Sealed,
    /// The current kit was reviewed (the review may have failed).
    Reviewed,
    Approved,
    /// Sent back by the reviewer for more work.
    Returned,
    Scrapped,
    Promoted,
    /// Removed; only the kit and the card's copy beside it remain.
    Reset,
}

impl State {
    pub fn as_str(self) -> &'static str {
        match self {
            State::Claimed => "claimed",
            State::Working => "working",
            State::Sealed => "sealed",
            State::Reviewed => "reviewed",
            State::Approved => "approved",
            State::Returned => "returned",
            State::Scrapped => "scrapped",
            State::Promoted => "promoted",
            State::Reset => "reset",
        }
    }
}

/// One `lane run`: the operator's session, through `runws run`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct RunEntry {
    pub run_id: String,
    pub argv: Vec<String>,
    pub started_at: String,
    #[serde(default)]
    pub finished_at: Option<String>,
    #[serde(default)]
    pub exit_code: Option<i32>,
    /// The command's process group and its leader's start time, so a reset
    /// ends that group and never one that reused the number.
    #[serde(default)]
    pub pgid: Option<i32>,
    #[serde(default)]
    pub start_time: Option<u64>,
}

/// The replay: what to give an operator again, and what was run.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Replay {
    pub prompt: String,
    pub runs: Vec<RunEntry>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct CheckItem {
    pub item: String,
    pub ok: bool,
    pub detail: String,
}

/// The kit check and the seal's secret scan, as of the last seal attempt.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Checker {
    pub ok: bool,
    pub at: String,
    pub items: Vec<CheckItem>,
    /// `.env` files the seal removed from the lane before checking.
    pub removed: Vec<String>,
    /// Things a reviewer should know that do not fail the check.
    pub warnings: Vec<String>,
    /// `clean`, `quarantine` or `none` once the seal got as far as the scan.
    #[serde(default)]
    pub scan: Option<String>,
    #[serde(default)]
    pub findings: Vec<String>,
    #[serde(default)]
    pub quarantine: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Kit {
    pub path: String,
    pub sha256: String,
    pub receipt: String,
    pub sealed_at: String,
    /// Its copy in the archive store, when one was named.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stored: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Review {
    /// `pass` or `fail`.
    pub result: String,
    pub kit: String,
    pub kit_sha256: String,
    pub eval_exit_code: i32,
    pub run_id: String,
    pub diff_stat: String,
    pub at: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Stamp {
    /// `approve`, `return` or `scrap`.
    pub verdict: String,
    pub by: String,
    pub kit_sha256: String,
    pub at: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Promotion {
    pub repo: String,
    pub branch: String,
    pub worktree: String,
    pub files: u64,
    pub kit_sha256: String,
    pub at: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Reset {
    pub by: String,
    pub at: String,
    /// What happened to each recorded process group.
    pub groups: Vec<String>,
}

/// One step, for the card's history.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Event {
    pub at: String,
    pub step: String,
    pub detail: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Card {
    pub schema: u32,
    pub lane: String,
    pub ticket: String,
    pub claimant: String,
    pub operator: String,
    pub reviewer: String,
    pub resetter: String,
    pub claimed_at: String,
    pub problem: String,
    pub done_when: String,
    pub state: State,
    /// The empty commit made at claim: the review's diff is against it.
    pub base_commit: String,
    /// sha256 of `replay/prompt.md` and `replay/eval.sh` as claim wrote them,
    /// so the check can warn that a template was never edited.
    pub template_sha256: Vec<String>,
    pub replay: Replay,
    /// The review's command, run from the restored `work/`.
    pub eval: String,
    #[serde(default)]
    pub checker: Option<Checker>,
    #[serde(default)]
    pub kit: Option<Kit>,
    #[serde(default)]
    pub review: Option<Review>,
    #[serde(default)]
    pub stamp: Option<Stamp>,
    #[serde(default)]
    pub promotion: Option<Promotion>,
    #[serde(default)]
    pub reset: Option<Reset>,
    #[serde(default)]
    pub history: Vec<Event>,
    #[serde(flatten)]
    pub extra: serde_json::Map<String, serde_json::Value>,
}

impl Card {
    pub fn to_json(&self) -> Vec<u8> {
        // Every field is a string, number, list or map: this cannot fail.
        let mut bytes = serde_json::to_vec_pretty(self).unwrap_or_default();
        bytes.push(b'\n');
        bytes
    }

    pub fn event(&mut self, step: &str, detail: impl Into<String>) {
        let at = crate::manifest::format_time(std::time::SystemTime::now());
        self.history.push(Event { at, step: step.to_string(), detail: detail.into() });
    }

    /// The card for people. Free text is indented so nothing in it can
    /// start a heading or close a fence.
    pub fn to_markdown(&self) -> String {
        let mut md = String::new();
        let text = |s: &str| {
            if s.is_empty() { "    (none given)\n".to_string() } else { indent(s) }
        };
        let _ = writeln!(md, "# Lane {} ({})\n", self.lane, self.state.as_str());
        let _ = writeln!(md, "| | |\n|---|---|");
        for (k, v) in [
            ("ticket", &self.ticket),
            ("claimant", &self.claimant),
            ("operator", &self.operator),
            ("reviewer", &self.reviewer),
            ("resetter", &self.resetter),
            ("claimed at", &self.claimed_at),
            ("base commit", &self.base_commit),
            ("eval", &self.eval),
        ] {
            let _ = writeln!(md, "| {k} | {} |", cell(v));
        }
        let _ = writeln!(md, "\n## Problem\n\n{}", text(&self.problem));
        let _ = writeln!(md, "## Done when\n\n{}", text(&self.done_when));
        let _ = writeln!(md, "## Replay\n\nPrompt: `{}`\n", self.replay.prompt);
        for r in &self.replay.runs {
            let code = r.exit_code.map_or("running or unknown".to_string(), |c| format!("exit {c}"));
            let _ = writeln!(
                md,
                "- run `{}` at {}: `{}` ({code})",
                r.run_id,
                r.started_at,
                cell(&r.argv.join(" "))
            );
        }
        if let Some(c) = &self.checker {
            let _ = writeln!(md, "\n## Kit check ({})\n", if c.ok { "passed" } else { "failed" });
            for i in &c.items {
                let _ = writeln!(md, "- [{}] {}: {}", if i.ok { "x" } else { " " }, i.item, cell(&i.detail));
            }
            for r in &c.removed {
                let _ = writeln!(md, "- removed `{}`", cell(r));
            }
            for w in &c.warnings {
                let _ = writeln!(md, "- warning: {}", cell(w));
            }
            if let Some(scan) = &c.scan {
                let _ = writeln!(md, "- secret scan: {scan}");
            }
            for f in &c.findings {
                let _ = writeln!(md, "- finding: `{}`", cell(f));
            }
        }
        if let Some(k) = &self.kit {
            let _ =
                writeln!(md, "\n## Kit\n\n`{}`, sha256 `{}`, sealed at {}", k.path, k.sha256, k.sealed_at);
        }
        if let Some(r) = &self.review {
            let _ = writeln!(
                md,
                "\n## Review: {}\n\nKit sha256 `{}`; `replay/eval.sh` exited {} in run `{}` at {}.\n\n{}",
                r.result,
                r.kit_sha256,
                r.eval_exit_code,
                r.run_id,
                r.at,
                indent(if r.diff_stat.is_empty() { "(no changes)" } else { &r.diff_stat })
            );
        }
        if let Some(s) = &self.stamp {
            let _ = writeln!(
                md,
                "\n## Stamp: {}\n\nBy {} at {}, kit sha256 `{}`.",
                s.verdict,
                cell(&s.by),
                s.at,
                s.kit_sha256
            );
        }
        if let Some(p) = &self.promotion {
            let _ = writeln!(
                md,
                "\n## Promotion\n\n{} files onto branch `{}` of `{}` in worktree `{}` (uncommitted), at {}.",
                p.files, p.branch, p.repo, p.worktree, p.at
            );
        }
        if let Some(r) = &self.reset {
            let _ = writeln!(md, "\n## Reset\n\nBy {} at {}.", cell(&r.by), r.at);
            for g in &r.groups {
                let _ = writeln!(md, "- {}", cell(g));
            }
        }
        md
    }
}

/// A value on one Markdown line.
fn cell(s: &str) -> String {
    // Control characters (a file name a run chose, say) are escaped, so a
    // cell stays one line of the card and moves no cursor when shown.
    crate::shown::line(&s.replace(['\n', '\r'], " ").replace('|', "\\|").replace('`', "'"))
}

/// Free text as an indented block.
fn indent(s: &str) -> String {
    let mut out = String::new();
    for line in s.lines() {
        out.push_str("    ");
        out.push_str(line);
        out.push('\n');
    }
    out
}
