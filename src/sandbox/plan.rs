//! runws's side of preparing a sandboxed or audited run: the options, the
//! mount layout, and the rewrite of the child's [`Spec`] so that it executes
//! the init instead of the command.
//!
//! The layout of `--sandbox`, parents first:
//!
//! | path | becomes |
//! |---|---|
//! | `/` and every mount beneath | read-only |
//! | `/dev` | a private one: `null`, `zero`, `full`, `random`, `urandom`, `tty`, its own devpts and `ptmx`, `fd` links |
//! | `/tmp`, `/var/tmp`, `/dev/shm` | a fresh, writable tmpfs of the run's own |
//! | `/sys/firmware` and other host-detail directories | an empty, read-only tmpfs |
//! | with `--net none`: `/run` and every other unix socket the host listens on | hidden |
//! | the real home (passwd entry) and runws's `$HOME` | an empty, read-only tmpfs |
//! | ROOT (where runs live) | an empty, read-only tmpfs: other runs are invisible |
//! | the run directory | its top level (with `manifest.json`) read-only, every subdirectory writable |
//! | `--hide PATH` | an empty, read-only tmpfs (a directory) or `/dev/null` (a file) |
//! | `--ro PATH`, `--rw PATH` | PATH, read-only or writable |
//! | the command and runws's own binary, when hidden above | read-only, so they can run |
//!
//! A user flag on the same path as a default replaces it (`--rw /tmp` gives
//! the real `/tmp`); two user flags on one path are refused. Every path must
//! exist and is resolved (symlinks followed) before the fork, so a typo is
//! refused with exit 125 instead of silently protecting nothing.

use std::ffi::OsString;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};

use crate::child::{self, Spec};
use crate::error::{Error, IoContext, Result};
use crate::manifest::{EnvRecord, Manifest};
use crate::workspace::{EVIDENCE, RunDir, SCRATCH};

use super::mounts::{self, MountOp};
use super::{Kind, Net, Plan, Record, Setup, broker, init_argv, plan_file};

/// What the user asked for on the command line.
#[derive(Debug, Clone)]
pub struct Options {
    pub kind: Kind,
    pub try_mode: bool,
    pub net: Net,
    pub rw: Vec<PathBuf>,
    pub ro: Vec<PathBuf>,
    pub hide: Vec<PathBuf>,
    /// `--cache DIR[:MOUNTPOINT]`.
    pub caches: Vec<String>,
    /// `audit --json`.
    pub json: bool,
    /// `--allow-userns`: the command may create user namespaces.
    pub allow_userns: bool,
    /// Which backend: `--sandbox=ns`, `--sandbox=landlock`, or the
    /// strongest that works here.
    pub backend: Choice,
    /// `--net allow=...` and `audit --net` (with `net` = `Net::Allow`).
    pub egress: Option<crate::egress::Egress>,
}

/// `--sandbox=MODE`: whether a failed protection refuses the run, and
/// which backend.
pub fn mode(mode: &str) -> (bool, Choice) {
    match mode {
        "try" => (true, Choice::Auto),
        "ns" => (false, Choice::Namespaces),
        "landlock" => (false, Choice::Landlock),
        _ => (false, Choice::Auto),
    }
}

/// The mode's name as `--sandbox=MODE` gives it, for the record.
pub fn mode_name(opts: &Options) -> &'static str {
    match (opts.try_mode, opts.backend) {
        (true, _) => "try",
        (false, Choice::Auto) => "on",
        (false, Choice::Namespaces) => "ns",
        (false, Choice::Landlock) => "landlock",
    }
}

/// The backend a sandbox was asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Choice {
    /// Namespaces where they work, else Landlock.
    Auto,
    Namespaces,
    Landlock,
}

pub(super) fn canonical(p: &Path, what: &str, base: &Path) -> Result<PathBuf> {
    let p = base.join(p);
    let c = std::fs::canonicalize(&p).map_err(|e| Error::Usage(format!("{what} `{}`: {e}", p.display())))?;
    if c == Path::new("/") {
        return Err(Error::Usage(format!("{what} `/` is not allowed: name a directory or file below it")));
    }
    Ok(c)
}

/// The home directory of `uid`: from /etc/passwd, where name services look
/// first, else from them (a directory service). Asked on runws's main thread
/// only: a statically linked glibc (`cargo build-static`) loads its
/// name-service modules at run time, which must not happen with other threads running.
fn passwd_home(uid: u32) -> Option<PathBuf> {
    let passwd = std::fs::read("/etc/passwd").unwrap_or_default();
    home_in(&passwd, uid).or_else(|| {
        nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid)).ok().flatten().map(|u| u.dir)
    })
}

/// The home of the first entry for `uid` in passwd-format `text`, read as
/// bytes: another user's full name (which `chfn` lets them change) or a
/// home may hold bytes that are not UTF-8.
fn home_in(text: &[u8], uid: u32) -> Option<PathBuf> {
    use std::os::unix::ffi::OsStrExt;
    text.split(|&b| b == b'\n').find_map(|line| {
        let f: Vec<&[u8]> = line.split(|&b| b == b':').collect();
        let this = f.len() == 7 && std::str::from_utf8(f[2]).ok()?.parse() == Ok(uid);
        this.then(|| PathBuf::from(std::ffi::OsStr::from_bytes(f[5])))
    })
}

pub(super) fn homes(uid: u32) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Some(home) = passwd_home(uid) {
        out.push(home);
    }
    if let Some(h) = std::env::var_os("HOME").filter(|h| !h.is_empty()) {
        out.push(PathBuf::from(h));
    }
    out.into_iter()
        .filter_map(|h| std::fs::canonicalize(h).ok())
        .filter(|h| h.is_dir() && h != Path::new("/"))
        .collect()
}

/// One `--cache DIR[:MOUNTPOINT]`, resolved.
pub struct Cache {
    pub dir: PathBuf,
    pub target: PathBuf,
}

/// The `--cache` options, resolved: DIR must be a directory; MOUNTPOINT
/// (default DIR) must be absolute.
pub fn caches(opts: &Options, base: &Path) -> Result<Vec<Cache>> {
    let mut out = Vec::new();
    for spec in &opts.caches {
        let (dir, target) = match spec.split_once(':') {
            Some((d, t)) => (d, Some(t)),
            None => (spec.as_str(), None),
        };
        let dir = canonical(Path::new(dir), "--cache", base)?;
        if !dir.is_dir() {
            return Err(Error::Usage(format!("--cache `{}` is not a directory", dir.display())));
        }
        let target = match target {
            Some(t) if Path::new(t).is_absolute() => PathBuf::from(t),
            Some(t) => {
                return Err(Error::Usage(format!("--cache mount point `{t}` must be an absolute path")));
            }
            None => dir.clone(),
        };
        out.push(Cache { dir, target });
    }
    Ok(out)
}

/// The sandbox's mount layout (see the module docs), parents first.
fn layout(
    opts: &Options,
    run_dir: &Path,
    root: &Path,
    uid: u32,
    host_ids: Option<(u32, u32)>,
    visible: &[PathBuf],
    base: &Path,
) -> Result<Vec<MountOp>> {
    let mut defaults: Vec<MountOp> = vec![MountOp::Dev { target: "/dev".into() }];
    for t in ["/tmp", "/var/tmp", "/dev/shm"] {
        if let Ok(c) = std::fs::canonicalize(t)
            && c.is_dir()
            && c != Path::new("/")
        {
            defaults.push(MountOp::Tmpfs { target: c, mode: 0o1777, writable: true });
        }
    }
    for h in homes(uid) {
        defaults.push(MountOp::Tmpfs { target: h, mode: 0o755, writable: false });
    }
    // Firmware tables and power meters (a side channel on the host's work).
    for t in ["/sys/firmware", "/sys/devices/virtual/powercap"] {
        if Path::new(t).is_dir() {
            defaults.push(MountOp::Tmpfs { target: t.into(), mode: 0o755, writable: false });
        }
    }
    if opts.net.isolated() {
        // Without a network, no host service either: a unix socket is reached
        // through the file system, which a network namespace does not cover.
        for t in ["/run", "/var/run"] {
            if let Ok(c) = std::fs::canonicalize(t)
                && c.is_dir()
                && c != Path::new("/")
            {
                defaults.push(MountOp::Tmpfs { target: c, mode: 0o755, writable: false });
            }
        }
    }
    if root != Path::new("/") {
        defaults.push(MountOp::Tmpfs { target: root.to_path_buf(), mode: 0o755, writable: false });
    }
    // The run directory is its owner's alone (mode 0700): as root, the
    // command (`nobody` to the host) enters it through an id-mapped view.
    defaults.push(MountOp::Bind {
        source: run_dir.into(),
        target: run_dir.into(),
        writable: false,
        mapped: true,
    });
    let mut seen: Vec<PathBuf> = Vec::new();
    defaults.retain(|op| {
        let fresh = !seen.iter().any(|t| t == op.target());
        seen.push(op.target().to_path_buf());
        fresh
    });
    for sub in EVIDENCE.iter().chain(SCRATCH.iter()) {
        let p = run_dir.join(sub);
        defaults.push(MountOp::Bind { source: p.clone(), target: p, writable: true, mapped: false });
    }

    let mut user: Vec<MountOp> = Vec::new();
    for p in &opts.hide {
        let c = canonical(p, "--hide", base)?;
        user.push(if c.is_dir() {
            MountOp::Tmpfs { target: c, mode: 0o755, writable: false }
        } else {
            MountOp::HideFile { target: c }
        });
    }
    for p in &opts.ro {
        let c = canonical(p, "--ro", base)?;
        user.push(MountOp::Bind { source: c.clone(), target: c, writable: false, mapped: false });
    }
    for p in &opts.rw {
        let c = canonical(p, "--rw", base)?;
        user.push(MountOp::Bind { source: c.clone(), target: c, writable: true, mapped: false });
    }
    for (i, a) in user.iter().enumerate() {
        if user[..i].iter().any(|b| b.target() == a.target()) {
            return Err(Error::Usage(format!(
                "`{}` is named by more than one of --rw, --ro and --hide",
                a.target().display()
            )));
        }
    }
    defaults.retain(|d| !user.iter().any(|u| u.target() == d.target()));
    if opts.net.isolated() {
        // Every other socket the host listens on, unless the user granted it
        // (or a directory holding it) or it is already hidden.
        for sock in host_unix_sockets() {
            let hidden = defaults
                .iter()
                .any(|op| matches!(op, MountOp::Tmpfs { .. }) && mounts::is_within(&sock, op.target()));
            let granted = user.iter().any(|op| mounts::is_within(&sock, op.target()));
            if !hidden && !granted && !sock.starts_with(run_dir) {
                defaults.push(MountOp::HideFile { target: sock });
            }
        }
    }
    let mut ops = defaults;
    ops.extend(user);
    for (i, c) in caches(opts, base)?.into_iter().enumerate() {
        let layer = run_dir.join("cache").join(".runws-overlay").join(i.to_string());
        for d in ["upper", "work"] {
            std::fs::create_dir_all(layer.join(d)).ctx("cannot create", layer.join(d))?;
        }
        if let Some((u, g)) = host_ids {
            // The overlay's root takes the owner of its upper layer: the
            // unprivileged id a root command runs as (see `prepare`).
            std::os::unix::fs::chown(layer.join("upper"), Some(u), Some(g))
                .ctx("cannot chown", layer.join("upper"))?;
        }
        if ops.iter().any(|op| op.target() == c.target) {
            return Err(Error::Usage(format!("--cache mount point `{}` is used twice", c.target.display())));
        }
        ops.push(MountOp::Overlay {
            lower: c.dir,
            upper: layer.join("upper"),
            work: layer.join("work"),
            target: c.target,
            userxattr: uid != 0,
        });
    }

    // The command and runws itself must stay executable even when a hiding
    // mount covers them (a binary in ~/.cargo/bin, a script under /tmp).
    for x in visible {
        let covering = ops
            .iter()
            .filter(|op| mounts::is_within(x, op.target()))
            .max_by_key(|op| op.target().components().count());
        if matches!(covering, Some(MountOp::Tmpfs { .. } | MountOp::HideFile { .. } | MountOp::Dev { .. })) {
            ops.push(MountOp::Bind { source: x.clone(), target: x.clone(), writable: false, mapped: false });
        }
    }
    mounts::order(&mut ops);
    Ok(ops)
}

/// The file-system unix sockets the host is listening on, from the
/// kernel's list for runws's network namespace (`/proc/net/unix`), that
/// exist here as sockets. Sockets bound in another network namespace (a
/// container's) are not in that list. Anyone on the host may bind a socket
/// under any name, so the list is read as bytes and a name may hold spaces:
/// before, one name that was not UTF-8 made the whole list unreadable, and
/// no socket was hidden. Such a name itself cannot be carried in the plan
/// (its paths are text), so that one socket is left as it is rather than
/// refusing every sandbox on the host.
fn host_unix_sockets() -> Vec<PathBuf> {
    use std::os::unix::fs::FileTypeExt;
    let list = crate::fsx::read_kernel_bytes("/proc/net/unix").unwrap_or_default();
    let mut out: Vec<PathBuf> = unix_socket_paths(&list)
        .filter(|p| p.to_str().is_some())
        .filter(|p| std::fs::symlink_metadata(p).is_ok_and(|m| m.file_type().is_socket()))
        .collect();
    out.sort();
    out.dedup();
    out
}

/// The file-system paths in the text of `/proc/net/unix`: each line is
/// `Num RefCount Protocol Flags Type St Inode` (padded with spaces) and, for
/// a bound socket, one space and its name to the end of the line.
fn unix_socket_paths(list: &[u8]) -> impl Iterator<Item = PathBuf> + '_ {
    use std::os::unix::ffi::OsStrExt;
    list.split(|&b| b == b'\n').skip(1).filter_map(|line| {
        let mut rest = line;
        for _ in 0..7 {
            let start = rest.iter().position(|&b| b != b' ')?;
            rest = &rest[start..];
            let end = rest.iter().position(|&b| b == b' ')?;
            rest = &rest[end..];
        }
        let name = rest.strip_prefix(b" ")?;
        name.starts_with(b"/").then(|| PathBuf::from(std::ffi::OsStr::from_bytes(name)))
    })
}

/// The audit's environment: runws's own (the real `HOME`, caches and
/// config paths, as a plain command would see them), plus the run's
/// identity, ports and explicit grants. Values are never recorded.
fn audit_environment(spec: &mut Spec, m: &mut Manifest, run_dir: &Path) {
    let ours = |k: &str| {
        k.starts_with("RUNWS_")
            || k == "RUN_ID"
            || k == "PORT"
            || k.starts_with("PORT_")
            || k.starts_with("LISTEN_")
    };
    let granted: Vec<String> = m.env.iter().filter(|r| r.granted).map(|r| r.name.clone()).collect();
    let kept: Vec<(String, std::ffi::OsString)> =
        spec.env.drain(..).filter(|(k, _)| ours(k) || granted.contains(k)).collect();
    let mut vars: std::collections::BTreeMap<String, std::ffi::OsString> = std::env::vars_os()
        .filter_map(|(k, v)| k.into_string().ok().map(|k| (k, v)))
        .filter(|(k, _)| !ours(k))
        .collect();
    let mut path = run_dir.join("bin").into_os_string();
    if let Some(real) = vars.get("PATH") {
        path.push(":");
        path.push(real);
    }
    let mut record: Vec<EnvRecord> = m.env.iter().filter(|r| ours(&r.name) || r.granted).cloned().collect();
    for k in vars.keys() {
        if !granted.contains(k) {
            record.push(EnvRecord {
                name: k.clone(),
                granted: false,
                source: "inherited".into(),
                present: true,
            });
        }
    }
    vars.insert("PATH".into(), path);
    vars.extend(kept);
    record.sort_by(|a, b| a.name.cmp(&b.name));
    record.dedup_by(|a, b| a.name == b.name);
    m.env = record;
    spec.env = vars.into_iter().collect();
}

/// Rewrites `spec` so the child executes the init, which sets up the
/// namespaces and then executes the command. Records the settings in `m`.
pub fn prepare(
    opts: &Options,
    spec: &mut Spec,
    run: &RunDir,
    root: &Path,
    exe: &Path,
    own: Option<super::ns::Own>,
    m: &mut Manifest,
) -> Result<Setup> {
    let uid = nix::unistd::getuid().as_raw();
    let gid = nix::unistd::getgid().as_raw();
    // As root, the network namespace is made on another core while the
    // layout is computed and the child started (see `NetworkNamespace`);
    // the init, still root of the host, enters it. Otherwise the init makes
    // it inside its user namespace, which must own it.
    let pending_net =
        (uid == 0 && (opts.kind == Kind::Sandbox || opts.net == Net::Allow) && opts.net.isolated())
            .then(super::ns::NetworkNamespace::start)
            .and_then(|r| r.ok());
    let (own_userns, own_net) = match own {
        Some(o) => (Some(child::high_fd(o.userns)?), o.net),
        None => (None, None),
    };
    let run_dir = std::fs::canonicalize(run.path()).ctx("cannot resolve", run.path())?;
    let root = std::fs::canonicalize(root).ctx("cannot resolve", root)?;
    let exe = std::fs::canonicalize(exe).ctx("cannot resolve", exe)?;
    let program = std::fs::canonicalize(&spec.program).unwrap_or_else(|_| spec.program.clone());
    let base = std::env::current_dir().ctx("cannot read the current directory", ".")?;
    // As root, the command becomes uid 0 of a user namespace that maps it
    // to `nobody`: file permissions then treat it as no one in particular,
    // and the writable binds are id-mapped so what it writes belongs to root
    // on disk, as it would without the mapping.
    let mut missing = Vec::new();
    let mut host_ids = None;
    let mut userns = None;
    if uid == 0 && opts.kind == Kind::Sandbox {
        let (u, g) = super::ns::UNPRIVILEGED;
        match super::ns::unprivileged_namespace(u, g) {
            Ok(fd) => {
                userns = Some(child::high_fd(fd)?);
                host_ids = Some((u, g));
            }
            Err(r) if opts.try_mode => {
                missing.push(super::Missing { protection: r.protection.to_string(), why: r.why })
            }
            Err(r) => return Err(Error::Sandbox(r.to_string())),
        }
    }
    let mounts = match opts.kind {
        Kind::Sandbox => layout(opts, &run_dir, &root, uid, host_ids, &[exe.clone(), program], &base)?,
        Kind::Audit => Vec::new(),
    };
    if opts.kind == Kind::Audit {
        audit_environment(spec, m, run.path());
    }
    // A namespace the helper could not make is made by the init as usual.
    let made = match (pending_net, own_net) {
        (Some(p), _) => Some(p.finish()),
        (None, Some(o)) => Some(o.finish()),
        (None, None) => None,
    };
    let (net, unmade) = match made {
        Some(Ok(fd)) => (Some(child::high_fd(fd)?), None),
        Some(Err(r)) => (None, Some(r.to_string())),
        None => (None, None),
    };
    let proxy = match &opts.egress {
        Some(egress) => {
            let userns = own_userns.as_ref().map(std::os::fd::AsFd::as_fd);
            Some(proxy_in(egress, net.as_ref(), userns, unmade, spec, m)?)
        }
        None => None,
    };
    // PID 1 of the sandbox reports the command's wait status on this pipe
    // once everything the run started has ended: runws, its parent or its
    // grandparent, takes the run's end from it without waiting for the
    // namespaces to be torn down.
    let (report_r, report_w) =
        nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).ctx("cannot create pipe", "sandbox report")?;
    let report_w = child::high_fd(report_w)?;
    let report_raw = report_w.as_raw_fd();
    let plan = Plan {
        kind: opts.kind,
        try_mode: opts.try_mode,
        net: opts.net,
        user_namespace: uid != 0,
        uid,
        gid,
        runws_pid: std::process::id() as i32,
        program: spec.program.clone(),
        cwd: spec.cwd.clone(),
        run_dir: run_dir.clone(),
        mounts: mounts.clone(),
        allow_userns: opts.allow_userns,
        unprivileged: userns.as_ref().map(|fd| super::Unprivileged { userns_fd: fd.as_raw_fd() }),
        own_userns_fd: own_userns.as_ref().map(|fd| fd.as_raw_fd()),
        net_fd: net.as_ref().map(|fd| fd.as_raw_fd()),
        report_fd: Some(report_raw),
        landlock: None,
    };
    let in_process = opts.kind == Kind::Sandbox && (uid == 0 || own_userns.is_some());
    let (status_r, original_program) = hand_to_init(spec, &exe, &plan, in_process)?;
    spec.keep.extend(userns);
    spec.keep.extend(own_userns);
    spec.keep.extend(net);
    spec.keep.push(report_w);
    // As root the child is forked straight into a new PID namespace, as its
    // PID 1; otherwise only its own user namespace gives it the right to
    // make one, and it forks PID 1 into it.
    if spec.in_process.is_some() && uid == 0 {
        spec.pid_namespace = true;
    }
    let report = Some(report_r);

    let record = Record {
        user_namespace: uid != 0,
        layout: mounts,
        host_ids,
        backend: (opts.kind == Kind::Sandbox).then_some(super::Backend::Namespaces),
        enforced: if opts.kind == Kind::Sandbox { namespace_protections(opts.net) } else { Vec::new() },
        ..asked(opts)
    };
    put_record(m, record)?;
    // Shared cache locks, held for the run's life: `cache warm` (exclusive)
    // never rewrites a cache a live run shows.
    let mut cache_locks = Vec::new();
    if opts.kind == Kind::Sandbox {
        for c in caches(opts, &base)? {
            cache_locks.push(crate::cache::lock(&c.dir, false)?);
        }
    }
    let broker = broker::Server::bind(run)?;
    Ok(Setup {
        _cache_locks: cache_locks,
        kind: opts.kind,
        status: Some(status_r),
        report,
        reported: std::cell::Cell::new(None),
        broker: Some(broker),
        program: original_program,
        json: opts.json,
        missing,
        git_common: None,
        landlock: false,
        filling: None,
        proxy,
    })
}

/// The proxy of `--net allow` (or `audit --net`): a socket listening in
/// the run's network namespace `net`, made before the command starts; its
/// address goes into the command's environment and the record. A
/// namespace or proxy that cannot be made refuses the run, whatever
/// `--sandbox=try` says: without them the command would have the host's
/// network.
fn proxy_in(
    egress: &crate::egress::Egress,
    net: Option<&OwnedFd>,
    userns: Option<std::os::fd::BorrowedFd<'_>>,
    unmade: Option<String>,
    spec: &mut Spec,
    m: &mut Manifest,
) -> Result<crate::egress::Pending> {
    use std::os::fd::AsFd;
    let Some(net) = net else {
        let why = unmade.unwrap_or_else(|| "runws could not make it before the command".into());
        return Err(Error::Sandbox(format!("--net allow: no network namespace for the proxy: {why}")));
    };
    let names = crate::egress::var_names();
    if let Some(r) = m.env.iter().find(|r| r.granted && names.contains(&r.name.as_str())) {
        return Err(Error::Usage(format!(
            "`{}` is set by --net (the address of the run's proxy); it cannot be granted with --{} too",
            r.name, r.source
        )));
    }
    let fd = crate::sys::ns::listener_in(net.as_fd(), userns)
        .map_err(|e| Error::Sandbox(format!("--net allow: cannot start the proxy: {e}")))?;
    let listener = std::net::TcpListener::from(fd);
    let port = listener
        .local_addr()
        .map_err(|e| Error::Sandbox(format!("--net allow: cannot read the proxy's address: {e}")))?
        .port();
    let vars = crate::egress::vars(port);
    spec.env.retain(|(k, _)| !names.contains(&k.as_str()));
    m.env.retain(|r| !names.contains(&r.name.as_str()));
    for (k, v) in vars {
        spec.env.push((k.to_string(), v.into()));
        m.env.push(EnvRecord { name: k.into(), granted: false, source: "runws".into(), present: true });
    }
    m.env.sort_by(|a, b| a.name.cmp(&b.name));
    m.net = Some(egress.record(port));
    Ok(crate::egress::Pending { listener, port, egress: egress.clone() })
}

/// The sandbox record of what `opts` asked for, either backend; each fills
/// in what it did.
pub(super) fn asked(opts: &Options) -> Record {
    let shown = |v: &[PathBuf]| v.iter().map(|p| p.display().to_string()).collect();
    Record {
        kind: opts.kind,
        mode: mode_name(opts).into(),
        net: opts.net,
        user_namespace: false,
        rw: shown(&opts.rw),
        ro: shown(&opts.ro),
        hide: shown(&opts.hide),
        layout: Vec::new(),
        nested_userns: opts.allow_userns,
        host_ids: None,
        missing: Vec::new(),
        allow_import: None,
        backend: None,
        chosen_because: None,
        enforced: Vec::new(),
        not_covered: Vec::new(),
        landlock: None,
        extra: Default::default(),
    }
}

/// Puts `record` in the manifest; a path JSON cannot hold refuses the run
/// here, not at a later write.
pub(super) fn put_record(m: &mut Manifest, record: Record) -> Result<()> {
    serde_json::to_value(&record).map_err(|e| Error::Sandbox(format!("cannot record: {e}")))?;
    m.sandbox = Some(record);
    Ok(())
}

/// What enforces each protection of the namespace backend, for the record.
fn namespace_protections(net: Net) -> Vec<super::Enforced> {
    let e = |p: &str, by: &str| super::Enforced { protection: p.into(), by: by.into() };
    let mut out = vec![
        e("file system: writes only to the run's directories and --rw", "mount namespace (read-only binds)"),
        e("file system: the homes, ROOT and --hide unreadable", "mount namespace (empty tmpfs over them)"),
        e("a private /tmp, /var/tmp and /dev/shm", "mount namespace (tmpfs)"),
        e("other processes invisible, everything killed at the end", "PID namespace"),
    ];
    match net {
        Net::None => out.push(e("network: loopback only, host unix sockets hidden", "network namespace")),
        Net::Allow => out.push(e(
            "network: loopback only, host unix sockets hidden; out only to what --net allow names",
            "network namespace, and runws's proxy outside it (its only way out)",
        )),
        Net::Host => {}
    }
    out.push(e("no privileges: no capabilities, no new privileges", "user namespace and prctl"));
    out.push(e("system calls", "seccomp"));
    out
}

/// Rewrites `spec` so the child runs the sandbox's init with `plan`, which
/// then executes the command: in the forked child itself when `in_process`
/// (no exec of runws), or else as `runws __sandbox-init` reading the plan
/// from its descriptor. Not in process when the init must make its user
/// namespace: the forked child is a copy of runws, which stays non-dumpable
/// so that nobody reads the secrets of its memory and environment, and a
/// non-dumpable process cannot write its own uid_map; runws made it early
/// instead when it could, and the child enters it. Not for an audit either:
/// its command keeps every capability, and with them could read that
/// memory anyway. Returns the status pipe's reading end and the command's
/// program.
pub(super) fn hand_to_init(
    spec: &mut Spec,
    exe: &Path,
    plan: &Plan,
    in_process: bool,
) -> Result<(OwnedFd, PathBuf)> {
    let (status_r, status_w) =
        nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).ctx("cannot create pipe", "sandbox status")?;
    let status_w = child::high_fd(status_w)?;
    let plan_fd = child::high_fd(plan_file(plan)?)?;
    let mut env: Vec<(OsString, OsString)> =
        spec.env.iter().map(|(k, v)| (OsString::from(k), v.clone())).collect();
    if !spec.listen.is_empty() {
        // Set to the command's own pid by the init, as LISTEN_PID must be.
        env.push(("LISTEN_PID".into(), OsString::new()));
    }
    let (status_raw, plan_raw, report_raw) = (status_w.as_raw_fd(), plan_fd.as_raw_fd(), plan.report_fd);
    let (command, init_plan) = (spec.argv.clone(), plan.clone());
    spec.in_process = in_process.then(|| -> Box<dyn FnOnce(child::Gate) -> u8> {
        Box::new(move |gate| {
            // In the forked child these descriptors are the init's alone: the
            // plan's copy is not needed, the status and report pipes are
            // handed to it.
            let _ = nix::unistd::close(plan_raw);
            let report = report_raw.and_then(crate::sys::fd::claim_inherited);
            let Some(status) = crate::sys::fd::claim_inherited(status_raw) else {
                return crate::exit::FAILURE;
            };
            super::init::run(super::init::Start {
                status,
                plan: init_plan,
                command,
                env,
                report,
                gate: Some(gate),
            })
        })
    });
    let original_program = std::mem::replace(&mut spec.program, exe.to_path_buf());
    spec.argv = init_argv(exe, status_raw, plan_raw, &spec.argv);
    spec.keep.push(status_w);
    spec.keep.push(plan_fd);
    Ok((status_r, original_program))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A socket's name is the rest of its line: spaces and bytes that are
    /// not UTF-8 included; unnamed and abstract sockets are not paths.
    #[test]
    fn unix_socket_paths_keep_spaces_and_any_bytes() {
        use std::os::unix::ffi::OsStrExt;
        let mut list = b"Num       RefCount Protocol Flags    Type St Inode Path\n".to_vec();
        list.extend_from_slice(b"0000000000000000: 00000002 00000000 00010000 0001 01    21 /run/a b.sock\n");
        list.extend_from_slice(
            b"0000000000000000: 00000002 00000000 00010000 0001 01 12345 /tmp/\xff\xfe.sock\n",
        );
        list.extend_from_slice(b"0000000000000000: 00000003 00000000 00000000 0001 03  4567\n");
        list.extend_from_slice(b"0000000000000000: 00000002 00000000 00010000 0001 01  8910 @abstract\n");
        let got: Vec<PathBuf> = unix_socket_paths(&list).collect();
        assert_eq!(
            got,
            vec![
                PathBuf::from("/run/a b.sock"),
                PathBuf::from(std::ffi::OsStr::from_bytes(b"/tmp/\xff\xfe.sock"))
            ]
        );
    }

    /// A home is the sixth field of the first well-formed line naming the uid.
    #[test]
    fn home_in_reads_the_first_entry_of_the_uid() {
        let text = b"root:x:0:0:root:/root:/bin/bash\n\
                    broken:1000\n\
                    j:x:1001:1001:J\xfcrgen:/home/j\xfc:/bin/sh\n\
                    ann:x:1000:1000::/home/ann:/bin/sh\n\
                    again:x:1000:1000::/elsewhere:/bin/sh\n\
                    # comment\n\
                    nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin";
        assert_eq!(home_in(text, 0), Some(PathBuf::from("/root")));
        assert_eq!(home_in(text, 1000), Some(PathBuf::from("/home/ann")));
        assert_eq!(home_in(text, 65534), Some(PathBuf::from("/nonexistent")));
        assert_eq!(home_in(text, 42), None);
        assert_eq!(home_in(b"x:x:notanumber:0::/h:/bin/sh", 0), None);
        use std::os::unix::ffi::OsStrExt;
        assert_eq!(home_in(text, 1001), Some(PathBuf::from(std::ffi::OsStr::from_bytes(b"/home/j\xfc"))));
    }
}
