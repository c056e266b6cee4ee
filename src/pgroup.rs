//! Process groups a run left behind: proving that every member is the
//! run's, and ending them one process at a time.
//!
//! A group id names a set of processes that anyone in the same session can
//! join, and the id itself is reused once the group is empty. So the
//! recorded id proves nothing alone, and neither do the manifest's numbers
//! (outside a sandbox the command can rewrite its manifest). A group is
//! signalled only while every member passes, checked against `/proc` now:
//!
//! - the run's own runws is gone (while it lives, the run is its business);
//! - a leader holding the recorded id started at the recorded time;
//! - each member started after the run began (its runws's start, and no
//!   earlier than the run directory was created, which the command cannot
//!   move earlier) and before it ended (`finished_at`, or the lease's end
//!   for a run whose runws died), or descends, inside the group, from a
//!   member that did;
//! - each member runs as the owner of the run directory;
//! - no member descends from a live runws (another run's: by its command
//!   name, or as recorded by a live run under the same root), nor is the
//!   reaper or one of its ancestors.
//!
//! Members are then signalled one by one through pidfds opened after the
//! check, each re-checked by its start time, so a process that ended and
//! whose pid was reused is never hit. What can still change between the
//! check and a signal is the group's membership: a member may fork. After
//! the grace period the members are stopped (a stopped process cannot
//! fork), the group is read again until no new member appears, each
//! newcomer proven by descent from a member, and then all are killed.

use std::collections::{HashMap, HashSet};
use std::sync::OnceLock;
use std::time::{Duration, Instant, SystemTime};

use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::fsx::Dir;
use crate::manifest::{self, Manifest, Status};
use crate::procinfo::{self, Pidfd};
use crate::workspace::Root;

/// One process, as `/proc/<pid>/stat` showed it.
#[derive(Debug, Clone, Copy)]
struct Proc {
    ppid: i32,
    pgid: i32,
    start_time: u64,
    /// Its command name is runws's own.
    runws: bool,
}

/// The processes of this host, read once per reap pass.
pub struct Procs {
    all: HashMap<i32, Proc>,
    by_pgid: HashMap<i32, Vec<i32>>,
    /// The root whose live runs' runws processes are protected.
    root: Option<Root>,
    live_runws: OnceLock<HashSet<(i32, u64)>>,
}

impl Procs {
    /// Reads every live (not zombie) process once.
    pub fn scan(root: Option<&Root>) -> Procs {
        let own = procinfo::own_name();
        let mut all = HashMap::new();
        let mut by_pgid: HashMap<i32, Vec<i32>> = HashMap::new();
        if let Ok(rd) = std::fs::read_dir("/proc") {
            for e in rd.flatten() {
                let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else { continue };
                let Some((s, name)) = procinfo::stat_and_name(pid) else { continue };
                // A zombie is already dead; only its parent can remove it.
                if matches!(s.state, 'Z' | 'X') {
                    continue;
                }
                let runws = own.as_deref() == Some(name.as_str());
                all.insert(pid, Proc { ppid: s.ppid, pgid: s.pgid, start_time: s.start_time, runws });
                by_pgid.entry(s.pgid).or_default().push(pid);
            }
        }
        Procs { all, by_pgid, root: root.cloned(), live_runws: OnceLock::new() }
    }

    /// True while process group `pgid` has a live member.
    pub fn group_alive(&self, pgid: i32) -> bool {
        !self.members(pgid).is_empty()
    }

    fn members(&self, pgid: i32) -> &[i32] {
        self.by_pgid.get(&pgid).map_or(&[], |v| v.as_slice())
    }

    /// runws processes of live runs under the root, as their manifests
    /// record them; read once, when first needed.
    fn live_runws(&self) -> &HashSet<(i32, u64)> {
        self.live_runws.get_or_init(|| {
            let mut set = HashSet::new();
            let Some(root) = &self.root else { return set };
            let Ok(runs) = root.runs_dir(false) else { return set };
            let host = procinfo::hostname();
            for id in runs.entries().unwrap_or_default() {
                let Ok(dir) = runs.sub(&id) else { continue };
                let Ok(m) = manifest::read(&dir) else { continue };
                if m.status == Status::Running
                    && m.host == host
                    && procinfo::is_same_process(m.runws.pid, m.runws.start_time)
                {
                    set.insert((m.runws.pid, m.runws.start_time));
                }
            }
            set
        })
    }

    /// The live runws `pid` descends from, if any (itself excluded).
    fn runws_above(&self, pid: i32) -> Option<i32> {
        let mut p = *self.all.get(&pid)?;
        for _ in 0..4096 {
            let parent = self.all.get(&p.ppid)?;
            if parent.start_time > p.start_time {
                return None;
            }
            if parent.runws || self.live_runws().contains(&(p.ppid, parent.start_time)) {
                return Some(p.ppid);
            }
            p = *parent;
        }
        None
    }
}

/// What the run directory tells about a run, beyond its manifest: who owns
/// it and when it was created. Neither can be changed by the command.
pub struct RunFacts<'a> {
    pub manifest: &'a Manifest,
    pub owner: Option<u32>,
    pub born: Option<SystemTime>,
}

impl<'a> RunFacts<'a> {
    pub fn of(dir: &Dir, manifest: &'a Manifest) -> RunFacts<'a> {
        let (owner, born) = dir.owner_and_birth();
        RunFacts { manifest, owner, born }
    }

    /// The boot-clock ticks within which the run's processes started.
    fn window(&self) -> (u64, u64) {
        let m = self.manifest;
        // Wall-clock times become ticks with the clocks' offset now; 50 ms
        // cover rounding (a tick, a millisecond) and a small step of the
        // wall clock since.
        let slack = (procinfo::ticks_per_second() / 20).max(2);
        let mut begin = m.runws.start_time;
        if let Some(born) = self.born.and_then(procinfo::ticks_at) {
            begin = begin.max(born.saturating_sub(slack));
        }
        let ended = match m.status {
            Status::Running | Status::Abandoned => Some(m.lease_until.as_str()),
            _ => m.finished_at.as_deref(),
        };
        let now = procinfo::ticks_now();
        let end = ended
            .and_then(manifest::parse_time)
            .and_then(procinfo::ticks_at)
            .map_or(now, |t| t.saturating_add(slack).min(now));
        (begin, end)
    }
}

/// Why a group may not be signalled, as a report line's tail.
fn refuse(pgid: i32, why: String) -> String {
    format!("process group {pgid}: {why}; not signalled")
}

/// Proves every member of `pgid` is the run's: `Ok` with the members and
/// their start times, `Err` with the report line.
fn prove(
    pgid: i32,
    leader_start: Option<u64>,
    facts: Option<&RunFacts>,
    procs: &Procs,
    members: &[i32],
) -> Result<Vec<(i32, u64)>, String> {
    if let Some(f) = facts
        && procinfo::is_same_process(f.manifest.runws.pid, f.manifest.runws.start_time)
    {
        return Err(refuse(pgid, format!("the run's runws {} is still alive", f.manifest.runws.pid)));
    }
    if let (Some(st), Some(leader)) = (leader_start, procs.all.get(&pgid))
        && leader.pgid == pgid
        && leader.start_time != st
    {
        return Err(refuse(pgid, "id reused by another process".into()));
    }
    let window = facts.map(RunFacts::window);
    let mine = own_line(procs);
    let in_window = |p: &Proc| window.is_some_and(|(b, e)| b <= p.start_time && p.start_time <= e);
    let is_leader = |pid: i32, p: &Proc| pid == pgid && leader_start == Some(p.start_time);
    let mut proven = Vec::with_capacity(members.len());
    for &pid in members {
        let Some(p) = procs.all.get(&pid) else { continue };
        if mine.contains(&pid) {
            return Err(refuse(pgid, format!("member {pid} is this reaper or one of its ancestors")));
        }
        if let Some((begin, _)) = window
            && p.start_time < begin
        {
            return Err(refuse(pgid, format!("member {pid} started before the run began")));
        }
        if !(in_window(p) || is_leader(pid, p)) {
            // Started after the run ended: the run's only as a descendant,
            // inside the group, of a member that is.
            let mut q = *p;
            let mut found = false;
            for _ in 0..4096 {
                let Some(parent) = procs.all.get(&q.ppid) else { break };
                if parent.pgid != pgid || parent.start_time > q.start_time {
                    break;
                }
                if in_window(parent) || is_leader(q.ppid, parent) {
                    found = true;
                    break;
                }
                q = *parent;
            }
            if !found {
                let why = if window.is_some() {
                    "started after the run ended and descends from none of its processes"
                } else {
                    "is not provably the run's (no manifest tells when the run ran)"
                };
                return Err(refuse(pgid, format!("member {pid} {why}")));
            }
        }
        if let Some(owner) = facts.and_then(|f| f.owner) {
            match procinfo::real_uid(pid) {
                Some(uid) if uid == owner => {}
                Some(uid) => {
                    return Err(refuse(
                        pgid,
                        format!("member {pid} runs as uid {uid}, not the run's {owner}"),
                    ));
                }
                None => continue, // ended meanwhile
            }
        }
        proven.push((pid, p.start_time));
    }
    // Last, as it may read the manifests of the root's runs.
    for &(pid, _) in &proven {
        if let Some(r) = procs.runws_above(pid) {
            return Err(refuse(
                pgid,
                format!("member {pid} belongs to another live run (it descends from runws {r})"),
            ));
        }
    }
    Ok(proven)
}

/// This process and its ancestors: never signalled.
fn own_line(procs: &Procs) -> HashSet<i32> {
    let mut out = HashSet::new();
    let mut pid = std::process::id() as i32;
    while pid > 1 && out.insert(pid) {
        match procs.all.get(&pid) {
            Some(p) => pid = p.ppid,
            None => break,
        }
    }
    out
}

/// A member to signal: by pidfd, or (on a kernel without pidfds) by pid
/// after re-checking its start time.
enum Target {
    Fd(Pidfd),
    Pid(i32, u64),
}

impl Target {
    fn open(pid: i32, start_time: u64) -> Option<Target> {
        match Pidfd::open(pid, start_time) {
            Ok(Some(fd)) => Some(Target::Fd(fd)),
            Ok(None) => None,
            Err(_) => procinfo::is_same_process(pid, start_time).then_some(Target::Pid(pid, start_time)),
        }
    }

    fn pid(&self) -> i32 {
        match self {
            Target::Fd(fd) => fd.pid,
            Target::Pid(pid, _) => *pid,
        }
    }

    /// Sends `sig`; false when the process had ended already.
    fn signal(&self, sig: Signal) -> bool {
        match self {
            Target::Fd(fd) => fd.signal(sig),
            Target::Pid(pid, start) => {
                procinfo::is_same_process(*pid, *start) && kill(Pid::from_raw(*pid), sig).is_ok()
            }
        }
    }

    fn alive(&self) -> bool {
        match self {
            Target::Fd(fd) => {
                let mut fds = [PollFd::new(fd.fd(), PollFlags::POLLIN)];
                !matches!(poll(&mut fds, PollTimeout::ZERO), Ok(n) if n > 0)
            }
            Target::Pid(pid, start) => procinfo::is_same_process(*pid, *start),
        }
    }
}

/// Waits until every target ended or `limit` passed; drops those that
/// ended and returns true when none is left.
fn wait_all(targets: &mut Vec<Target>, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        targets.retain(Target::alive);
        if targets.is_empty() {
            return true;
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return false;
        }
        let by_pid = targets.iter().any(|t| matches!(t, Target::Pid(..)));
        let step = if by_pid { left.min(Duration::from_millis(20)) } else { left };
        let mut fds: Vec<PollFd> = targets
            .iter()
            .filter_map(|t| match t {
                Target::Fd(fd) => Some(PollFd::new(fd.fd(), PollFlags::POLLIN)),
                Target::Pid(..) => None,
            })
            .collect();
        let ms = PollTimeout::try_from(step.as_millis().min(60_000) as i32).unwrap_or(PollTimeout::MAX);
        if fds.is_empty() {
            std::thread::sleep(step);
        } else {
            let _ = poll(&mut fds, ms);
        }
    }
}

/// How [`end`] left a process group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// No member was left to signal: the group had ended (or another
    /// reaper ended it) before this one got to it.
    AlreadyGone,
    /// Members were signalled and are gone.
    Signalled,
    /// Not signalled (or not all of it): not provably the run's.
    Refused,
    /// Signalled, but a member outlived SIGKILL.
    Survived,
}

/// What [`end`] did, and the report line that says so.
#[derive(Debug, Clone)]
pub struct GroupEnd {
    pub ended: Ended,
    pub message: String,
}

impl GroupEnd {
    fn new(ended: Ended, message: String) -> GroupEnd {
        GroupEnd { ended, message }
    }
}

/// Ends process group `pgid` if every member is provably the run's (see
/// the module's documentation).
pub fn end(
    pgid: i32,
    leader_start: Option<u64>,
    grace: Duration,
    facts: Option<&RunFacts>,
    procs: &Procs,
) -> GroupEnd {
    let gone = || GroupEnd::new(Ended::AlreadyGone, format!("process group {pgid}: already gone"));
    if pgid <= 1 {
        return GroupEnd::new(
            Ended::Refused,
            format!("process group {pgid}: not a group runws would signal"),
        );
    }
    let members = procs.members(pgid);
    if members.is_empty() {
        return gone();
    }
    let proven = match prove(pgid, leader_start, facts, procs, members) {
        Ok(p) => p,
        Err(line) => return GroupEnd::new(Ended::Refused, line),
    };
    // `procs` was read when the reap began: members that ended since (or
    // that another reaper ended) cannot be opened, or take no signal.
    let mut targets: Vec<Target> = proven.iter().filter_map(|&(pid, st)| Target::open(pid, st)).collect();
    let mut known: HashMap<i32, u64> = proven.into_iter().collect();
    let mut delivered = false;
    for t in &targets {
        delivered |= t.signal(Signal::SIGTERM);
        // A stopped process cannot act on SIGTERM.
        t.signal(Signal::SIGCONT);
    }
    if !delivered && Procs::scan(None).members(pgid).is_empty() {
        return gone();
    }
    wait_all(&mut targets, grace);

    // Whatever is left, and whatever the members started meanwhile: stop
    // it (a stopped process cannot fork), and read the group again until a
    // reading made after every known member was stopped shows no newcomer.
    let mut left_behind: Option<i32> = None;
    let mut stopped = false;
    for _ in 0..16 {
        let now = Procs::scan(None);
        let mut new = 0;
        for &pid in now.members(pgid) {
            let Some(p) = now.all.get(&pid) else { continue };
            if known.get(&pid) == Some(&p.start_time) {
                continue;
            }
            // A newcomer: the run's if its parent, in the group, is.
            let parent_known = now.all.get(&p.ppid).is_some_and(|q| {
                q.pgid == pgid && q.start_time <= p.start_time && known.get(&p.ppid) == Some(&q.start_time)
            });
            if !parent_known {
                left_behind.get_or_insert(pid);
                continue;
            }
            if let Some(t) = Target::open(pid, p.start_time) {
                known.insert(pid, p.start_time);
                if stopped {
                    t.signal(Signal::SIGSTOP);
                }
                targets.push(t);
                new += 1;
            }
        }
        targets.retain(Target::alive);
        if targets.is_empty() || (stopped && new == 0) {
            break;
        }
        if !stopped {
            for t in &targets {
                t.signal(Signal::SIGSTOP);
            }
            stopped = true;
        }
    }
    for t in &targets {
        t.signal(Signal::SIGKILL);
    }
    let all_gone = wait_all(&mut targets, Duration::from_secs(5));
    let how = if stopped { "SIGKILL" } else { "SIGTERM" };
    match (all_gone, left_behind) {
        (false, _) => GroupEnd::new(
            Ended::Survived,
            format!(
                "process group {pgid}: still alive after SIGKILL ({})",
                targets.iter().map(|t| t.pid().to_string()).collect::<Vec<_>>().join(", ")
            ),
        ),
        (true, Some(pid)) => GroupEnd::new(
            Ended::Refused,
            format!(
                "process group {pgid}: ended with {how}, but member {pid} joined it meanwhile and is not provably the run's; not signalled"
            ),
        ),
        (true, None) => GroupEnd::new(Ended::Signalled, format!("process group {pgid}: ended with {how}")),
    }
}

/// Checks, when a run claims process group `pgid`, that the group is the
/// run's: its leader is alive and every member descends from the run's
/// runws (`runws_pid`, started at `runws_start`). Returns the leader's
/// start time, or why not.
pub fn claimable(pgid: i32, runws_pid: i32, runws_start: u64, run_id: &str) -> Result<u64, String> {
    let leader = match procinfo::stat(pgid) {
        Some(s) if !matches!(s.state, 'Z' | 'X') => s,
        _ => return Err(format!("process {pgid} is gone, so nothing proves whose group it led")),
    };
    if leader.pgid != pgid {
        return Err(format!("process {pgid} does not lead a process group"));
    }
    if !procinfo::pid_belongs_to(pgid, runws_pid, runws_start) {
        return Err(format!("its leader {pgid} is not part of run `{run_id}`"));
    }
    let procs = Procs::scan(None);
    for &pid in procs.members(pgid) {
        if !procinfo::pid_belongs_to(pid, runws_pid, runws_start) {
            return Err(format!("its member {pid} is not part of run `{run_id}`"));
        }
    }
    Ok(leader.start_time)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `sleep 60` in a process group of its own, orphaned (so that it does
    /// not descend from this test, whose name a reaper takes for runws's).
    fn orphan_group() -> (i32, u64) {
        let out = std::process::Command::new("sh")
            .args(["-c", "setsid sleep 60 >/dev/null 2>&1 & echo $!"])
            .output()
            .unwrap();
        let pid: i32 = String::from_utf8(out.stdout).unwrap().trim().parse().unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            if let Some(s) = procinfo::stat(pid)
                && s.pgid == pid
                && s.ppid != std::process::id() as i32
            {
                return (pid, s.start_time);
            }
            assert!(Instant::now() < deadline, "sleep never led its own group");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    fn gone(pid: i32) -> bool {
        procinfo::stat(pid).is_none_or(|s| matches!(s.state, 'Z' | 'X'))
    }

    /// A group read while alive but ended before [`end`] got to it (by
    /// another reaper, say) is reported already gone, not as signalled.
    #[test]
    fn a_group_gone_since_the_scan_is_already_gone() {
        let (pid, start) = orphan_group();
        let procs = Procs::scan(None);
        assert!(procs.group_alive(pid));
        kill(Pid::from_raw(pid), Signal::SIGKILL).unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        while !gone(pid) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        let ended = end(pid, Some(start), Duration::from_secs(1), None, &procs);
        assert_eq!(ended.ended, Ended::AlreadyGone, "{}", ended.message);
        assert_eq!(ended.message, format!("process group {pid}: already gone"));
    }

    /// A live group that is provably the run's is signalled and said so.
    #[test]
    fn a_live_group_is_signalled() {
        let (pid, start) = orphan_group();
        let procs = Procs::scan(None);
        let ended = end(pid, Some(start), Duration::from_secs(5), None, &procs);
        if !gone(pid) {
            let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
        }
        assert_eq!(ended.ended, Ended::Signalled, "{}", ended.message);
    }
}
