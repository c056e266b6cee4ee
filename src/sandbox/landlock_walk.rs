//! What a Landlock sandbox may read: the walk of `/` around the hidden
//! paths (the homes, ROOT, root's secrets, `--hide`), and the rules of a
//! run it completes ([`rules`]); on a thread started before the run exists,
//! each grant added to the kernel ruleset as it is found ([`Walk`]).
//!
//! Landlock grants access beneath a path, never removes it below a granted
//! one, so a hidden path cannot be carved out of a rule on `/`: instead
//! every *sibling* hierarchy on the way down to it is granted, and the
//! hidden path and its ancestors are not. Each entry is opened from the
//! descriptor of the directory it was listed in, following no link, so
//! that nothing swapped in after the listing is granted instead.

use std::ffi::OsStr;
use std::os::fd::{AsFd, BorrowedFd};
use std::path::{Path, PathBuf};

use super::landlock::{ABI, DEVICES, Rules, created, descriptor, fill, open_rule_path, open_unlinked};
use super::refused::Refused;

/// The rules of a run: everything but `hidden` (and `/dev`, but for
/// [`DEVICES`]) readable, `granted` readable again inside them, `write`
/// writable. Every path is resolved already (no symlink in it); one that
/// does not exist grants nothing.
pub fn rules(hidden: &[PathBuf], granted: &[PathBuf], write: &[PathBuf], deny_tcp: bool) -> Rules {
    complete(walk(hidden, None), granted, write, deny_tcp)
}

/// The first part of [`rules`], which needs only the hidden paths: every
/// hierarchy under `/` that holds none of them.
/// With a `sink`, each grant is also added to its ruleset as it is found.
fn walk(hidden: &[PathBuf], sink: Option<Sink>) -> Walked {
    let mut hidden: Vec<PathBuf> = hidden.to_vec();
    // `/dev` is hidden but for the devices granted below.
    hidden.push(PathBuf::from("/dev"));
    hidden.retain(|h| h != Path::new("/"));
    let mut found = Found { sink, ..Found::default() };
    readable(Path::new("/"), None, &hidden, &hidden, &mut found);
    Walked { found, hidden }
}

/// What [`walk`] found, and the hidden paths it kept out.
struct Walked {
    found: Found,
    hidden: Vec<PathBuf>,
}

/// The rest of [`rules`]: the granted paths, the writable ones, the devices.
fn complete(walked: Walked, granted: &[PathBuf], write: &[PathBuf], deny_tcp: bool) -> Rules {
    let exists = |p: &&PathBuf| std::fs::symlink_metadata(p).is_ok();
    let Walked { mut found, hidden } = walked;
    for g in granted.iter().filter(exists).cloned() {
        if found.covers(&g) {
            continue;
        }
        // A granted directory that holds a hidden path (`--ro` of a
        // directory with a `--hide` below it, or above a home or ROOT) is
        // granted as `/` is: every sibling on the way down, never the
        // hidden path.
        let below: Vec<PathBuf> = hidden.iter().filter(|h| h.starts_with(&g) && **h != g).cloned().collect();
        if !below.is_empty() {
            readable(&g, None, &below, &hidden, &mut found);
            continue;
        }
        let dir = g.is_dir();
        found.grant(g, dir, None);
    }
    let Found { read, mut files, .. } = found;
    // By bytes, as the ruleset's filling looks them up.
    files.sort_by(|a, b| a.as_os_str().cmp(b.as_os_str()));
    let devices = DEVICES.iter().map(PathBuf::from).filter(|d| d.exists()).collect();
    Rules { read, files, write: writable(write), devices, deny_tcp }
}

/// The paths of `write` that exist (one that does not grants nothing).
pub fn writable(write: &[PathBuf]) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> =
        write.iter().filter(|p| std::fs::symlink_metadata(p).is_ok()).cloned().collect();
    out.dedup();
    out
}

/// What [`readable`] grants: every path, and which of them are not
/// directories.
#[derive(Default)]
struct Found {
    read: Vec<PathBuf>,
    files: Vec<PathBuf>,
    /// `read` again, to find a path's granted ancestor by lookups (a
    /// path-by-path comparison with every grant made the rules of a root
    /// run, about 180, cost milliseconds).
    granted: std::collections::HashSet<PathBuf>,
    /// On the walk's thread: the ruleset each grant is added to at once.
    sink: Option<Sink>,
}

impl Found {
    /// Whether `p` or one of its ancestors is granted already.
    fn covers(&self, p: &Path) -> bool {
        p.ancestors().any(|a| self.granted.contains(a))
    }

    /// Grants `p`; `at` is the directory it was listed in and its name
    /// there, from which a sink opens it (else by its path).
    fn grant(&mut self, p: PathBuf, dir: bool, at: Option<(BorrowedFd<'_>, &OsStr)>) {
        if self.covers(&p) {
            return;
        }
        if let Some(sink) = self.sink.as_mut() {
            sink.add(&p, dir, at);
        }
        if !dir {
            self.files.push(p.clone());
        }
        self.granted.insert(p.clone());
        self.read.push(p);
    }
}

/// A ruleset that grants are added to as [`readable`] finds them, each
/// opened from the directory descriptor it was listed through (one name,
/// no link followed), so that no path is looked up twice and nothing
/// swapped in between the listing and the rule can be granted instead.
struct Sink {
    ruleset: Option<::landlock::RulesetCreated>,
    /// Why a rule could not be added; the ruleset is then not used.
    failed: Option<Refused>,
}

impl Sink {
    fn add(&mut self, p: &Path, dir: bool, at: Option<(BorrowedFd<'_>, &OsStr)>) {
        use ::landlock::{AccessFs, PathBeneath, RulesetCreatedAttr};
        use rustix::fs::{Mode, OFlags};
        let Some(ruleset) = self.ruleset.take() else { return };
        let opened = match at {
            Some((parent, name)) => {
                let flags = OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC;
                rustix::fs::openat(parent, name, flags, Mode::empty()).map_err(std::io::Error::from)
            }
            None => open_rule_path(p),
        };
        // Gone since it was listed: it grants nothing.
        let Ok(fd) = opened else {
            self.ruleset = Some(ruleset);
            return;
        };
        // A file's rule takes only a file's rights (the crate looks too,
        // should the entry have changed its kind since it was listed).
        let read = AccessFs::from_read(ABI);
        let access = if dir { read } else { read & AccessFs::from_file(ABI) };
        match ruleset.add_rule(PathBeneath::new(fd, access)) {
            Ok(r) => self.ruleset = Some(r),
            Err(e) => self.failed = Some(Refused::new("Landlock", e.to_string())),
        }
    }
}

/// Whether `p` is `dir` or lies below it, for resolved paths (absolute, no
/// `.`, `..` or repeated `/`, as every path here is): compared as bytes,
/// not component by component, which made up most of the time the rules
/// took to compute.
fn within(p: &Path, dir: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let (p, d) = (p.as_os_str().as_bytes(), dir.as_os_str().as_bytes());
    let d = d.strip_suffix(b"/").unwrap_or(d);
    p.len() >= d.len() && p.starts_with(d) && (p.len() == d.len() || p[d.len()] == b'/' || d.is_empty())
}

/// Adds to `out` every hierarchy under `dir` that holds no hidden path:
/// `dir` itself when none is below it, else each entry but the hidden ones,
/// going down into those that hold one. `at` is the directory `dir` was
/// listed in and its name there (`None`: opened by its path, which must
/// lead through no link). A symlink is followed to what it names; one that
/// leads into or above a path of `never` (every hidden path, `hidden` being
/// those below a directory granted again) grants nothing (its target, where
/// readable, is granted by its own name).
fn readable(
    dir: &Path,
    at: Option<(BorrowedFd<'_>, &OsStr)>,
    hidden: &[PathBuf],
    never: &[PathBuf],
    out: &mut Found,
) {
    let above_hidden = |p: &Path| hidden.iter().any(|h| within(h, p) && h != p);
    let is_hidden = |p: &Path| hidden.iter().any(|h| within(p, h));
    if !above_hidden(dir) {
        if !is_hidden(dir) {
            out.grant(dir.to_path_buf(), true, at);
        }
        return;
    }
    let Ok((fd, listed)) = listing(dir, at) else { return };
    for (name, kind) in listed {
        let path = dir.join(&name);
        if kind == rustix::fs::FileType::Symlink {
            let Ok(target) = std::fs::canonicalize(&path) else { continue };
            if never.iter().any(|h| within(&target, h) || within(h, &target)) {
                continue;
            }
            let dir = target.is_dir();
            out.grant(target, dir, None);
            continue;
        }
        if is_hidden(&path) {
            continue;
        }
        let at = Some((fd.as_fd(), name.as_os_str()));
        if kind == rustix::fs::FileType::Directory {
            readable(&path, at, hidden, never, out);
        } else {
            out.grant(path, false, at);
        }
    }
}

/// The entries of `dir` (opened from `at`, or by its path following no
/// link), sorted by name, each with its kind: the listing's own, else one
/// look (a file system that does not say); and the directory's descriptor.
fn listing(
    dir: &Path,
    at: Option<(BorrowedFd<'_>, &OsStr)>,
) -> std::io::Result<(std::os::fd::OwnedFd, Vec<(std::ffi::OsString, rustix::fs::FileType)>)> {
    use rustix::fs::{AtFlags, FileType, Mode, OFlags};
    use std::os::unix::ffi::OsStrExt;
    let flags = OFlags::RDONLY | OFlags::DIRECTORY;
    let fd = match at {
        Some((parent, name)) => {
            rustix::fs::openat(parent, name, flags | OFlags::NOFOLLOW | OFlags::CLOEXEC, Mode::empty())?
        }
        None => open_unlinked(dir, flags)?,
    };
    let mut buf = [std::mem::MaybeUninit::<u8>::uninit(); 8192];
    let mut raw = rustix::fs::RawDir::new(&fd, &mut buf);
    let mut out = Vec::new();
    while let Some(entry) = raw.next() {
        let entry = entry?;
        let name = entry.file_name().to_bytes();
        if name == b"." || name == b".." {
            continue;
        }
        let name = OsStr::from_bytes(name).to_os_string();
        let kind = match entry.file_type() {
            FileType::Unknown => match rustix::fs::statat(&fd, &name, AtFlags::SYMLINK_NOFOLLOW) {
                Ok(st) => FileType::from_raw_mode(st.st_mode),
                Err(_) => continue,
            },
            kind => kind,
        };
        out.push((name, kind));
    }
    out.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
    Ok((fd, out))
}

/// The walk of `/` around the hidden paths, and the rules it found added to
/// a new ruleset, on a thread started before the run exists (only the
/// hidden paths are needed: the homes, ROOT, root's secrets, `--hide`),
/// which runws's making of the run directory and first record hide. The
/// run's own paths are handed to the thread once they exist
/// ([`Walk::grant`]); it adds them last, while the command's process is
/// created, and runws waits for it only before it opens the command's gate
/// ([`Filling::finish`]). The command enforces the ruleset past its gate:
/// should it ever do so early, a ruleset that only grants would deny more,
/// never less.
pub struct Walk {
    hidden: Vec<PathBuf>,
    deny_tcp: bool,
    /// A second descriptor of the ruleset the thread fills: the command's.
    ruleset: std::os::fd::OwnedFd,
    run_paths: std::sync::mpsc::SyncSender<RunPaths>,
    thread: std::thread::JoinHandle<Result<(), Refused>>,
}

/// The run's own paths, granted once they exist: readable, writable.
struct RunPaths {
    granted: Vec<PathBuf>,
    write: Vec<PathBuf>,
}

impl Walk {
    /// Starts the walk, for a run that hides `hidden` (resolved); `None`
    /// when no ruleset can be made (the run then makes it itself, and says
    /// why not).
    pub fn start(hidden: Vec<PathBuf>, deny_tcp: bool) -> Option<Walk> {
        use nix::sys::signal::{SigSet, SigmaskHow, pthread_sigmask};
        let paths = hidden.clone();
        let filled = created(deny_tcp).ok()?;
        let ruleset = descriptor(filled.try_clone().ok()?).ok()?;
        let (run_paths, from_run) = std::sync::mpsc::sync_channel::<RunPaths>(1);
        // Started before runws blocks the signals it reads from its
        // signalfd: the thread is made with every signal blocked, so that
        // none is delivered to it instead (it inherits this thread's mask).
        let mut before = SigSet::empty();
        pthread_sigmask(SigmaskHow::SIG_BLOCK, Some(&SigSet::all()), Some(&mut before)).ok()?;
        let thread = std::thread::Builder::new().name("landlock-walk".into()).spawn(move || {
            let mut walked = walk(&paths, Some(Sink { ruleset: Some(filled), failed: None }));
            let lost = || Refused::new("Landlock", "the walk of / lost its ruleset");
            let Sink { ruleset, failed } = walked.found.sink.take().ok_or_else(lost)?;
            if let Some(why) = failed {
                return Err(why);
            }
            let filled = ruleset.ok_or_else(lost)?;
            let added = walked.found.read.len();
            // No paths come when the run went another way (it was not
            // started, or made its ruleset itself): this ruleset is then
            // never enforced.
            let run = from_run.recv().map_err(|_| Refused::new("Landlock", "the run's paths never came"))?;
            let rules = complete(walked, &run.granted, &run.write, deny_tcp);
            fill(filled, &rules, added).map(drop)
        });
        let _ = pthread_sigmask(SigmaskHow::SIG_SETMASK, Some(&before), None);
        Some(Walk { hidden, deny_tcp, ruleset, run_paths, thread: thread.ok()? })
    }

    /// Whether this walk is the one for a run that hides `hidden` with
    /// these switches (else the run makes its ruleset anew).
    pub fn serves(&self, hidden: &[PathBuf], deny_tcp: bool) -> bool {
        self.hidden == hidden && self.deny_tcp == deny_tcp
    }

    /// Hands the thread the run's paths, `granted` readable and `write`
    /// writable; returns the ruleset's descriptor for the command's process,
    /// not whole until [`Filling::finish`] says so.
    pub fn grant(self, granted: Vec<PathBuf>, write: Vec<PathBuf>) -> (std::os::fd::OwnedFd, Filling) {
        let Walk { ruleset, run_paths, thread, .. } = self;
        // Fails only when the thread has ended already, which its join reports.
        let _ = run_paths.send(RunPaths { granted, write });
        (ruleset, Filling { thread })
    }
}

/// A ruleset the walk's thread is still filling.
pub struct Filling {
    thread: std::thread::JoinHandle<Result<(), Refused>>,
}

impl Filling {
    /// Waits until the ruleset holds every rule of the run, or says why it
    /// never will (the command must then not run).
    pub fn finish(self) -> Result<(), Refused> {
        self.thread.join().map_err(|_| Refused::new("Landlock", "the walk of / failed"))?
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree() -> tempfile::TempDir {
        let t = tempfile::tempdir().unwrap();
        for d in ["a/b/secret", "a/b/open", "a/c", "d"] {
            std::fs::create_dir_all(t.path().join(d)).unwrap();
        }
        std::os::unix::fs::symlink(t.path().join("a/b/secret"), t.path().join("d/into-secret")).unwrap();
        std::os::unix::fs::symlink(t.path().join("a/c"), t.path().join("d/to-c")).unwrap();
        t
    }

    /// A rule's path that leads through a link (replaced since it was
    /// listed) is not opened, whether the link is its last component or a
    /// directory on the way; a resolved path is.
    #[test]
    fn a_rule_path_through_a_link_is_not_opened() {
        let t = tree();
        let base = std::fs::canonicalize(t.path()).unwrap();
        assert!(open_rule_path(&base.join("a/b/open")).is_ok());
        // d/into-secret and d/to-c are links (to a/b/secret and a/c).
        let last = open_rule_path(&base.join("d/into-secret")).unwrap_err();
        assert_eq!(last.raw_os_error(), Some(nix::libc::ELOOP), "{last}");
        std::fs::create_dir(base.join("a/c/inner")).unwrap();
        let on_the_way = open_rule_path(&base.join("d/to-c/inner")).unwrap_err();
        assert_eq!(on_the_way.raw_os_error(), Some(nix::libc::ELOOP), "{on_the_way}");
        assert!(open_rule_path(&base.join("a/c/inner")).is_ok());
    }

    /// Siblings of a hidden path are granted, never the path, its
    /// ancestors, or a symlink into it.
    #[test]
    fn siblings_of_hidden_paths_are_granted_and_nothing_above_them() {
        let t = tree();
        let base = std::fs::canonicalize(t.path()).unwrap();
        let secret = base.join("a/b/secret");
        let mut found = Found::default();
        readable(&base, None, std::slice::from_ref(&secret), std::slice::from_ref(&secret), &mut found);
        let out = found.read;
        assert!(out.contains(&base.join("a/b/open")));
        assert!(out.contains(&base.join("a/c")));
        assert!(out.contains(&base.join("d")), "{out:?}");
        for p in &out {
            assert!(!p.starts_with(&secret), "{p:?} reaches the hidden path");
            assert!(!secret.starts_with(p), "{p:?} is above the hidden path");
        }
    }

    /// With nothing hidden the whole tree is one rule. A link into a path
    /// hidden elsewhere is harmless there: Landlock checks the inode a path
    /// resolves to, which no rule covers.
    #[test]
    fn nothing_hidden_leaves_the_whole_tree_readable() {
        let t = tree();
        let base = std::fs::canonicalize(t.path()).unwrap();
        let mut found = Found::default();
        readable(&base, None, &[], &[], &mut found);
        assert_eq!(found.read, vec![base]);
    }

    /// `within` agrees with `Path::starts_with` on resolved paths.
    #[test]
    fn within_is_starts_with_for_resolved_paths() {
        let paths = ["/", "/etc", "/etc/ssh", "/etc/sshd", "/etcx", "/e", "/root/.local", "/root", "/r"];
        for a in paths {
            for b in paths {
                assert_eq!(within(Path::new(a), Path::new(b)), Path::new(a).starts_with(b), "{a} in {b}");
            }
        }
    }

    #[test]
    fn rules_hide_dev_but_its_plain_devices_and_grant_the_run_again() {
        let t = tree();
        let base = std::fs::canonicalize(t.path()).unwrap();
        let r = rules(std::slice::from_ref(&base), &[base.join("a/c")], &[base.join("d")], true);
        assert!(r.read.contains(&base.join("a/c")));
        // A writable path is readable by its own rule (every right).
        assert!(r.write == vec![base.join("d")]);
        assert!(!r.read.iter().any(|p| p == Path::new("/dev") || p == Path::new("/")));
        assert!(r.devices.contains(&PathBuf::from("/dev/null")));
        assert!(r.deny_tcp);
    }

    /// A granted directory that holds a hidden path is split as `/` is.
    #[test]
    fn a_granted_directory_over_a_hidden_path_is_granted_around_it() {
        let t = tree();
        let base = std::fs::canonicalize(t.path()).unwrap();
        let secret = base.join("a/b/secret");
        let r = rules(&[base.clone(), secret.clone()], &[base.join("a")], &[], false);
        assert!(r.read.contains(&base.join("a/b/open")), "{:?}", r.read);
        assert!(r.read.contains(&base.join("a/c")), "{:?}", r.read);
        for p in &r.read {
            assert!(!p.starts_with(&secret) && !secret.starts_with(p), "{p:?} reaches the hidden path");
        }
    }
}
