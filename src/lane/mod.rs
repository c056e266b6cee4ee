//! Promotion lanes: a ticket's work done in its own directory by a named
//! operator, sealed into a kit, reviewed by someone else from that kit
//! alone, stamped, and only then promoted onto a branch of the real
//! repository, or scrapped.
//!
//! A lane is `ROOT/lanes/lane-<ticket>-<initials>/`: `TICKET`, `card.json`
//! and `card.md` (the [`card::Card`]), `replay/prompt.md`, `replay/eval.sh`,
//! `work/` (a git repository whose first, empty commit is the review's
//! base) and `logs/`.
//!
//! What a lane guarantees, to a reviewer who must trust the kit:
//! - The steps happen in order: claim, run, seal, review, stamp, then
//!   promote (after `approve`) or nothing more (after `scrap`), then reset;
//!   `return` sends the lane back to run. Every other order is refused
//!   ([`allowed`]), naming the state and the step that is missing.
//! - Only the reviewer named at claim stamps and only the resetter named at
//!   claim resets. (Names are an honest convention, not authentication:
//!   anyone who can write the card can change it.)
//! - An approval is of exactly the kit that passed a review: the kit's
//!   sha256 then, in the stamp, and on disk now are the same. A promotion
//!   copies the approved kit's `work/`, restored and checked again, never
//!   the live lane directory, which the operator could still change.
//! - A kit holds no `.env` files (the seal removes them), nothing on the
//!   seal's never-packed list (the check refuses it), and nothing the
//!   secret scan finds, in the files or in the git history (else it goes to
//!   quarantine, and a quarantine kit is never reviewed).
//! - Every card write is atomic and under the lane directory's lock, so
//!   concurrent lane commands never lose each other's updates.
//!
//! Choices a user meets: the initials are the first ASCII letter or digit
//! of each of the four names, lowercased (`x` when there is none); a lane
//! name that exists, or was reset before, is refused. The `eval.sh`
//! template exits 0 after `git status` and says it is a template; the seal
//! warns about unedited templates rather than failing, since the issue's
//! check is about presence. Kits after a `return` are `<lane>.2.tar.zst`,
//! `<lane>.3...`. A promotion goes to a new worktree (default
//! `ROOT/worktrees/<lane>`), uncommitted. Refusals exit 90 (order, review,
//! kit), 91 (person), 92 (kit check); a failed review exits 93.

pub mod card;
pub mod claim;
pub mod kit;
pub mod promote;
pub mod review;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use sha2::Digest;

pub use card::{Card, State};

use crate::error::{Error, IoContext, Result};
use crate::fsx::{Dir, DirLock};
use crate::manifest::format_time;
use crate::workspace::Root;

pub const CARD_JSON: &str = "card.json";
pub const CARD_MD: &str = "card.md";
const MAX_PERSON: usize = 100;
const MAX_TEXT: usize = 8000;

/// A step after the claim, in the words of the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    Run,
    Seal,
    Review,
    Stamp,
    Promote,
    Reset,
}

impl Step {
    pub fn as_str(self) -> &'static str {
        match self {
            Step::Run => "run",
            Step::Seal => "seal",
            Step::Review => "review",
            Step::Stamp => "stamp",
            Step::Promote => "promote",
            Step::Reset => "reset",
        }
    }
}

/// Whether `step` may happen to a lane in `state`; the error says why not.
pub fn allowed(lane: &str, state: State, step: Step) -> Result<()> {
    use State as S;
    let why = match (step, state) {
        (Step::Run, S::Claimed | S::Working | S::Returned)
        | (Step::Seal, S::Working)
        | (Step::Review, S::Sealed | S::Reviewed)
        | (Step::Stamp, S::Reviewed)
        | (Step::Promote, S::Approved)
        | (Step::Reset, S::Promoted | S::Scrapped) => return Ok(()),
        (_, S::Reset) => "it is gone; only `show` still reads its card".to_string(),
        (Step::Run, _) => "`run` is allowed only before the seal, or after a `return` stamp".into(),
        (Step::Seal, S::Claimed | S::Returned) => "`seal` needs a `lane run` first".into(),
        (Step::Seal, _) => "it is sealed already; a new seal needs a `return` stamp and a new run".into(),
        (Step::Review, S::Claimed | S::Working | S::Returned) => "`review` needs a seal first".into(),
        (Step::Review, _) => "it is stamped already; a new review needs a `return` and a new seal".into(),
        (Step::Stamp, S::Claimed | S::Working | S::Returned | S::Sealed) => {
            "`stamp` needs a review first".into()
        }
        (Step::Stamp, _) => "it is stamped already".into(),
        (Step::Promote, S::Scrapped) => "a scrapped lane is never promoted".into(),
        (Step::Promote, S::Promoted) => "it is promoted already".into(),
        (Step::Promote, _) => "`promote` needs an `approve` stamp".into(),
        (Step::Reset, S::Approved) => "`reset` comes after `promote` (or after a `scrap` stamp)".into(),
        (Step::Reset, S::Returned) => "it was returned for more work; `reset` needs a final stamp".into(),
        (Step::Reset, _) => "`reset` needs a stamp first (then `promote`, or a `scrap` stamp)".into(),
    };
    Err(Error::LaneOutOfOrder { lane: lane.to_string(), state: state.as_str(), why })
}

/// Checks a ticket id: `[A-Za-z0-9][A-Za-z0-9._-]{0,63}`.
pub fn check_ticket(ticket: &str) -> Result<()> {
    let b = ticket.as_bytes();
    let ok = !b.is_empty()
        && b.len() <= 64
        && b[0].is_ascii_alphanumeric()
        && b.iter().all(|c| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'_' | b'-'));
    let why = "a ticket is 1 to 64 letters, digits, `.`, `_` or `-`, starting with a letter or digit";
    valid_name(ok, ticket, why)
}

/// `Ok` when `ok`, else `name` refused for `why`.
fn valid_name(ok: bool, name: &str, why: &'static str) -> Result<()> {
    if ok {
        return Ok(());
    }
    Err(Error::InvalidName { name: name.escape_debug().to_string(), why })
}

/// Restores `kit` into a private temporary directory (named `prefix`...)
/// under ROOT's `restores/`, and scans the copy again: the directory and
/// the copy (its `kit/`), or [`Error::SecretsFound`] for the kit.
fn restore_scanned(root: &Root, kit: &Path, prefix: &str) -> Result<(tempfile::TempDir, PathBuf)> {
    let restores = root.restores();
    crate::fsx::create_private_dirs(&restores).ctx("cannot create", &restores)?;
    let tmp = tempfile::Builder::new()
        .prefix(prefix)
        .tempdir_in(&restores)
        .ctx("cannot create a directory in", &restores)?;
    let restored = tmp.path().join("kit");
    crate::restore::restore(kit, &restored, Some(root), crate::restore::Limits::default())?;
    let findings = crate::seal::scan::scan_paths(std::slice::from_ref(&restored))?.findings;
    if !findings.is_empty() {
        return Err(Error::SecretsFound { what: format!("kit `{}`", kit.display()), count: findings.len() });
    }
    Ok((tmp, restored))
}

/// Checks a lane name as the commands take it: `lane-` and the id alphabet,
/// so it is always one safe path component.
pub fn check_lane_name(lane: &str) -> Result<()> {
    let ok = lane.starts_with("lane-")
        && lane.len() <= 128
        && lane.bytes().all(|c| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'_' | b'-'));
    valid_name(ok, lane, "a lane is named `lane-<ticket>-<initials>`, as `lane claim` printed it")
}

/// Checks one of the four names; returns it trimmed.
pub fn check_person(role: &'static str, name: &str) -> Result<String> {
    let t = name.trim();
    let why = if t.is_empty() {
        Some("a name cannot be blank")
    } else if t.chars().any(char::is_control) {
        Some("a name cannot hold control characters")
    } else if t.chars().count() > MAX_PERSON {
        Some("a name is at most 100 characters")
    } else {
        None
    };
    match why {
        Some(why) => Err(Error::Usage(format!("invalid --{role} `{}`: {why}", name.escape_debug()))),
        None => Ok(t.to_string()),
    }
}

/// Checks free text (problem, done-when): lines and tabs, no other control
/// characters, at most 8000 characters.
pub fn check_text(what: &str, text: &str) -> Result<String> {
    if text.chars().any(|c| c.is_control() && c != '\n' && c != '\t') || text.chars().count() > MAX_TEXT {
        return Err(Error::Usage(format!(
            "invalid --{what}: at most 8000 characters, no control characters except newlines and tabs"
        )));
    }
    Ok(text.trim().to_string())
}

/// The lane's initials: the first ASCII letter or digit of each name,
/// lowercased (`x` for a name without one).
pub fn initials(names: &[&str]) -> String {
    names
        .iter()
        .map(|n| n.chars().find(char::is_ascii_alphanumeric).map_or('x', |c| c.to_ascii_lowercase()))
        .collect()
}

/// One lane directory, open.
#[derive(Debug)]
pub struct Lane {
    pub name: String,
    pub root: Root,
    pub dir: Dir,
}

impl Lane {
    /// Opens `ROOT/lanes/<name>`; refuses a symlink in its place.
    pub fn open(root: &Root, name: &str) -> Result<Lane> {
        check_lane_name(name)?;
        let missing = || Error::NoSuchLane { lane: name.to_string(), root: root.to_path_buf() };
        let lanes = match Dir::open(root.lanes()) {
            Ok(d) => d,
            Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
                return Err(missing());
            }
            Err(e) => return Err(e),
        };
        if lanes.lstat(name)?.is_none() {
            return Err(missing());
        }
        Ok(Lane { name: name.to_string(), root: root.clone(), dir: lanes.sub(name)? })
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// The lane's lock: every card write holds it.
    pub fn lock(&self) -> Result<DirLock> {
        self.dir.lock()
    }

    pub fn read(&self) -> Result<Card> {
        read_card(&self.dir, &self.name)
    }

    /// Writes `card.json`, then `card.md`; call with the lock held.
    pub fn write(&self, card: &Card) -> Result<()> {
        write_card(&self.dir, CARD_JSON, CARD_MD, card)
    }

    /// Read-modify-write of the card under the lock; nothing is written
    /// when `change` fails.
    pub fn update<T>(&self, change: impl FnOnce(&mut Card) -> Result<T>) -> Result<T> {
        let _lock = self.lock()?;
        let mut card = self.read()?;
        let value = change(&mut card)?;
        self.write(&card)?;
        Ok(value)
    }
}

pub(crate) fn read_card(dir: &Dir, lane: &str) -> Result<Card> {
    let path = dir.join(CARD_JSON);
    let Some(mut f) = dir.open_read(CARD_JSON)? else {
        return Err(Error::Other(format!("lane `{lane}` has no card at `{}`", path.display())));
    };
    let mut bytes = Vec::new();
    f.read_to_end(&mut bytes).ctx("cannot read", &path)?;
    let card: Card = serde_json::from_slice(&bytes)
        .map_err(|e| Error::Other(format!("card `{}` is corrupt: {e}", path.display())))?;
    if card.schema != card::SCHEMA {
        return Err(Error::Other(format!(
            "card `{}` has schema {}, not {}",
            path.display(),
            card.schema,
            card::SCHEMA
        )));
    }
    Ok(card)
}

pub(crate) fn write_card(dir: &Dir, json: &str, md: &str, card: &Card) -> Result<()> {
    dir.write_atomic(json, &card.to_json(), 0o644, true)?;
    dir.write_atomic(md, card.to_markdown().as_bytes(), 0o644, true)
}

/// The card of a lane, or the copy kept beside its kit once it was reset.
pub fn find_card(root: &Root, name: &str) -> Result<Card> {
    match Lane::open(root, name) {
        Ok(lane) => lane.read(),
        Err(Error::NoSuchLane { .. }) => {
            let dir = root.kits();
            let kept =
                Dir::open(&dir).ok().filter(|d| matches!(d.lstat(format!("{name}.card.json")), Ok(Some(_))));
            match kept {
                Some(d) => {
                    let bytes =
                        std::fs::read(d.join(format!("{name}.card.json"))).ctx("cannot read", d.path())?;
                    serde_json::from_slice(&bytes)
                        .map_err(|e| Error::Other(format!("kept card of `{name}` is corrupt: {e}")))
                }
                None => Err(Error::NoSuchLane { lane: name.to_string(), root: root.to_path_buf() }),
            }
        }
        Err(e) => Err(e),
    }
}

/// Refuses anyone but the person the card names for `role`.
pub fn check_named(lane: &str, step: Step, role: &'static str, named: &str, name: &str) -> Result<()> {
    if name.trim() == named {
        return Ok(());
    }
    Err(Error::LaneNotYours {
        lane: lane.to_string(),
        step: step.as_str(),
        role,
        name: name.escape_debug().to_string(),
        named: named.to_string(),
    })
}

/// git in a lane's repositories, as runws runs it everywhere: see
/// [`crate::git`].
pub(crate) use crate::git::{command as git_clean, output as git_out};

pub(crate) fn now() -> String {
    format_time(SystemTime::now())
}

pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
    crate::hex::encode(&sha2::Sha256::digest(bytes))
}

/// `approve`, `return` or `scrap`, by the named reviewer, after a review.
/// An approval needs a passing review of the current kit, and the kit on
/// disk must still be the bytes that were reviewed.
pub fn stamp(root: &Root, name: &str, verdict: &str, reviewer: &str) -> Result<Card> {
    let lane = Lane::open(root, name)?;
    lane.update(|card| {
        check_named(name, Step::Stamp, "reviewer", &card.reviewer, reviewer)?;
        allowed(name, card.state, Step::Stamp)?;
        let (Some(review), Some(kit)) = (card.review.clone(), card.kit.clone()) else {
            return Err(Error::LaneRefused(format!("lane `{name}` has no review of a kit on its card")));
        };
        if verdict == "approve" {
            if review.result != "pass" {
                return Err(Error::LaneRefused(format!(
                    "lane `{name}`: the review of its kit failed (`replay/eval.sh` exited {}); `approve` needs a passing review; stamp `return` or `scrap`",
                    review.eval_exit_code
                )));
            }
            let on_disk = crate::restore::verify(Path::new(&kit.path))?;
            if review.kit_sha256 != kit.sha256 || on_disk != review.kit_sha256 {
                return Err(Error::LaneRefused(format!(
                    "lane `{name}`: kit `{}` is not the kit that was reviewed (reviewed sha256 {}, now {on_disk}); review it again",
                    kit.path, review.kit_sha256
                )));
            }
        }
        card.state = match verdict {
            "approve" => State::Approved,
            "return" => State::Returned,
            "scrap" => State::Scrapped,
            other => return Err(Error::Usage(format!("a stamp is approve, return or scrap, not `{other}`"))),
        };
        card.stamp = Some(card::Stamp {
            verdict: verdict.to_string(),
            by: card.reviewer.clone(),
            kit_sha256: review.kit_sha256.clone(),
            at: now(),
        });
        card.event("stamp", format!("{verdict} by {}", card.reviewer));
        Ok(card.clone())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_initials() {
        for ok in ["PROJ-42", "a", "x.y_z", &"t".repeat(64)] {
            check_ticket(ok).unwrap();
        }
        for bad in ["", "-a", ".a", "a/b", "a b", "é", &"t".repeat(65)] {
            assert!(check_ticket(bad).is_err(), "{bad:?} accepted");
        }
        assert_eq!(initials(&["Ada", "bob", " Carol", "Émile Dupont"]), "abcm");
        assert!(check_person("operator", "  ").is_err());
        assert!(check_person("operator", "a\u{7}b").is_err());
        assert_eq!(check_person("operator", " Bo ").unwrap(), "Bo");
        assert!(check_lane_name("lane-X-abcd").is_ok());
        assert!(check_lane_name("../lane").is_err());
        assert!(check_lane_name("lane-a/b").is_err());
    }

    #[test]
    fn the_order_is_enforced() {
        use State as S;
        let order = [
            (S::Claimed, Step::Run),
            (S::Working, Step::Seal),
            (S::Sealed, Step::Review),
            (S::Reviewed, Step::Stamp),
            (S::Approved, Step::Promote),
            (S::Promoted, Step::Reset),
        ];
        let steps = [Step::Run, Step::Seal, Step::Review, Step::Stamp, Step::Promote, Step::Reset];
        for (state, next) in order {
            for step in steps {
                let ok = allowed("l", state, step).is_ok();
                let want = step == next
                    || (state == S::Working && step == Step::Run)
                    || (state == S::Reviewed && step == Step::Review);
                assert_eq!(ok, want, "{state:?} {step:?}");
            }
        }
        assert!(allowed("l", S::Returned, Step::Run).is_ok());
        assert!(allowed("l", S::Scrapped, Step::Reset).is_ok());
        assert!(allowed("l", S::Scrapped, Step::Promote).is_err());
        for step in steps {
            assert!(allowed("l", S::Reset, step).is_err());
        }
    }
}
