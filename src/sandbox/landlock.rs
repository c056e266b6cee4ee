//! The Landlock backend of `--sandbox`: its rules and their enforcement
//! (its preparation is `landlock_plan`). Where user namespaces are blocked
//! (an AppArmor policy, a container's seccomp profile,
//! `user.max_user_namespaces=0`), the kernel's Landlock LSM confines the
//! command without any namespace or privilege.
//!
//! runws computes the rules before the command's process exists
//! ([`super::landlock_walk`]): what the command may read (and execute),
//! what it may write, which devices it may use, and whether TCP is denied;
//! and fills a kernel ruleset with them ([`ruleset`], or on the walk's
//! thread). The command's process, started like a plain run's (no fork of
//! runws, no init), sets no-new-privileges, drops every capability and
//! installs the system-call filter on itself with direct system calls while
//! runws records the run, then, past its gate, enforces the ruleset (see
//! [`crate::child::Confinement`]) and executes the command; everything it
//! starts inherits them. `--sandbox=try` goes through the init instead,
//! which makes the ruleset itself ([`enforce`]) and can go on without a
//! protection the kernel refuses.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::refused::Refused;

/// The highest ABI whose rights runws asks for: a newer kernel's rights
/// (ABI 8 and later add rights such as resolving a unix socket's path,
/// which the guard's socket needs) are left unhandled until runws is
/// tested with them.
pub(super) const ABI: ::landlock::ABI = ::landlock::ABI::V7;

/// What the command may do, as paths (resolved, symlinks followed) and
/// switches; computed by runws, enforced by the command's process.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rules {
    /// Read and execute beneath each.
    pub read: Vec<PathBuf>,
    /// Those of `read` that are not directories (a rule on a file takes
    /// only a file's rights), known from the listing, so the command's
    /// process need not look again.
    #[serde(default)]
    pub files: Vec<PathBuf>,
    /// Everything beneath each: create, write, remove, rename.
    pub write: Vec<PathBuf>,
    /// Device files the command may open for reading, writing and ioctls.
    pub devices: Vec<PathBuf>,
    /// `--net none`: no TCP bind or connect (ABI 4 and later; the system-call
    /// filter refuses every socket but a unix one on any ABI).
    pub deny_tcp: bool,
}

/// The devices a command needs (the namespace backend's private `/dev`
/// holds the same ones); every other device, a disk among them, stays out
/// of reach, which matters as root. Not `/dev/pts` nor `/dev/ptmx`: the
/// host's `/dev/pts` holds the user's other terminals (a shell in another
/// window, where a password may be typed), which Landlock cannot tell from
/// a terminal the command made; the command's own terminal stays usable
/// through its descriptors and `/dev/tty`.
pub const DEVICES: [&str; 6] =
    ["/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty"];

/// Files only root may read that a root command (uid 0 without
/// capabilities, so still the owner by file permissions) must not: hidden
/// as root on top of the homes and ROOT. The password hashes wherever the
/// usual tools keep copies of them (the `-` backups, the daily backup in
/// `/var/backups`, PAM's old passwords), sudo's rules, the host's SSH keys
/// and TLS private keys.
pub const ROOT_SECRETS: [&str; 11] = [
    "/etc/shadow",
    "/etc/gshadow",
    "/etc/shadow-",
    "/etc/gshadow-",
    "/etc/security/opasswd",
    "/var/backups/shadow.bak",
    "/var/backups/gshadow.bak",
    "/etc/sudoers",
    "/etc/sudoers.d",
    "/etc/ssh",
    "/etc/ssl/private",
];

/// What the Landlock backend does not do that the namespace backend does;
/// recorded with every Landlock run and listed in the README.
pub fn not_covered(root: bool) -> Vec<String> {
    let mut out: Vec<String> = [
        "other processes are visible in /proc (their details stay unreadable: Landlock refuses ptrace-like access across the run's boundary)",
        "/tmp, /var/tmp and /dev/shm are the host's, readable and not writable; TMPDIR is the run's tmp/",
        "no PID 1 of its own: processes the command leaves behind are reaped by runws, as for a plain run, and not killed at its end",
        "the host's file-system unix sockets can be connected to (Landlock ABI 9 restricts that; runws asks for ABI 7)",
        "with --net none, loopback too is closed: the run's ports cannot be bound or connected to (sockets handed over with --listen still accept)",
        "no pseudo-terminal can be made (/dev/ptmx and /dev/pts are closed: the host's /dev/pts holds the user's other terminals)",
        "modes and times of files the user owns can be changed anywhere, hidden ones included (Landlock restricts no chmod, chown, utimes or setxattr)",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    if root {
        out.push(
            "as root the command is uid 0 without capabilities: a file only root may read is readable where reads are allowed, unless hidden (runws hides /etc/shadow, /etc/gshadow and their backups, /etc/security/opasswd, /etc/sudoers, /etc/sudoers.d, /etc/ssh, /etc/ssl/private)"
                .into(),
        );
    }
    out
}

/// The kernel's Landlock ABI, or `None` without Landlock.
pub fn abi() -> Option<u32> {
    crate::sys::ns::landlock_abi()
}

/// The protections [`enforce`] gave, for the record: each with what
/// enforces it on this kernel, or why it is missing.
pub fn protections(abi: Option<u32>, deny_tcp: bool) -> (Vec<(String, String)>, Vec<Refused>) {
    let mut by = Vec::new();
    let mut missing = Vec::new();
    let Some(v) = abi else {
        missing.push(Refused::new(
            "Landlock",
            "the kernel offers no Landlock (Linux 5.13 or later, enabled at boot)",
        ));
        return (by, missing);
    };
    let ll = format!("Landlock ABI {v}");
    by.push(("file system: writes only to the run's directories and --rw".to_string(), ll.clone()));
    by.push(("file system: the homes, ROOT and --hide unreadable".to_string(), ll.clone()));
    by.push(("execution only from readable paths".to_string(), ll.clone()));
    if v >= 3 {
        by.push(("no truncation outside writable paths".to_string(), ll.clone()));
    } else {
        missing.push(Refused::new(
            "Landlock truncate",
            format!("ABI {v} (3 needed): a readable file could be truncated"),
        ));
    }
    if deny_tcp {
        let tcp = if v >= 4 {
            format!("{ll} (TCP) and the system-call filter")
        } else {
            "the system-call filter".into()
        };
        by.push(("network: no socket but a unix one".to_string(), tcp));
    }
    if v >= 6 {
        by.push(("signals and abstract unix sockets scoped to the run".to_string(), ll.clone()));
    } else {
        missing.push(Refused::new(
            "Landlock scopes",
            format!("ABI {v} (6 needed): the command can signal the user's other processes"),
        ));
    }
    by.push(("no privileges: no capabilities, no new privileges".to_string(), "prctl".into()));
    by.push(("system calls".to_string(), "seccomp".into()));
    (by, missing)
}

/// An empty Landlock ruleset that handles every right runws asks for (and
/// TCP when `deny_tcp`), with the run's scopes.
pub(super) fn created(deny_tcp: bool) -> Result<::landlock::RulesetCreated, Refused> {
    use ::landlock::{Access, AccessFs, AccessNet, Ruleset, RulesetAttr, Scope};
    let fail = |e: &dyn std::fmt::Display| Refused::new("Landlock", e.to_string());
    let mut ruleset = Ruleset::default().handle_access(AccessFs::from_all(ABI)).map_err(|e| fail(&e))?;
    if deny_tcp {
        ruleset = ruleset.handle_access(AccessNet::from_all(ABI)).map_err(|e| fail(&e))?;
    }
    ruleset = ruleset.scope(Scope::from_all(ABI)).map_err(|e| fail(&e))?;
    ruleset.create().map_err(|e| fail(&e))
}

/// Adds `rules` to `created`, but for the first `skip_read` of
/// `rules.read` (added already).
pub(super) fn fill(
    mut created: ::landlock::RulesetCreated,
    rules: &Rules,
    skip_read: usize,
) -> Result<::landlock::RulesetCreated, Refused> {
    use ::landlock::{Access, AccessFs, PathBeneath, RulesetCreatedAttr};
    use std::os::unix::ffi::OsStrExt;
    let read = AccessFs::from_read(ABI);
    let all = AccessFs::from_all(ABI);
    let device = AccessFs::ReadFile | AccessFs::WriteFile | AccessFs::IoctlDev;
    let file_only = AccessFs::from_file(ABI);
    let is_file = |p: &Path| {
        rules.files.binary_search_by(|f| f.as_os_str().as_bytes().cmp(p.as_os_str().as_bytes())).is_ok()
    };
    let read_now = rules.read.get(skip_read..).unwrap_or_default();
    let sets = [(read_now, read, false), (&rules.write[..], all, false), (&rules.devices[..], device, true)];
    for (paths, access, device) in sets {
        for p in paths {
            // A path gone since runws listed it grants nothing, nor does
            // one that leads through a link now.
            let Ok(fd) = open_rule_path(p) else { continue };
            let access = if device || is_file(p) { access & file_only } else { access };
            created = created
                .add_rule(PathBeneath::new(fd, access))
                .map_err(|e| Refused::new("Landlock", e.to_string()))?;
        }
    }
    Ok(created)
}

/// A rule's path opened for Landlock (`O_PATH`), following no symbolic
/// link on the way. Every path of the rules was resolved when it was listed,
/// so one that leads through a link now was changed since: perhaps by
/// someone racing the walk, who replaced a granted entry of a directory
/// anyone may write to (`/tmp`, `/var/tmp`, beside ROOT) with a link into a
/// hidden path, which a plain open would follow and grant. Such a path
/// grants nothing. Where `openat2` is refused (an old container profile),
/// the last component is opened without following, and the descriptor's
/// own path must still be the one listed.
pub(super) fn open_rule_path(p: &Path) -> std::io::Result<std::os::fd::OwnedFd> {
    open_unlinked(p, rustix::fs::OFlags::PATH)
}

/// `p` opened with `flags` (and close-on-exec), following no symbolic link
/// on the way: see [`open_rule_path`].
pub(super) fn open_unlinked(p: &Path, flags: rustix::fs::OFlags) -> std::io::Result<std::os::fd::OwnedFd> {
    use rustix::fs::{CWD, Mode, OFlags, ResolveFlags};
    let flags = flags | OFlags::CLOEXEC;
    match rustix::fs::openat2(CWD, p, flags, Mode::empty(), ResolveFlags::NO_SYMLINKS) {
        Err(e) if e == rustix::io::Errno::NOSYS || e == rustix::io::Errno::PERM => {}
        other => return other.map_err(Into::into),
    }
    let fd = rustix::fs::openat(CWD, p, flags | OFlags::NOFOLLOW, Mode::empty())?;
    let at = std::fs::read_link(format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&fd)))?;
    if at == p { Ok(fd) } else { Err(std::io::Error::from_raw_os_error(nix::libc::ELOOP)) }
}

/// The ruleset's descriptor; `None` from the crate means the kernel
/// enforces nothing.
pub(super) fn descriptor(created: ::landlock::RulesetCreated) -> Result<std::os::fd::OwnedFd, Refused> {
    Option::<std::os::fd::OwnedFd>::from(created)
        .ok_or_else(|| Refused::new("Landlock", "the kernel enforced none of the rules"))
}

/// A Landlock ruleset holding `rules`; whoever holds the descriptor may
/// enforce it on itself ([`restrict_self`]).
pub fn ruleset(rules: &Rules) -> Result<std::os::fd::OwnedFd, Refused> {
    descriptor(fill(created(rules.deny_tcp)?, rules, 0)?)
}

/// Enforces the ruleset `fd` on this process (and everything it executes).
/// `PR_SET_NO_NEW_PRIVS` must be set.
pub fn restrict_self(fd: std::os::fd::BorrowedFd<'_>) -> Result<(), Refused> {
    crate::sys::ns::landlock_restrict_self(fd)
        .map_err(|e| Refused::io("Landlock", "landlock_restrict_self", e))
}

/// Enforces `rules` on this process (and everything it executes), where
/// the process makes the ruleset itself (the init of `--sandbox=try`).
/// `PR_SET_NO_NEW_PRIVS` must be set.
pub fn enforce(rules: &Rules) -> Result<(), Refused> {
    use std::os::fd::AsFd;
    restrict_self(ruleset(rules)?.as_fd())
}
