//! `runws audit`: run a command as it would run anyway, with everything
//! outside its run directory behind a copy-on-write layer, then report what
//! it created, changed or deleted there.
//!
//! PID 1 of the audit's namespaces (see `init`) builds a second root:
//!
//! * every file system mounted on the machine (the root, `/tmp`, `/home`,
//!   `/dev/shm`, ...) is an overlay: the real mount as the lower layer, a
//!   directory of a private tmpfs as the upper layer. Reads see the real
//!   files; writes, deletions and renames land in the upper layer only;
//! * `/proc` is fresh (the audit has its own PID namespace), `/dev` is the
//!   real one (device nodes, not files), `/sys` is the real one, read-only;
//! * a mount of a single file (a container's `/etc/resolv.conf`) becomes a
//!   private copy, compared with the original afterwards;
//! * the run directory is the real one: the workspace is not audited;
//! * a mount that cannot be an overlay is made read-only and listed as not
//!   audited, so that even then nothing reaches it.
//!
//! The command runs chrooted into that root with runws's own environment
//! (real `HOME`, caches, config paths), so it writes where it would write
//! without runws. When it exits, PID 1 kills what it left behind, walks the
//! upper layers (see [`diff`]) and writes `logs/audit.json` in the run; runws
//! records it in the manifest and prints it. The tmpfs holding the layers
//! lives in the audit's mount namespace only and vanishes with it.
//!
//! An audit is an observation tool, not a boundary: as root, the command
//! keeps its capabilities (it runs as it would have) and could leave the
//! chroot on purpose. Against a tool that merely writes where its defaults
//! point, nothing it writes outside the run reaches the real file system.

pub mod diff;

use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};

use nix::fcntl::OFlag;
use nix::mount::MsFlags;
use nix::sys::stat::Mode;

use super::Plan;
use super::kernel::Real;
use super::mounts::{self, set_read_only};
use super::refused::Refused;
use crate::fsx::Dir;
use crate::fsx::walk::{Entry, Failure, Kind, Order, Visit, Visitor, Walk};

const P: &str = "copy-on-write layer";

pub use crate::manifest::sandbox::{AuditReport as Report, Change, NotAudited};

/// One overlay: the real mount point and its upper layer.
struct Layer {
    mount_point: PathBuf,
    lower: OwnedFd,
    upper: PathBuf,
}

/// A single-file mount replaced by a private copy.
struct FileCopy {
    original: PathBuf,
    copy: PathBuf,
}

/// The audit's root, ready for the command.
pub struct Staged {
    root: PathBuf,
    layers: Vec<Layer>,
    files: Vec<FileCopy>,
    not_audited: Vec<NotAudited>,
    logs: Dir,
    staging: PathBuf,
    staging_fd: OwnedFd,
    userxattr: bool,
    /// Every mount point of the machine, and the run directory: a
    /// directory walk for a skeleton stops at each.
    points: Vec<PathBuf>,
    /// Skeleton tmpfs mounts (target, the real directory), compared entry
    /// by entry with the real directory afterwards.
    skeletons: Vec<(PathBuf, PathBuf)>,
}

/// One line of /proc/self/mountinfo: the mount point and the type.
struct MountEntry {
    point: PathBuf,
    fstype: String,
}

fn mount_table() -> Result<Vec<MountEntry>, Refused> {
    let table = crate::fsx::mount_table()
        .map_err(|e| Refused::new(P, format!("cannot read /proc/self/mountinfo: {e}")))?;
    let mut entries: Vec<MountEntry> = Vec::new();
    for line in table {
        // A later mount on the same point hides the earlier one.
        entries.retain(|e| e.point != line.point);
        entries.push(MountEntry { point: line.point, fstype: line.fstype });
    }
    entries.sort_by_key(|e| e.point.components().count());
    Ok(entries)
}

fn bind(source: &Path, target: &Path, recursive: bool) -> Result<(), Refused> {
    let mut flags = MsFlags::MS_BIND;
    if recursive {
        flags |= MsFlags::MS_REC;
    }
    nix::mount::mount(Some(source), target, None::<&str>, flags, None::<&str>)
        .map_err(|e| Refused::new(P, format!("cannot bind `{}`: {e}", source.display())))
}

fn inside(root: &Path, p: &Path) -> PathBuf {
    root.join(p.strip_prefix("/").unwrap_or(p))
}

fn fd_path(fd: &OwnedFd) -> String {
    format!("/proc/self/fd/{}", fd.as_raw_fd())
}

/// Builds the audit's root in this (new, private) mount namespace.
pub fn stage(plan: &Plan, fresh_proc: bool) -> Result<Staged, Refused> {
    mounts::make_private(&Real)?;
    let run = &plan.run_dir;
    let logs = Dir::open(run.join("logs")).map_err(|e| Refused::new(P, e.to_string()))?;
    let table = mount_table()?;
    // The layers live on a tmpfs mounted over the run's own tmp/ in this
    // namespace only: a separate file system, so no layer overlaps a lower
    // one, and the command (which sees the real run directory) never sees it.
    let staging = run.join("tmp");
    mounts::tmpfs(&Real, &staging, 0o700)?;
    let staging_fd: OwnedFd = nix::fcntl::open(&staging, OFlag::O_PATH | OFlag::O_CLOEXEC, Mode::empty())
        .map_err(|e| Refused::new(P, format!("cannot open the staging area: {e}")))?;
    let root = staging.join("root");
    std::fs::create_dir(&root).map_err(|e| Refused::new(P, format!("cannot create the audit root: {e}")))?;
    let mut points: Vec<PathBuf> = table.iter().map(|e| e.point.clone()).collect();
    points.push(run.clone());
    let mut staged = Staged {
        root: root.clone(),
        layers: Vec::new(),
        files: Vec::new(),
        not_audited: Vec::new(),
        logs,
        staging: staging.clone(),
        staging_fd,
        userxattr: plan.user_namespace,
        points,
        skeletons: Vec::new(),
    };
    let special = [Path::new("/proc"), Path::new("/sys"), Path::new("/dev")];
    for e in &table {
        let p = &e.point;
        // The workspace is not audited; /proc, /sys and /dev (with what is
        // mounted beneath them) are placed after the layers.
        if p.starts_with(run) || special.iter().any(|s| p.starts_with(s)) {
            continue;
        }
        let target = inside(&root, p);
        let meta = match std::fs::metadata(p) {
            Ok(m) => m,
            Err(_) => continue,
        };
        if !meta.is_dir() {
            staged.single_file(p, &target)?;
            continue;
        }
        if let Err(why) = staged.layer_dir(p, &target) {
            if p == Path::new("/") {
                return Err(why);
            }
            // Never writable: bind it read-only and say it was not audited.
            bind(p, &target, false).and_then(|()| set_read_only(&Real, &target, true, false))?;
            staged.not_audited.push(NotAudited { path: p.display().to_string(), why: why.why });
        }
    }
    // /dev: the real device nodes; its tmpfs mounts (/dev/shm) get layers
    // above, so it is bound first.
    bind(Path::new("/dev"), &inside(&root, Path::new("/dev")), true)?;
    for e in &table {
        if e.point.starts_with("/dev") && e.point != Path::new("/dev") && e.fstype == "tmpfs" {
            let target = inside(&root, &e.point);
            if let Err(why) = staged.overlay(&e.point, &target) {
                staged.not_audited.push(NotAudited { path: e.point.display().to_string(), why: why.why });
            }
        }
    }
    let sys = inside(&root, Path::new("/sys"));
    bind(Path::new("/sys"), &sys, true)?;
    set_read_only(&Real, &sys, true, true)?;
    let proc_target = inside(&root, Path::new("/proc"));
    if fresh_proc {
        nix::mount::mount(
            Some("proc"),
            &proc_target,
            Some("proc"),
            MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
            None::<&str>,
        )
        .map_err(|e| Refused::new("private /proc", format!("cannot mount proc: {e}")))?;
    } else {
        bind(Path::new("/proc"), &proc_target, true)?;
    }
    // The workspace itself is real (without what this namespace mounted on it).
    bind(run, &inside(&root, run), false)?;
    Ok(staged)
}

impl Staged {
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Layers the directory `src` at `target`. When the kernel refuses
    /// (an unprivileged overlay may not cover mounts it inherited, such as
    /// everything mounted beneath `/`), `target` becomes a skeleton instead:
    /// a tmpfs with each subdirectory of `src` layered on its own, each file
    /// bound read-only, each symlink copied. New entries made directly in a
    /// skeleton land in the tmpfs and are reported; the skeleton is writable
    /// only when the caller may write to `src` (`/tmp` is, `/` is not).
    fn layer_dir(&mut self, src: &Path, target: &Path) -> Result<(), Refused> {
        let why = match self.overlay(src, target) {
            Ok(()) => return Ok(()),
            Err(why) => why,
        };
        self.skeleton(src, target, why)?;
        let dir = Dir::open(src).map_err(|e| Refused::new(P, cannot_list_error(e)))?;
        let mut walk = Skeleton { staged: self, src, target, failed: None };
        Walk::new().order(Order::AsListed).run_with(&dir, &mut walk)
    }

    /// Makes `target` the skeleton of `src`, which `why` says cannot be
    /// layered as a whole: only worth it when a mount point lies below.
    fn skeleton(&mut self, src: &Path, target: &Path, why: Refused) -> Result<(), Refused> {
        if !self.points.iter().any(|p| p != src && p.starts_with(src)) {
            return Err(why);
        }
        let mut mode = std::fs::metadata(src)
            .map(|m| std::os::unix::fs::PermissionsExt::mode(&m.permissions()) & 0o7777)
            .unwrap_or(0o755);
        if nix::unistd::access(src, nix::unistd::AccessFlags::W_OK).is_err() {
            mode &= !0o222;
        }
        mounts::tmpfs(&Real, target, mode)?;
        self.skeletons.push((target.to_path_buf(), src.to_path_buf()));
        Ok(())
    }

    fn overlay(&mut self, point: &Path, target: &Path) -> Result<(), Refused> {
        let i = self.layers.len();
        let lower =
            nix::fcntl::open(point, OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC, Mode::empty())
                .map_err(|e| Refused::new(P, format!("cannot open `{}`: {e}", point.display())))?;
        for d in ["u", "w"] {
            let dir = self.staging.join(format!("{d}{i}"));
            if !dir.exists() {
                std::fs::create_dir(&dir)
                    .map_err(|e| Refused::new(P, format!("cannot create `{}`: {e}", dir.display())))?;
            }
        }
        // Descriptor paths keep commas and colons in real paths out of the
        // option string.
        let s = fd_path(&self.staging_fd);
        let mut opts = format!("lowerdir={},upperdir={s}/u{i},workdir={s}/w{i}", fd_path(&lower));
        if self.userxattr {
            opts.push_str(",userxattr");
        }
        nix::mount::mount(Some("overlay"), target, Some("overlay"), MsFlags::empty(), Some(opts.as_str()))
            .map_err(|e| Refused::new(P, format!("cannot layer `{}`: {e}", point.display())))?;
        let upper = self.staging.join(format!("u{i}"));
        self.layers.push(Layer { mount_point: point.to_path_buf(), lower, upper });
        Ok(())
    }

    fn single_file(&mut self, original: &Path, target: &Path) -> Result<(), Refused> {
        let copy = self.staging.join(format!("f{}", self.files.len() + self.not_audited.len()));
        match std::fs::copy(original, &copy) {
            Ok(_) => {
                bind(&copy, target, false)?;
                self.files.push(FileCopy { original: original.to_path_buf(), copy });
            }
            Err(e) => {
                bind(original, target, false).and_then(|()| set_read_only(&Real, target, true, false))?;
                self.not_audited.push(NotAudited {
                    path: original.display().to_string(),
                    why: format!("cannot copy: {e}"),
                });
            }
        }
        Ok(())
    }

    /// Walks the layers and writes `logs/audit.json`. Runs after every
    /// process of the command is gone.
    pub fn finish(self, _run: &Path) -> Result<(), String> {
        let mut changes = Vec::new();
        for layer in &self.layers {
            diff::walk(&layer.upper, &layer.lower, &layer.mount_point, &mut changes)
                .map_err(|e| e.to_string())?;
        }
        for (target, src) in &self.skeletons {
            diff::compare_skeleton(target, src, &mut changes);
        }
        for f in &self.files {
            if let Some(c) = diff::compare_file(&f.copy, &f.original) {
                changes.push(c);
            }
        }
        changes.sort_by(|a, b| a.path.cmp(&b.path));
        let report = Report { changes, not_audited: self.not_audited };
        let bytes = serde_json::to_vec_pretty(&report).map_err(|e| e.to_string())?;
        self.logs.write_atomic("audit.json", &bytes, 0o644, true).map_err(|e| e.to_string())
    }
}

/// The walk that fills a skeleton (see `Staged::layer_dir`): each
/// subdirectory is layered on its own (or made a skeleton in turn and
/// entered), each file bound read-only, each symlink copied. What fails for
/// one entry is listed as not audited; what fails for a whole directory
/// below the top lists that directory and passes over the rest of it; at
/// the top it is the walk's error.
struct Skeleton<'a> {
    staged: &'a mut Staged,
    src: &'a Path,
    target: &'a Path,
    /// A directory (below `src`) given up on: the rest of it is passed over.
    failed: Option<PathBuf>,
}

impl Skeleton<'_> {
    fn not_audited(&mut self, path: &Path, why: String) {
        self.staged.not_audited.push(NotAudited { path: path.display().to_string(), why });
    }

    /// The directory holding `rel` cannot be finished: below the top it is
    /// not audited and the rest of it is passed over.
    fn give_up(&mut self, rel: &Path, why: Refused) -> Result<Visit, Refused> {
        match rel.parent().filter(|p| !p.as_os_str().is_empty()) {
            Some(parent) => {
                self.not_audited(&self.src.join(parent), why.why);
                self.failed = Some(parent.to_path_buf());
                Ok(Visit::Skip)
            }
            None => Err(why),
        }
    }
}

impl Visitor for Skeleton<'_> {
    type Error = Refused;

    fn entry(&mut self, e: &Entry<'_>) -> Result<Visit, Refused> {
        if let Some(failed) = &self.failed {
            if e.rel.starts_with(failed) {
                return Ok(Visit::Skip);
            }
            self.failed = None;
        }
        let (s, t) = (e.path(), self.target.join(e.rel));
        let made = match e.kind() {
            Kind::Gone => return Ok(Visit::Skip),
            Kind::Dir => {
                if let Err(err) = std::fs::create_dir(&t) {
                    return self
                        .give_up(e.rel, Refused::new(P, format!("cannot create `{}`: {err}", t.display())));
                }
                let special = ["/proc", "/sys", "/dev"].iter().any(|x| s == Path::new(x));
                if special || self.staged.points.contains(&s) {
                    return Ok(Visit::Skip);
                }
                match self.staged.overlay(&s, &t) {
                    Ok(()) => return Ok(Visit::Skip),
                    Err(why) => match self.staged.skeleton(&s, &t, why) {
                        Ok(()) => return Ok(Visit::Descend),
                        Err(why) => Err(why),
                    },
                }
            }
            Kind::Symlink => std::fs::read_link(&s)
                .and_then(|l| std::os::unix::fs::symlink(l, &t))
                .map_err(|e| Refused::new(P, format!("cannot copy the symlink `{}`: {e}", s.display()))),
            Kind::File | Kind::Special => std::fs::File::create(&t)
                .map_err(|e| Refused::new(P, format!("cannot create `{}`: {e}", t.display())))
                .and_then(|_| bind(&s, &t, false))
                .and_then(|()| set_read_only(&Real, &t, true, false)),
        };
        if let Err(why) = made {
            self.not_audited(&s, why.why);
        }
        Ok(Visit::Skip)
    }

    fn failed(&mut self, failure: Failure) -> Result<(), Refused> {
        let why = match failure {
            // Gone, or unreadable: left out, as `ls` would.
            Failure::Stat { .. } => return Ok(()),
            Failure::List { path, error } => (path, cannot_list_error(error)),
            Failure::Open { path, errno } => {
                let why = cannot_list(&path, std::io::Error::from(errno));
                (path, why)
            }
            other => (other.path().to_path_buf(), other.into_error().to_string()),
        };
        let (path, why) = why;
        if path == self.src {
            return Err(Refused::new(P, why));
        }
        self.not_audited(&path, why);
        Ok(())
    }
}

fn cannot_list(path: &Path, e: impl std::fmt::Display) -> String {
    format!("cannot list `{}`: {e}", path.display())
}

/// The message of a listing that failed, as the skeleton reports it.
fn cannot_list_error(error: crate::error::Error) -> String {
    match error {
        crate::error::Error::Io { path, source, .. } => cannot_list(&path, source),
        other => other.to_string(),
    }
}

impl From<crate::error::Error> for Refused {
    fn from(e: crate::error::Error) -> Refused {
        Refused::new(P, e.to_string())
    }
}

/// The report as a person reads it.
pub fn render(report: &Report, run_id: &str) -> String {
    let n = report.changes.len();
    let mut out = if n == 0 {
        format!("runws: audit of run `{run_id}`: no changes outside the run\n")
    } else {
        format!(
            "runws: audit of run `{run_id}`: {n} change{} outside the run (none reached the file system)\n",
            if n == 1 { "" } else { "s" }
        )
    };
    for c in &report.changes {
        let what = if c.what.is_empty() { String::new() } else { format!(" ({})", c.what.join(", ")) };
        out.push_str(&format!("  {:<8} {:<7} {}{what}\n", c.change, c.kind, c.path));
    }
    for s in &report.not_audited {
        out.push_str(&format!("  not audited (read-only for the command): {}: {}\n", s.path, s.why));
    }
    out
}
