//! A run's control group: its limits (`--memory`, `--pids`, `--cpu`), what
//! it used, and the end of everything it started.
//!
//! runws makes the group as a child of the group it runs in itself, so an
//! outer limit (a container's, a systemd unit's) still holds around it and
//! its use is counted there too. cgroup v2 is used where runws's own group
//! lets its children have the controllers the limits need (root, or a
//! delegated subtree, as systemd gives user services); else the cgroup v1
//! hierarchies of those controllers, where runws may make a directory
//! (root). Otherwise the run is refused naming what is missing, or, with
//! `--limits=try`, runs without and records why.
//!
//! The command's first process is put in the group while it waits at its
//! gate, so everything it starts is in the group too, whatever process
//! group or session it moves to. When the command ends every process left
//! in the group is killed (`cgroup.kill` on v2; on v1 each member by a
//! pidfd, opened and then checked to be a member still, so a reused pid is
//! never signalled), what the group used is read, and the group is removed.
//! A group left by a runws that was killed is found by its name, which the
//! reaper derives from ROOT and the run id, never from anything the run
//! wrote.

use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use sha2::{Digest, Sha256};

use crate::fsx::read_kernel_text;

/// What a run asked for; `None` is no limit.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Limits {
    pub memory: Option<u64>,
    pub pids: Option<u64>,
    /// CPU time per period, in cores (1.5 is one and a half cores).
    pub cpu: Option<f64>,
    /// `--limits=try`: run without the limits when no group can be made.
    pub try_mode: bool,
}

impl Limits {
    pub fn any(&self) -> bool {
        self.memory.is_some() || self.pids.is_some() || self.cpu.is_some()
    }

    /// The controllers these limits need.
    fn needed(&self) -> Vec<&'static str> {
        let mut c = Vec::new();
        if self.memory.is_some() {
            c.push("memory");
        }
        if self.pids.is_some() {
            c.push("pids");
        }
        if self.cpu.is_some() {
            c.push("cpu");
        }
        c
    }
}

/// What the group used, read before it is removed.
#[derive(Debug, Clone, Copy, Default)]
pub struct Usage {
    pub peak_memory: Option<u64>,
    pub peak_pids: Option<u64>,
    pub cpu_user_ms: Option<u64>,
    pub cpu_system_ms: Option<u64>,
    pub oom_kills: Option<u64>,
}

/// One run's group: a directory in the v2 hierarchy, or one per v1
/// hierarchy of the controllers it uses.
#[derive(Debug)]
pub struct Group {
    v2: bool,
    dirs: Vec<PathBuf>,
}

/// The group's name: runws's, ROOT's and the run's, so runs of the same id
/// under two ROOTs never share one.
pub fn name(root: &Path, run_id: &str) -> String {
    let key = crate::hex::encode(&Sha256::digest(root.as_os_str().as_encoded_bytes()));
    format!("runws-{}-{run_id}", &key[..12])
}

/// A mounted hierarchy: where, and for v1 which controllers it holds.
struct Mount {
    at: PathBuf,
    v2: bool,
    controllers: Vec<String>,
}

/// The mounted hierarchies and this process's place in each, read once
/// per process (runws never moves itself between groups).
struct Hierarchies {
    mounts: Vec<Mount>,
    /// `/proc/self/cgroup`.
    own: String,
}

fn hierarchies() -> &'static Hierarchies {
    static READ: std::sync::OnceLock<Hierarchies> = std::sync::OnceLock::new();
    READ.get_or_init(|| Hierarchies {
        mounts: read_mounts(),
        own: read_kernel_text("/proc/self/cgroup").unwrap_or_default(),
    })
}

fn mounts() -> &'static [Mount] {
    &hierarchies().mounts
}

fn read_mounts() -> Vec<Mount> {
    let mut out = Vec::new();
    for line in crate::fsx::mount_table().unwrap_or_default() {
        let at = line.point;
        match line.fstype.as_str() {
            "cgroup2" => out.push(Mount { at, v2: true, controllers: Vec::new() }),
            "cgroup" => out.push(Mount {
                at,
                v2: false,
                controllers: line.options.split(',').map(str::to_string).collect(),
            }),
            _ => {}
        }
    }
    out
}

/// This process's group in the hierarchy that holds `controller` (`""`
/// for v2), from `/proc/self/cgroup`.
fn own_path(controller: &str) -> Option<String> {
    hierarchies().own.lines().find_map(|l| {
        let mut parts = l.splitn(3, ':');
        let (_, ctrls, path) = (parts.next()?, parts.next()?, parts.next()?);
        let hit =
            if controller.is_empty() { ctrls.is_empty() } else { ctrls.split(',').any(|c| c == controller) };
        hit.then(|| path.to_string())
    })
}

fn under(mount: &Path, own: &str, name: &str) -> PathBuf {
    mount.join(own.trim_start_matches('/')).join(name)
}

/// Where the group of `name` lies, or would: the v2 directory when the v2
/// hierarchy can hold every controller in `want`, else one v1 directory
/// per controller. Err names what is missing.
fn place(name: &str, want: &[&str]) -> Result<(bool, Vec<PathBuf>), String> {
    let all = mounts();
    // Why v2 could not serve, for the error below.
    let mut v2_why = String::new();
    if let Some(m) = all.iter().find(|m| m.v2)
        && let Some(own) = own_path("")
    {
        let parent = m.at.join(own.trim_start_matches('/'));
        let enabled = read_kernel_text(parent.join("cgroup.subtree_control")).unwrap_or_default();
        let have: Vec<&str> = enabled.split_whitespace().collect();
        if want.iter().all(|w| have.contains(w)) {
            return Ok((true, vec![parent.join(name)]));
        }
        let listed = if have.is_empty() { "nothing".to_string() } else { have.join(" ") };
        v2_why = format!(
            "; on cgroup v2 runws's group `{own}` hands its children {listed} (its cgroup.subtree_control; \
             the kernel lets only the root group, or a group without processes of its own, hand controllers down)"
        );
    }
    let mut dirs = Vec::new();
    let mut missing = Vec::new();
    for c in want {
        match (all.iter().find(|m| !m.v2 && m.controllers.iter().any(|x| x == c)), own_path(c)) {
            (Some(m), Some(own)) => {
                let d = under(&m.at, &own, name);
                if !dirs.contains(&d) {
                    dirs.push(d);
                }
            }
            _ => missing.push(*c),
        }
    }
    if !missing.is_empty() {
        return Err(format!(
            "no cgroup hierarchy here has the {} controller(s) for this process's group \
             (cgroup v2 with them delegated, or cgroup v1 mounted){v2_why}",
            missing.join(", ")
        ));
    }
    Ok((false, dirs))
}

fn write(dir: &Path, file: &str, value: &str) -> io::Result<()> {
    let mut f = fs::OpenOptions::new().write(true).open(dir.join(file))?;
    f.write_all(value.as_bytes())
}

fn read_u64(dir: &Path, file: &str) -> Option<u64> {
    read_kernel_text(dir.join(file)).ok()?.trim().parse().ok()
}

/// `KEY N` lines (`memory.events`, `cpu.stat`, `memory.oom_control`).
fn keyed(dir: &Path, file: &str, key: &str) -> Option<u64> {
    let text = read_kernel_text(dir.join(file)).ok()?;
    text.lines().find_map(|l| l.strip_prefix(key)?.strip_prefix(' ')?.trim().parse().ok())
}

/// Whether a group with `limits` can be made here, checked without making
/// it: the hierarchies exist, and runws may make directories in them.
pub fn available(limits: &Limits) -> Result<(), String> {
    let (_, dirs) = place("probe", &limits.needed())?;
    for d in dirs {
        let parent = d.parent().unwrap_or(&d);
        if nix::unistd::access(parent, nix::unistd::AccessFlags::W_OK).is_err() {
            return Err(format!(
                "runws may not make a control group in `{}` (root, or a delegated cgroup v2 subtree, may)",
                parent.display()
            ));
        }
    }
    Ok(())
}

impl Group {
    /// Makes the group of run `name` with `limits`. `Ok(None)`: no limits
    /// were asked for.
    pub fn create(name: &str, limits: &Limits) -> Result<Option<Group>, String> {
        if !limits.any() {
            return Ok(None);
        }
        let want = limits.needed();
        let (v2, mut dirs) = place(name, &want)?;
        // For the accounting: the v1 hierarchies of peak memory and
        // processes, where present. CPU time needs no group of its own (a
        // separate `cpuacct` hierarchy would cost every run a directory, a
        // move and a removal): it comes from `getrusage` as for any run,
        // unless `cpuacct` shares the `cpu` hierarchy the limit made.
        if !v2 {
            for extra in ["memory", "pids"] {
                if !want.contains(&extra)
                    && let Ok((_, more)) = place(name, &[extra])
                {
                    for d in more {
                        if !dirs.contains(&d) {
                            dirs.push(d);
                        }
                    }
                }
            }
        }
        let mut made = Group { v2, dirs: Vec::new() };
        for d in &dirs {
            match fs::create_dir(d) {
                Ok(()) => made.dirs.push(d.clone()),
                Err(e) => {
                    made.remove();
                    return Err(format!("cannot make the run's control group `{}`: {e}", d.display()));
                }
            }
        }
        if let Err(e) = made.apply(limits) {
            made.remove();
            return Err(e);
        }
        Ok(Some(made))
    }

    fn apply(&self, limits: &Limits) -> Result<(), String> {
        let set = |file: &str, value: String| -> Result<(), String> {
            let dir =
                self.dir_with(file).ok_or_else(|| format!("the run's control group has no `{file}`"))?;
            write(&dir, file, &value).map_err(|e| format!("cannot set `{}`: {e}", dir.join(file).display()))
        };
        if let Some(m) = limits.memory {
            if self.v2 {
                set("memory.max", m.to_string())?;
                // Swap would let the command use more than the limit.
                if let Some(d) = self.dir_with("memory.swap.max") {
                    let _ = write(&d, "memory.swap.max", "0");
                }
            } else {
                set("memory.limit_in_bytes", m.to_string())?;
                if let Some(d) = self.dir_with("memory.memsw.limit_in_bytes") {
                    let _ = write(&d, "memory.memsw.limit_in_bytes", &m.to_string());
                }
            }
        }
        if let Some(p) = limits.pids {
            set("pids.max", p.to_string())?;
        }
        if let Some(c) = limits.cpu {
            const PERIOD: u64 = 100_000;
            let quota = ((c * PERIOD as f64).round() as u64).max(1000);
            if self.v2 {
                set("cpu.max", format!("{quota} {PERIOD}"))?;
            } else {
                set("cpu.cfs_period_us", PERIOD.to_string())?;
                set("cpu.cfs_quota_us", quota.to_string())?;
            }
        }
        Ok(())
    }

    /// The group's directory that holds `file`, by the controller its name
    /// starts with (`memory.max`: the memory controller's), from what is
    /// known of the mounts: no look at the file system. Whether the file
    /// exists (`memory.swap.max` without swap) shows when it is opened.
    fn dir_with(&self, file: &str) -> Option<PathBuf> {
        if self.v2 {
            return self.dirs.first().cloned();
        }
        let controller = file.split('.').next().unwrap_or_default();
        let all = mounts();
        self.dirs
            .iter()
            .find(|d| {
                all.iter()
                    .any(|m| !m.v2 && d.starts_with(&m.at) && m.controllers.iter().any(|c| c == controller))
            })
            .cloned()
    }

    /// Its directories: for the record, so that a reaper in another group
    /// finds them.
    pub fn dirs(&self) -> Vec<String> {
        self.dirs.iter().map(|d| d.display().to_string()).collect()
    }

    /// Which hierarchy: for the record.
    pub fn kind(&self) -> &'static str {
        if self.v2 { "cgroup v2" } else { "cgroup v1" }
    }

    /// On cgroup v1, the files through which the command's process puts
    /// itself into the group at its gate (writing `0` to each hierarchy's
    /// `tasks`): the kernel moves a thread that moves itself without taking
    /// the lock that a move of another process takes for writing, which
    /// waits for an RCU grace period once the machine has been quiet for a
    /// moment (about 10 ms here: a single run, as cron starts one, paid it
    /// every time). `None` on v2, where runws moves the process
    /// ([`Group::admit`]).
    pub fn self_admission(&self) -> Option<Vec<PathBuf>> {
        (!self.v2).then(|| self.dirs.iter().map(|d| d.join("tasks")).collect())
    }

    /// Puts process `pid` (waiting at its gate) into the group.
    pub fn admit(&self, pid: i32) -> io::Result<()> {
        for d in &self.dirs {
            write(d, "cgroup.procs", &pid.to_string())?;
        }
        Ok(())
    }

    /// What the group used.
    pub fn usage(&self) -> Usage {
        let find = |f: &str| self.dir_with(f);
        let mut u = Usage::default();
        if self.v2 {
            u.peak_memory = find("memory.peak").and_then(|d| read_u64(&d, "memory.peak"));
            u.oom_kills = find("memory.events").and_then(|d| keyed(&d, "memory.events", "oom_kill"));
            u.cpu_user_ms =
                find("cpu.stat").and_then(|d| keyed(&d, "cpu.stat", "user_usec")).map(|us| us / 1000);
            u.cpu_system_ms =
                find("cpu.stat").and_then(|d| keyed(&d, "cpu.stat", "system_usec")).map(|us| us / 1000);
        } else {
            u.peak_memory =
                find("memory.max_usage_in_bytes").and_then(|d| read_u64(&d, "memory.max_usage_in_bytes"));
            u.oom_kills =
                find("memory.oom_control").and_then(|d| keyed(&d, "memory.oom_control", "oom_kill"));
            let ns = |f: &str| find(f).and_then(|d| read_u64(&d, f)).map(|ns| ns / 1_000_000);
            u.cpu_user_ms = ns("cpuacct.usage_user");
            u.cpu_system_ms = ns("cpuacct.usage_sys");
        }
        u.peak_pids = find("pids.peak").and_then(|d| read_u64(&d, "pids.peak"));
        u
    }

    /// Removes the group's directories (each must be empty of processes);
    /// returns those that could not be removed.
    pub fn remove(&mut self) -> Vec<PathBuf> {
        remove_dirs(&std::mem::take(&mut self.dirs))
    }

    /// Ends the group when its run ends: reads what it used, then removes
    /// its directories, killing first whatever is left in any that cannot
    /// be removed (a process the command left, or a group it made inside its
    /// own). Most often nothing is left and the end is one read per usage
    /// file and one `rmdir` per hierarchy, without listing a group. The
    /// usage is read before any kill: its peaks are high-water marks, which
    /// a kill does not lower. `own` is not counted among the killed: it is
    /// runws's own child (a sandbox's init still ending once it reported the
    /// command's end is not something the command left behind).
    pub fn end(mut self, own: i32) -> Ended {
        let usage = self.usage();
        let busy: Vec<PathBuf> = std::mem::take(&mut self.dirs)
            .into_iter()
            .filter(|d| fs::remove_dir(d).is_err_and(|e| e.kind() != io::ErrorKind::NotFound))
            .collect();
        if busy.is_empty() {
            return Ended { killed: 0, usage, left: Vec::new() };
        }
        let killed = kill_members(&busy, self.v2, own);
        Ended { killed, usage, left: remove_dirs(&busy) }
    }
}

/// A group ended ([`Group::end`]).
pub struct Ended {
    /// Processes killed (the command's own process not counted).
    pub killed: u64,
    pub usage: Usage,
    /// Directories that could not be removed.
    pub left: Vec<PathBuf>,
}

impl Drop for Group {
    fn drop(&mut self) {
        if !self.dirs.is_empty() {
            kill_members(&self.dirs, self.v2, 0);
            self.remove();
        }
    }
}

/// Removes each group's directory, the groups the command made inside it
/// first; returns the directories that could not be removed.
fn remove_dirs(dirs: &[PathBuf]) -> Vec<PathBuf> {
    let mut left = Vec::new();
    for top in dirs {
        // Most often the group is empty and has no group inside it: gone at
        // the first try, without a listing.
        match fs::remove_dir(top) {
            Ok(()) => continue,
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(_) => {}
        }
        // Deepest first: a group is removed only once its children are.
        for d in subtree(top).iter().rev() {
            // A process that was just killed leaves the group a moment later:
            // retry, waiting a little longer each time (about 0.4 s in all).
            for i in 0..200u64 {
                match fs::remove_dir(d) {
                    Err(e) if e.raw_os_error() == Some(nix::libc::EBUSY) => {
                        std::thread::sleep(Duration::from_micros(100 * (i + 1).min(20)))
                    }
                    _ => break,
                }
            }
            if d.is_dir() {
                left.push(d.clone());
            }
        }
    }
    left
}

/// `dir` and every group below it, parents before their children: the
/// command may make groups inside its own (it may write to its group's
/// directory) and move into them, where `cgroup.procs` of its group does
/// not list it. Bounded, in depth and in number.
fn subtree(dir: &Path) -> Vec<PathBuf> {
    const MOST: usize = 4096;
    let mut out = vec![dir.to_path_buf()];
    let mut i = 0;
    while i < out.len() && out.len() < MOST {
        let d = out[i].clone();
        i += 1;
        if d.components().count() > dir.components().count() + 32 {
            continue;
        }
        // cgroupfs counts a directory's links as 2 plus its subdirectories:
        // a group with none is not listed (its 10 to 40 control files).
        if fs::symlink_metadata(&d).is_ok_and(|m| m.nlink() == 2) {
            continue;
        }
        let Ok(entries) = fs::read_dir(&d) else { continue };
        for e in entries.flatten() {
            // cgroupfs has no links; a directory entry's type is not followed.
            if e.file_type().is_ok_and(|t| t.is_dir()) && out.len() < MOST {
                out.push(e.path());
            }
        }
    }
    out
}

fn kill_members(dirs: &[PathBuf], v2: bool, own: i32) -> u64 {
    let Some(first) = dirs.first() else { return 0 };
    // Every group the run's processes may be in: on v1 a member may have
    // been moved out of one hierarchy's group and not another's.
    let groups = || -> Vec<PathBuf> { dirs.iter().flat_map(|d| subtree(d)).collect() };
    if v2 {
        let n = groups().iter().flat_map(|g| members(g)).filter(|&p| p != own).count() as u64;
        // `cgroup.kill` ends the whole subtree.
        if write(first, "cgroup.kill", "1").is_ok() {
            for _ in 0..500 {
                if groups().iter().all(|g| members(g).is_empty()) {
                    break;
                }
                std::thread::sleep(Duration::from_millis(2));
            }
            return n;
        }
    }
    let mut signalled = std::collections::BTreeSet::new();
    for _ in 0..500 {
        let mut any = false;
        for g in groups() {
            for pid in members(&g) {
                any = true;
                if signal_member(pid, &g) {
                    signalled.insert(pid);
                }
            }
        }
        if !any {
            break;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    signalled.iter().filter(|&&p| p != own).count() as u64
}

fn members(dir: &Path) -> Vec<i32> {
    read_kernel_text(dir.join("cgroup.procs"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

/// SIGKILL to `pid` through a pidfd opened first and then checked to be a
/// member of the group in `dir` still: a pid reused since the group was
/// listed is never signalled.
fn signal_member(pid: i32, dir: &Path) -> bool {
    let Some(p) = rustix::process::Pid::from_raw(pid) else { return false };
    let Ok(fd) = rustix::process::pidfd_open(p, rustix::process::PidfdFlags::empty()) else { return false };
    if !members(dir).contains(&pid) {
        return false;
    }
    rustix::process::pidfd_send_signal(&fd, rustix::process::Signal::KILL).is_ok()
}

/// The group a killed runws left for run `run_id` of `root`: every process
/// in it killed, then removed. Returns how many were killed, or `None`
/// when there was no group.
pub fn reap(root: &Path, run_id: &str, recorded: &[String]) -> Option<u64> {
    let name = name(root, run_id);
    let mut dirs: Vec<PathBuf> = Vec::new();
    let all = mounts();
    let mut v2 = false;
    // Where the run's runws made it, as recorded (the reaper may run in
    // another group than that runws did): only a directory of exactly the
    // run's name, in a mounted hierarchy, by a path without `..`.
    for r in recorded {
        let p = Path::new(r);
        let plain = p.is_absolute() && p.components().all(|c| !matches!(c, std::path::Component::ParentDir));
        let named = p.file_name().is_some_and(|n| *n == *name.as_str());
        if let (true, true, Some(m)) = (plain, named, all.iter().find(|m| p.starts_with(&m.at) && p != m.at))
            && p.is_dir()
            && !dirs.contains(&p.to_path_buf())
        {
            v2 |= m.v2;
            dirs.push(p.to_path_buf());
        }
    }
    for c in ["memory", "pids", "cpu", "cpuacct"] {
        if let Ok((is_v2, found)) = place(&name, &[c]) {
            v2 |= is_v2;
            for d in found {
                if !dirs.contains(&d) && d.is_dir() {
                    dirs.push(d);
                }
            }
        }
    }
    if dirs.is_empty() {
        return None;
    }
    let killed = kill_members(&dirs, v2, 0);
    remove_dirs(&dirs);
    Some(killed)
}

/// `--cpu`: cores, a positive number (fractions allowed), at most 4096.
pub fn parse_cores(s: &str) -> Result<f64, String> {
    let c: f64 = s.trim().parse().map_err(|_| format!("`{s}` is not a number of cores (1, 0.5, 2.5)"))?;
    if !(c.is_finite() && (0.01..=4096.0).contains(&c)) {
        return Err(format!("`{s}` cores: give at least 0.01 and at most 4096"));
    }
    Ok(c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_differ_by_root_and_run() {
        let a = name(Path::new("/a"), "r");
        assert_ne!(a, name(Path::new("/b"), "r"));
        assert_ne!(a, name(Path::new("/a"), "s"));
        assert!(a.starts_with("runws-") && a.ends_with("-r"));
    }

    #[test]
    fn cores_parse_and_are_bounded() {
        assert_eq!(parse_cores("1.5"), Ok(1.5));
        assert!(parse_cores("0").is_err());
        assert!(parse_cores("-1").is_err());
        assert!(parse_cores("nan").is_err());
        assert!(parse_cores("x").is_err());
    }
}
