//! A recording [`Kernel`] for the tests: every request that changes
//! something (a namespace, a mount, a file, a credential, a descriptor
//! made) becomes one line of a log, in order, with its arguments; queries
//! (`lstat`, `fstat`, `getppid`, reading `uid_map`) answer from a small
//! model of the file system and are not logged. A test can refuse any
//! request by the start of its line, with an errno: the line is logged
//! with ` = ERRNO` and the caller gets the error its library would give.
//!
//! The model: paths the test declared (directories, files, the host's
//! device nodes), plus what the calls create. A tmpfs or devpts mounted
//! on a directory hides everything below it, as the kernel's would; other
//! mounts change nothing the plan looks at.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::ffi::CStr;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, RawFd};
use std::path::{Path, PathBuf};

use nix::libc;
use nix::mount::MsFlags;
use nix::sched::CloneFlags;
use rustix::mount::OpenTreeFlags;

use super::{Kernel, Mount, MountAttr};
use crate::sandbox::refused::Refused;

/// What is at a path of the model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Node {
    Dir,
    File(String),
    /// A character device: its `st_rdev` and permission bits.
    Char(u64, u32),
    Link(String),
}

/// A descriptor the fake gave out: what it refers to (a path, or
/// `socket`). Shown as `[PATH]` in the log.
#[derive(Debug)]
pub struct Fd(PathBuf);

impl std::fmt::Display for Fd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "[{}]", self.0.display())
    }
}

/// See the module docs.
pub struct Fake {
    log: RefCell<Vec<String>>,
    refusals: RefCell<Vec<(String, i32)>>,
    files: RefCell<BTreeMap<PathBuf, Node>>,
    names: RefCell<BTreeMap<RawFd, String>>,
    euid: Cell<u32>,
    parent: Cell<i32>,
}

/// The host's device nodes as Linux numbers them (`null` is 1:3, ...).
pub const HOST_DEV: &[(&str, u64, u64)] =
    &[("null", 1, 3), ("zero", 1, 5), ("full", 1, 7), ("random", 1, 8), ("urandom", 1, 9), ("tty", 5, 0)];

impl Fake {
    /// A machine seen by root of the host: `/`, `/tmp`, `/proc` (with
    /// `kcore`, `keys` and `acpi`), the host's `/dev` nodes, and an initial
    /// `uid_map`. runws's parent is pid 1000.
    pub fn new() -> Fake {
        let fake = Fake {
            log: RefCell::default(),
            refusals: RefCell::default(),
            files: RefCell::default(),
            names: RefCell::default(),
            euid: Cell::new(0),
            parent: Cell::new(1000),
        };
        for d in ["/", "/tmp", "/dev", "/proc", "/proc/self", "/proc/acpi"] {
            fake.dir(d);
        }
        for (name, major, minor) in HOST_DEV {
            let node = Node::Char(nix::sys::stat::makedev(*major, *minor), 0o666);
            fake.files.borrow_mut().insert(Path::new("/dev").join(name), node);
        }
        fake.file("/proc/kcore", "");
        fake.file("/proc/keys", "");
        fake.file("/proc/self/uid_map", "         0          0 4294967295\n");
        fake
    }

    /// A machine seen by an ordinary user (`uid`) in the user namespace it
    /// made: its `uid_map` maps the uid to itself.
    pub fn user(uid: u32) -> Fake {
        let fake = Fake::new();
        fake.euid.set(uid);
        fake.file("/proc/self/uid_map", &format!("{uid} {uid} 1\n"));
        fake
    }

    /// Declares a directory (and its parents).
    pub fn dir(&self, path: &str) -> &Fake {
        let mut files = self.files.borrow_mut();
        for p in Path::new(path).ancestors() {
            files.entry(p.to_path_buf()).or_insert(Node::Dir);
        }
        self
    }

    /// Declares a file holding `text` (and its parent directories).
    pub fn file(&self, path: &str, text: &str) -> &Fake {
        if let Some(parent) = Path::new(path).parent() {
            self.dir(&parent.to_string_lossy());
        }
        self.files.borrow_mut().insert(path.into(), Node::File(text.into()));
        self
    }

    /// What is at `path` now.
    pub fn node(&self, path: &str) -> Option<Node> {
        self.files.borrow().get(Path::new(path)).cloned()
    }

    /// Refuses every request whose log line starts with `prefix`, with `errno`.
    pub fn refuse(&self, prefix: &str, errno: i32) -> &Fake {
        self.refusals.borrow_mut().push((prefix.into(), errno));
        self
    }

    /// Names descriptor `fd` (one the test handed in) `name` in the log.
    pub fn name_fd(&self, fd: BorrowedFd<'_>, name: &str) -> &Fake {
        self.names.borrow_mut().insert(fd.as_raw_fd(), name.into());
        self
    }

    /// The parent `getppid` reports from now on.
    pub fn set_parent(&self, pid: i32) {
        self.parent.set(pid);
    }

    /// The log so far, emptied.
    pub fn take(&self) -> Vec<String> {
        std::mem::take(&mut *self.log.borrow_mut())
    }

    /// Logs `line`, refused when a refusal matches it.
    fn call(&self, line: String) -> Result<(), i32> {
        self.call_or(line, None)
    }

    /// Logs `line`, failing with `errno` (the model's own answer) unless a
    /// refusal matches first.
    fn call_or(&self, line: String, errno: Option<i32>) -> Result<(), i32> {
        let refused = self.refusals.borrow().iter().find(|(p, _)| line.starts_with(p.as_str())).map(|r| r.1);
        match refused.or(errno) {
            Some(e) => {
                self.log.borrow_mut().push(format!("{line} = {:?}", nix::errno::Errno::from_raw(e)));
                Err(e)
            }
            None => {
                self.log.borrow_mut().push(line);
                Ok(())
            }
        }
    }

    fn fd_name(&self, fd: BorrowedFd<'_>) -> String {
        let raw = fd.as_raw_fd();
        self.names.borrow().get(&raw).cloned().unwrap_or_else(|| format!("fd{raw}"))
    }

    fn exists(&self, path: &Path) -> bool {
        self.files.borrow().contains_key(path)
    }

    /// ENOENT when nothing is at `path`.
    fn missing(&self, path: &Path) -> Option<i32> {
        (!self.exists(path)).then_some(libc::ENOENT)
    }

    /// What a new entry at `path` meets: EEXIST, or ENOENT without a parent.
    fn creating(&self, path: &Path) -> Option<i32> {
        if self.exists(path) {
            return Some(libc::EEXIST);
        }
        path.parent().and_then(|p| self.missing(p))
    }

    fn add(&self, path: &Path, node: Node) {
        self.files.borrow_mut().insert(path.to_path_buf(), node);
    }
}

impl Default for Fake {
    fn default() -> Fake {
        Fake::new()
    }
}

fn nix_err(e: i32) -> nix::errno::Errno {
    nix::errno::Errno::from_raw(e)
}

fn io_err(e: i32) -> io::Error {
    io::Error::from_raw_os_error(e)
}

fn rustix_err(e: i32) -> rustix::io::Errno {
    rustix::io::Errno::from_raw_os_error(e)
}

/// Flag names, lowercase, without their common prefix: `nosuid,nodev`.
fn names<'a>(it: impl Iterator<Item = &'a str>, strip: &[&str]) -> String {
    let names: Vec<String> =
        it.map(|n| strip.iter().fold(n, |n, s| n.strip_prefix(s).unwrap_or(n)).to_lowercase()).collect();
    names.join(",")
}

fn clone_names(f: CloneFlags) -> String {
    names(f.iter_names().map(|(n, _)| n), &["CLONE_"])
}

fn ms_names(f: MsFlags) -> String {
    names(f.iter_names().map(|(n, _)| n), &["MS_"])
}

fn attr_names(bits: u64) -> String {
    let known = [
        (libc::MOUNT_ATTR_RDONLY, "ro"),
        (libc::MOUNT_ATTR_NOSUID, "nosuid"),
        (libc::MOUNT_ATTR_NODEV, "nodev"),
        (libc::MOUNT_ATTR_NOEXEC, "noexec"),
        (libc::MOUNT_ATTR_IDMAP, "idmap"),
    ];
    let mut out: Vec<String> =
        known.iter().filter(|(b, _)| bits & b != 0).map(|(_, n)| n.to_string()).collect();
    let rest = bits & !known.iter().fold(0, |a, (b, _)| a | b);
    if rest != 0 {
        out.push(format!("{rest:#x}"));
    }
    out.join(",")
}

fn interface_names(flags: libc::c_short) -> String {
    let known = [(libc::IFF_UP, "up"), (libc::IFF_LOOPBACK, "loopback"), (libc::IFF_RUNNING, "running")];
    let flags = i32::from(flags);
    let mut out: Vec<String> =
        known.iter().filter(|(b, _)| flags & b != 0).map(|(_, n)| n.to_string()).collect();
    let rest = flags & !known.iter().fold(0, |a, (b, _)| a | b);
    if rest != 0 {
        out.push(format!("{rest:#x}"));
    }
    out.join(",")
}

fn text(c: &CStr) -> String {
    c.to_string_lossy().into_owned()
}

impl Kernel for Fake {
    type Fd = Fd;

    fn unshare(&self, flags: CloneFlags) -> nix::Result<()> {
        self.call(format!("unshare {}", clone_names(flags))).map_err(nix_err)
    }

    fn setns(&self, fd: BorrowedFd<'_>, nstype: CloneFlags) -> nix::Result<()> {
        self.call(format!("setns {} {}", self.fd_name(fd), clone_names(nstype))).map_err(nix_err)
    }

    fn write_file(&self, path: &Path, text: &str) -> io::Result<()> {
        self.call(format!("write {} {text:?}", path.display())).map_err(io_err)
    }

    fn read_file(&self, path: &Path) -> io::Result<String> {
        match self.files.borrow().get(path) {
            Some(Node::File(text)) => Ok(text.clone()),
            _ => Err(io_err(libc::ENOENT)),
        }
    }

    fn clear_groups(&self) -> nix::Result<()> {
        self.call("setgroups []".into()).map_err(nix_err)
    }

    fn setresgid(&self, gid: u32) -> nix::Result<()> {
        self.call(format!("setresgid {gid}")).map_err(nix_err)
    }

    fn setresuid(&self, uid: u32) -> nix::Result<()> {
        self.call(format!("setresuid {uid}")).map_err(nix_err)
    }

    fn geteuid(&self) -> u32 {
        self.euid.get()
    }

    fn set_no_new_privs(&self) -> rustix::io::Result<()> {
        self.call("no_new_privs".into()).map_err(rustix_err)
    }

    fn kill_with_parent(&self) -> rustix::io::Result<()> {
        self.call("pdeathsig kill".into()).map_err(rustix_err)
    }

    fn getppid(&self) -> i32 {
        self.parent.get()
    }

    fn clear_bounding_set(&self) -> rustix::io::Result<()> {
        self.call("capbset drop all".into()).map_err(rustix_err)
    }

    fn clear_ambient_set(&self) -> rustix::io::Result<()> {
        self.call("ambient clear".into()).map_err(rustix_err)
    }

    fn holds_capabilities(&self) -> bool {
        true
    }

    fn clear_capabilities(&self) -> rustix::io::Result<()> {
        self.call("capset none".into()).map_err(rustix_err)
    }

    fn cloexec_from(&self, first: u32) -> io::Result<()> {
        self.call(format!("close_range {first}.. cloexec")).map_err(io_err)
    }

    fn landlock(&self, rules: &crate::sandbox::landlock::Rules) -> Result<(), Refused> {
        let line = format!(
            "landlock read {} write {} deny_tcp {}",
            rules.read.len(),
            rules.write.len(),
            rules.deny_tcp
        );
        self.call(line).map_err(|e| Refused::new("Landlock", io_err(e).to_string()))
    }

    fn seccomp(&self, filter: crate::sandbox::seccomp::Filter) -> Result<(), Refused> {
        let mut line = String::from("seccomp");
        if filter.allow_userns {
            line.push_str(" allow_userns");
        }
        if filter.unix_sockets_only {
            line.push_str(" unix_only");
        }
        self.call(line)
            .map_err(|e| Refused::new("system-call filter", format!("prctl(PR_SET_SECCOMP): {}", io_err(e))))
    }

    fn chroot(&self, path: &Path) -> nix::Result<()> {
        self.call(format!("chroot {}", path.display())).map_err(nix_err)
    }

    fn chdir(&self, path: &Path) -> nix::Result<()> {
        self.call_or(format!("chdir {}", path.display()), self.missing(path)).map_err(nix_err)
    }

    fn socket(&self) -> nix::Result<Fd> {
        self.call("socket inet dgram".into()).map_err(nix_err)?;
        Ok(Fd("socket".into()))
    }

    fn interface_flags(&self, _sock: &Fd, name: &str) -> io::Result<libc::c_short> {
        match name {
            "lo" => Ok(libc::IFF_LOOPBACK as libc::c_short),
            _ => Err(io_err(libc::ENODEV)),
        }
    }

    fn set_interface_flags(&self, sock: &Fd, name: &str, flags: libc::c_short) -> io::Result<()> {
        self.call(format!("ioctl {sock} {name} flags {}", interface_names(flags))).map_err(io_err)
    }

    fn mount(&self, target: &Path, m: &Mount<'_>) -> nix::Result<()> {
        let mut line = format!("mount {} on {}", m.source.unwrap_or("none"), target.display());
        if let Some(t) = m.fstype {
            line.push_str(&format!(" type {t}"));
        }
        line.push_str(&format!(" ({})", ms_names(m.flags)));
        if let Some(d) = m.data {
            line.push_str(&format!(" {d}"));
        }
        self.call_or(line, self.missing(target)).map_err(nix_err)?;
        if matches!(m.fstype, Some("tmpfs" | "devpts")) {
            self.files.borrow_mut().retain(|p, _| p == target || !p.starts_with(target));
            self.add(target, Node::Dir);
        }
        Ok(())
    }

    fn open_tree(&self, dir: Option<&Fd>, path: &CStr, flags: OpenTreeFlags) -> rustix::io::Result<Fd> {
        // Relative to a descriptor, the directory may be covered by now:
        // what it held is taken to be there still.
        let (path, errno) = match dir {
            Some(dir) => (dir.0.join(text(path)), None),
            None => (PathBuf::from(text(path)), self.missing(Path::new(&text(path)))),
        };
        let flags = names(flags.iter_names().map(|(n, _)| n), &["OPEN_TREE_", "AT_"]);
        self.call_or(format!("open_tree {} ({flags})", path.display()), errno).map_err(rustix_err)?;
        Ok(Fd(path))
    }

    fn move_mount(&self, tree: &Fd, target: &CStr) -> rustix::io::Result<()> {
        let target = PathBuf::from(text(target));
        self.call_or(format!("move_mount {tree} to {}", target.display()), self.missing(&target))
            .map_err(rustix_err)
    }

    fn mount_setattr(&self, tree: Option<&Fd>, path: &CStr, attr: &MountAttr<'_>) -> io::Result<()> {
        let MountAttr { flags, set, clear, userns } = *attr;
        let mut line = match tree {
            Some(tree) if path.is_empty() => format!("setattr {tree}"),
            Some(tree) => format!("setattr {tree}/{}", text(path)),
            None => format!("setattr {}", text(path)),
        };
        if set != 0 {
            line.push_str(&format!(" +{}", attr_names(set)));
        }
        if clear != 0 {
            line.push_str(&format!(" -{}", attr_names(clear)));
        }
        if flags & libc::AT_RECURSIVE != 0 {
            line.push_str(" recursive");
        }
        if let Some(ns) = userns {
            line.push_str(&format!(" userns={}", self.fd_name(ns)));
        }
        self.call(line).map_err(io_err)
    }

    fn open_dir_path(&self, path: &Path) -> nix::Result<Fd> {
        let errno = match self.files.borrow().get(path) {
            Some(Node::Dir) => None,
            Some(_) => Some(libc::ENOTDIR),
            None => Some(libc::ENOENT),
        };
        self.call_or(format!("open {} (path,directory)", path.display()), errno).map_err(nix_err)?;
        Ok(Fd(path.into()))
    }

    fn fd_path(&self, fd: &Fd) -> String {
        format!("/proc/self/fd/{fd}")
    }

    fn fstat_mode(&self, fd: &Fd) -> nix::Result<u32> {
        match self.files.borrow().get(&fd.0) {
            Some(Node::Dir) => Ok(libc::S_IFDIR | 0o755),
            Some(Node::File(_)) => Ok(libc::S_IFREG | 0o644),
            Some(Node::Char(_, mode)) => Ok(libc::S_IFCHR | mode),
            Some(Node::Link(_)) => Ok(libc::S_IFLNK | 0o777),
            None => Err(nix::errno::Errno::EBADF),
        }
    }

    fn fstatat_nofollow(&self, dir: &Fd, name: &str) -> nix::Result<(u32, u64)> {
        match self.files.borrow().get(&dir.0.join(name)) {
            Some(Node::Char(rdev, mode)) => Ok((libc::S_IFCHR | mode, *rdev)),
            Some(Node::Dir) => Ok((libc::S_IFDIR | 0o755, 0)),
            Some(_) => Ok((libc::S_IFREG | 0o644, 0)),
            None => Err(nix::errno::Errno::ENOENT),
        }
    }

    fn lstat_is_dir(&self, path: &Path) -> io::Result<bool> {
        match self.files.borrow().get(path) {
            Some(node) => Ok(*node == Node::Dir),
            None => Err(io_err(libc::ENOENT)),
        }
    }

    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        self.call(format!("mkdir -p {}", path.display())).map_err(io_err)?;
        self.dir(&path.to_string_lossy());
        Ok(())
    }

    fn create_dir(&self, path: &Path) -> io::Result<()> {
        self.call_or(format!("mkdir {}", path.display()), self.creating(path)).map_err(io_err)?;
        self.add(path, Node::Dir);
        Ok(())
    }

    fn create_file(&self, path: &Path) -> io::Result<()> {
        self.call_or(format!("create {}", path.display()), self.creating(path)).map_err(io_err)?;
        self.add(path, Node::File(String::new()));
        Ok(())
    }

    fn mknod_char(&self, path: &Path, mode: u32, rdev: u64) -> nix::Result<()> {
        let (major, minor) = (nix::sys::stat::major(rdev), nix::sys::stat::minor(rdev));
        let line = format!("mknod {} c {major}:{minor} {mode:o}", path.display());
        self.call_or(line, self.creating(path)).map_err(nix_err)?;
        self.add(path, Node::Char(rdev, mode));
        Ok(())
    }

    fn chmod(&self, path: &Path, mode: u32) -> io::Result<()> {
        self.call_or(format!("chmod {} {mode:o}", path.display()), self.missing(path)).map_err(io_err)
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        self.call_or(format!("unlink {}", path.display()), self.missing(path)).map_err(io_err)?;
        self.files.borrow_mut().remove(path);
        Ok(())
    }

    fn symlink(&self, to: &str, link: &Path) -> io::Result<()> {
        self.call_or(format!("symlink {} -> {to}", link.display()), self.creating(link)).map_err(io_err)?;
        self.add(link, Node::Link(to.into()));
        Ok(())
    }
}

/// Runs of log lines that the tests of more than one step expect, written
/// once: the user namespace of uid 1000 (gid 100), the default layout,
/// the sandbox's `/proc` on this model, and the parts of a private `/dev`.
pub mod logs {
    use super::HOST_DEV;

    /// `ns::enter_user_namespace` of uid 1000 and gid 100.
    pub const USER_NAMESPACE: [&str; 4] = [
        "unshare newuser",
        r#"write /proc/self/setgroups "deny""#,
        r#"write /proc/self/uid_map "1000 1000 1\n""#,
        r#"write /proc/self/gid_map "100 100 1\n""#,
    ];

    /// `mounts::proc_fs` then `mounts::mask_proc`, on a `/proc` that has
    /// `kcore`, `keys` and `acpi` of the masked entries.
    pub const PROC: [&str; 9] = [
        "mount proc on /proc type proc (rdonly,nosuid,nodev,noexec)",
        "open_tree /dev/null (clone,cloexec,recursive)",
        "move_mount [/dev/null] to /proc/kcore",
        "setattr /proc/kcore +ro,nosuid,nodev,noexec",
        "open_tree /dev/null (clone,cloexec,recursive)",
        "move_mount [/dev/null] to /proc/keys",
        "setattr /proc/keys +ro,nosuid,nodev,noexec",
        "mount tmpfs on /proc/acpi type tmpfs (nosuid,nodev) mode=555",
        "setattr /proc/acpi +ro",
    ];

    /// The default layout of an ordinary user (run directory `/r/runs/x`),
    /// placed: a private `/tmp`, the home hidden, the run directory
    /// read-only at its top and writable in `work/`.
    pub const DEFAULT_LAYOUT: [&str; 6] = [
        "mount tmpfs on /tmp type tmpfs (nosuid,nodev) mode=1777",
        "mount tmpfs on /home/ann type tmpfs (nosuid,nodev) mode=755",
        "move_mount [/r/runs/x] to /r/runs/x",
        "setattr /r/runs/x +ro,nosuid,nodev recursive",
        "move_mount [/r/runs/x/work] to /r/runs/x/work",
        "setattr /r/runs/x/work +nosuid,nodev recursive",
    ];

    /// The host's nodes a private `/dev` shows, as `/dev` names them.
    pub fn dev_nodes() -> impl Iterator<Item = &'static str> {
        HOST_DEV.iter().map(|(name, _, _)| *name)
    }

    /// A clone of each host node, taken before the tree is `nodev`.
    pub fn dev_clones() -> Vec<String> {
        dev_nodes().map(|n| format!("open_tree /dev/{n} (clone,cloexec)")).collect()
    }

    /// Each early clone bound onto a file made for it in the `/dev` tmpfs.
    pub fn dev_binds() -> Vec<String> {
        let mut out = Vec::new();
        for n in dev_nodes() {
            out.extend([
                "mkdir -p /dev".into(),
                format!("create /dev/{n}"),
                format!("move_mount [/dev/{n}] to /dev/{n}"),
                format!("setattr /dev/{n} +nosuid,noexec"),
            ]);
        }
        out
    }

    /// The end of every private `/dev`: its devpts and its links.
    pub fn dev_tail() -> Vec<String> {
        let mut out = vec![
            "mkdir -p /dev".to_string(),
            "mkdir /dev/pts".into(),
            "mount devpts on /dev/pts type devpts (nosuid,noexec) newinstance,ptmxmode=0666,mode=620".into(),
        ];
        for (name, to) in [
            ("ptmx", "pts/ptmx"),
            ("fd", "/proc/self/fd"),
            ("stdin", "/proc/self/fd/0"),
            ("stdout", "/proc/self/fd/1"),
            ("stderr", "/proc/self/fd/2"),
        ] {
            out.push(format!("symlink /dev/{name} -> {to}"));
        }
        out
    }
}
