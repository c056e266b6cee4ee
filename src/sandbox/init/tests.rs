//! The init's plan, call by call, against the recording fake kernel: the
//! namespace steps of both paths (runws root, or an ordinary user with a
//! user namespace), PID 1's setup, and the command's last steps before
//! `execve`; with `--sandbox=try`, a refused protection is noted and the
//! steps go on, in `on` mode it ends the run.

use std::fs::File;
use std::io::{Read, Seek};
use std::os::fd::AsFd;
use std::path::PathBuf;

use super::*;
use crate::sandbox::kernel::fake::Fake;
use crate::sandbox::kernel::fake::logs::{
    DEFAULT_LAYOUT, PROC, USER_NAMESPACE, dev_binds, dev_clones, dev_tail,
};
use crate::sandbox::mounts::MountOp;

const RUNWS: i32 = 4242;

fn plan(kind: Kind, user_namespace: bool, net: Net) -> Plan {
    Plan {
        kind,
        try_mode: false,
        net,
        user_namespace,
        uid: if user_namespace { 1000 } else { 0 },
        gid: if user_namespace { 100 } else { 0 },
        runws_pid: RUNWS,
        program: "/usr/bin/make".into(),
        cwd: "/src".into(),
        run_dir: "/r/runs/x".into(),
        mounts: vec![MountOp::Tmpfs { target: "/tmp".into(), mode: 0o1777, writable: true }],
        allow_userns: false,
        unprivileged: None,
        own_userns_fd: None,
        net_fd: None,
        report_fd: None,
        landlock: None,
    }
}

/// A status pipe whose lines the test reads back.
struct Pipe {
    status: Status,
    read: File,
}

impl Pipe {
    fn new(try_mode: bool) -> Pipe {
        let file = tempfile::tempfile().unwrap();
        let read = file.try_clone().unwrap();
        Pipe { status: Status { file, try_mode }, read }
    }

    /// Every line sent so far.
    fn lines(&mut self) -> Vec<String> {
        let mut text = String::new();
        self.read.rewind().unwrap();
        self.read.read_to_string(&mut text).unwrap();
        text.lines().map(String::from).collect()
    }
}

fn missing(protection: &str, why: &str) -> String {
    serde_json::to_string(&Report::Missing(Missing { protection: protection.into(), why: why.into() }))
        .unwrap()
}

fn all() -> Entered {
    Entered { mount: true, pid: true, net: true }
}

/// The outer init of an ordinary user with `--net none`, call by call.
fn outer_of_a_user() -> Vec<&'static str> {
    let rest = [
        "pdeathsig kill",
        "unshare newns",
        "unshare newpid",
        "unshare newnet",
        "unshare newipc",
        "unshare newuts",
    ];
    [&["no_new_privs"][..], &USER_NAMESPACE, &rest].concat()
}

/// The outer init of an ordinary user (uid 1000, in `on` mode) whose
/// parent is `parent`: what it entered, its calls, and the lines it sent.
fn enter_as_a_user(kind: Kind, net: Net, parent: i32) -> (Option<Entered>, Vec<String>, Vec<String>) {
    let fake = Fake::user(1000);
    fake.set_parent(parent);
    let mut pipe = Pipe::new(false);
    let entered = enter_outer(&fake, &plan(kind, true, net), &mut pipe.status, Handed::default()).unwrap();
    (entered, fake.take(), pipe.lines())
}

/// An ordinary user's sandbox with `--net none`: no new privileges, the
/// user namespace and its maps, the parent-death signal (after the
/// credentials changed), then every other namespace.
#[test]
fn outer_steps_of_an_ordinary_user() {
    let (entered, log, lines) = enter_as_a_user(Kind::Sandbox, Net::None, RUNWS);
    assert_eq!(entered, Some(all()));
    assert_eq!(log, outer_of_a_user());
    assert!(lines.is_empty());
}

/// `--net host` keeps the host's network: no network namespace.
#[test]
fn net_host_makes_no_network_namespace() {
    let (entered, log, _) = enter_as_a_user(Kind::Sandbox, Net::Host, RUNWS);
    assert_eq!(entered, Some(Entered { mount: true, pid: true, net: false }));
    assert!(!log.iter().any(|l| l.contains("newnet")));
}

/// An audit keeps its privileges, IPC and host name: mount and PID
/// namespaces only.
#[test]
fn an_audit_enters_mount_and_pid_namespaces_only() {
    let (_, log, _) = enter_as_a_user(Kind::Audit, Net::Host, RUNWS);
    assert_eq!(log, [&USER_NAMESPACE[..], &["pdeathsig kill", "unshare newns", "unshare newpid"]].concat());
}

/// When runws died before the parent-death signal took effect, the outer
/// init goes no further.
#[test]
fn runws_gone_stops_the_outer_init() {
    let (entered, log, _) = enter_as_a_user(Kind::Sandbox, Net::None, 1);
    assert_eq!(entered, None);
    assert_eq!(log.last().unwrap(), "pdeathsig kill");
}

/// As root, runws forked the init as PID 1 and made the network namespace
/// already: it enters that one instead of making one; no user namespace.
#[test]
fn as_root_pid1_enters_the_network_namespace_runws_made() {
    let fake = Fake::new();
    let netns = File::open("/dev/null").unwrap();
    fake.name_fd(netns.as_fd(), "netns");
    let handed = Handed { userns: None, own_userns: None, net: Some(Ok(netns.as_fd())) };
    let mut pipe = Pipe::new(false);
    let entered =
        enter_as_pid1(&fake, &plan(Kind::Sandbox, false, Net::None), &mut pipe.status, handed).unwrap();
    assert_eq!(entered, all());
    assert_eq!(
        fake.take(),
        ["no_new_privs", "unshare newns", "setns netns newnet", "unshare newipc", "unshare newuts"]
    );
    // Without it (the helper failed), a fresh one.
    enter_as_pid1(&fake, &plan(Kind::Sandbox, false, Net::None), &mut pipe.status, Handed::default())
        .unwrap();
    assert_eq!(fake.take()[2], "unshare newnet");
}

/// A network namespace descriptor that is not open is refused in `on`
/// mode, and noted as missing with `--sandbox=try`.
#[test]
fn a_closed_network_descriptor() {
    let handed = Handed { userns: None, own_userns: None, net: Some(Err(42)) };
    let fake = Fake::new();
    let mut pipe = Pipe::new(false);
    let r =
        enter_as_pid1(&fake, &plan(Kind::Sandbox, false, Net::None), &mut pipe.status, handed).unwrap_err();
    assert_eq!(r.to_string(), "cannot set up the network namespace: descriptor 42 is not open");
    assert_eq!(fake.take(), ["no_new_privs", "unshare newns"]);

    let mut pipe = Pipe::new(true);
    let entered =
        enter_as_pid1(&fake, &plan(Kind::Sandbox, false, Net::None), &mut pipe.status, handed).unwrap();
    assert_eq!(entered, Entered { mount: true, pid: true, net: false });
    assert_eq!(fake.take(), ["no_new_privs", "unshare newns", "unshare newipc", "unshare newuts"]);
    assert_eq!(pipe.lines(), [missing("network namespace", "descriptor 42 is not open")]);
}

/// `--sandbox=try` goes past each refused step, records what was missing
/// and why, and takes every later step; what depends on a missing
/// namespace is not attempted.
#[test]
fn try_mode_continues_past_refused_steps() {
    let fake = Fake::user(1000);
    fake.set_parent(RUNWS);
    fake.refuse("unshare newuser", libc::EPERM).refuse("unshare newnet", libc::EPERM);
    let mut p = plan(Kind::Sandbox, true, Net::None);
    p.try_mode = true;
    let mut pipe = Pipe::new(true);
    let entered = enter_outer(&fake, &p, &mut pipe.status, Handed::default()).unwrap().unwrap();
    assert_eq!(entered, Entered { mount: true, pid: true, net: false });
    assert_eq!(
        fake.take(),
        [
            "no_new_privs",
            "unshare newuser = EPERM",
            "pdeathsig kill",
            "unshare newns",
            "unshare newpid",
            "unshare newnet = EPERM",
            "unshare newipc",
            "unshare newuts",
        ]
    );
    assert_eq!(
        pipe.lines(),
        [
            missing("user namespace", "user namespaces are disabled (unshare: EPERM)"),
            missing("network namespace", "unshare: EPERM: Operation not permitted"),
        ]
    );
    // Without a network namespace, `lo` is left alone.
    fake.set_parent(0);
    set_up(&fake, &p, &mut pipe.status, &entered, RUNWS, Handed::default()).unwrap();
    assert!(!fake.take().iter().any(|l| l.contains("socket")));
}

/// In `on` mode the first refused step ends the setup: nothing after it is
/// attempted, nothing is noted as missing, and the refusal is the report.
#[test]
fn on_mode_fails_at_a_refused_step() {
    let fake = Fake::user(1000);
    fake.set_parent(RUNWS);
    fake.refuse("unshare newpid", libc::EPERM);
    let mut pipe = Pipe::new(false);
    let r = enter_outer(&fake, &plan(Kind::Sandbox, true, Net::None), &mut pipe.status, Handed::default())
        .unwrap_err();
    assert_eq!(r.to_string(), "cannot set up the PID namespace: unshare: EPERM: Operation not permitted");
    assert_eq!(fake.take().last().unwrap(), "unshare newpid = EPERM");
    assert!(pipe.lines().is_empty());
}

/// PID 1's setup: the parent-death signal (its parent is outside the PID
/// namespace: pid 0), `lo` up, the mounts, `/proc` and its masks.
#[test]
fn pid1_sets_up_lo_the_mounts_and_proc() {
    let fake = Fake::user(1000);
    fake.set_parent(0);
    let mut pipe = Pipe::new(false);
    set_up(&fake, &plan(Kind::Sandbox, true, Net::None), &mut pipe.status, &all(), 77, Handed::default())
        .unwrap();
    let mounts = [
        "pdeathsig kill",
        "socket inet dgram",
        "ioctl [socket] lo flags up,loopback,running",
        "mount none on / (rec,private)",
        "setattr / +ro,nosuid,nodev recursive",
        "mount tmpfs on /tmp type tmpfs (nosuid,nodev) mode=1777",
    ];
    assert_eq!(fake.take(), [&mounts[..], &PROC].concat());
    // An outer init that died already: its PID 1 goes no further.
    fake.set_parent(1);
    let r =
        set_up(&fake, &plan(Kind::Sandbox, true, Net::None), &mut pipe.status, &all(), 77, Handed::default());
    assert_eq!(r.unwrap_err().to_string(), "cannot set up the PID namespace: the outer init is gone");
    assert_eq!(fake.take(), ["pdeathsig kill"]);
}

/// Without a mount namespace (`--sandbox=try`) no mount is made; an
/// audit's mounts are its own, staged after these steps; without a PID
/// namespace there is no fresh `/proc`, and the parent checked is the
/// outer init, by its pid.
#[test]
fn pid1_without_a_mount_namespace_mounts_nothing() {
    let fake = Fake::user(1000);
    fake.set_parent(0);
    let mut pipe = Pipe::new(true);
    let entered = Entered { mount: false, pid: true, net: false };
    set_up(&fake, &plan(Kind::Sandbox, true, Net::Host), &mut pipe.status, &entered, 9, Handed::default())
        .unwrap();
    assert_eq!(fake.take(), ["pdeathsig kill"]);
    let entered = Entered { mount: true, pid: true, net: false };
    set_up(&fake, &plan(Kind::Audit, true, Net::Host), &mut pipe.status, &entered, 9, Handed::default())
        .unwrap();
    assert_eq!(fake.take(), ["pdeathsig kill"]);
    let entered = Entered { mount: true, pid: false, net: false };
    fake.set_parent(9);
    set_up(&fake, &plan(Kind::Sandbox, true, Net::Host), &mut pipe.status, &entered, 9, Handed::default())
        .unwrap();
    let log = fake.take();
    assert!(log.contains(&"mount tmpfs on /tmp type tmpfs (nosuid,nodev) mode=1777".to_string()));
    assert!(!log.iter().any(|l| l.contains("proc")), "no fresh /proc without a PID namespace: {log:?}");
}

/// A `/proc` the kernel refuses: noted with `--sandbox=try` (and nothing
/// masked, the host's `/proc` being what the command sees), else the end.
#[test]
fn a_refused_proc() {
    let fake = Fake::user(1000);
    fake.set_parent(0);
    fake.refuse("mount proc", libc::EPERM);
    let mut pipe = Pipe::new(true);
    set_up(&fake, &plan(Kind::Sandbox, true, Net::Host), &mut pipe.status, &all(), 0, Handed::default())
        .unwrap();
    assert_eq!(
        fake.take().last().unwrap(),
        "mount proc on /proc type proc (rdonly,nosuid,nodev,noexec) = EPERM"
    );
    assert_eq!(
        pipe.lines(),
        [missing("private /proc", "cannot mount proc on `/proc`: EPERM: Operation not permitted")]
    );

    let mut pipe = Pipe::new(false);
    let r =
        set_up(&fake, &plan(Kind::Sandbox, true, Net::Host), &mut pipe.status, &all(), 0, Handed::default());
    assert_eq!(
        r.unwrap_err().to_string(),
        "cannot set up the private /proc: cannot mount proc on `/proc`: EPERM: Operation not permitted"
    );
}

/// A refused mount of the layout fails the run even with `--sandbox=try`:
/// a file system only partly protected would look protected.
#[test]
fn a_refused_mount_fails_try_mode_too() {
    let fake = Fake::user(1000);
    fake.set_parent(0);
    fake.refuse("mount tmpfs on /tmp", libc::EPERM);
    let mut pipe = Pipe::new(true);
    let r =
        set_up(&fake, &plan(Kind::Sandbox, true, Net::Host), &mut pipe.status, &all(), 0, Handed::default());
    assert!(
        r.unwrap_err()
            .to_string()
            .starts_with("cannot set up the read-only file system: cannot mount a tmpfs")
    );
    assert!(pipe.lines().is_empty());
}

fn confined<'a>(
    chroot: Option<&'a Path>,
    filtered: bool,
    listen_fds: i32,
    handed: Handed<'a>,
) -> Confine<'a> {
    Confine { chroot, filtered, listen_fds, handed }
}

/// The command's last steps as root: its working directory, descriptors
/// past the --listen sockets close on exec, the unprivileged ids, every
/// capability dropped; the filter went on before PID 1's word.
#[test]
fn the_command_as_root() {
    let fake = Fake::new();
    fake.dir("/src");
    let userns = File::open("/dev/null").unwrap();
    fake.name_fd(userns.as_fd(), "userns");
    let handed = Handed { userns: Some(userns.as_fd()), own_userns: None, net: None };
    let p = plan(Kind::Sandbox, false, Net::None);
    let mut pipe = Pipe::new(false);
    filter(&fake, &p, &mut pipe.status).unwrap();
    confine(&fake, &p, &mut pipe.status, confined(None, true, 2, handed)).unwrap();
    assert_eq!(
        fake.take(),
        [
            "seccomp",
            "chdir /src",
            "close_range 5.. cloexec",
            "setgroups []",
            "setns userns newuser",
            "setresgid 0",
            "setresuid 0",
            "capbset drop all",
            "ambient clear",
            "capset none",
        ]
    );
}

/// An ordinary user's command: no ids to change, and the filter last when
/// it was not installed early (`--allow-userns` lets nested user
/// namespaces through).
#[test]
fn the_command_of_an_ordinary_user() {
    let fake = Fake::user(1000);
    fake.dir("/src");
    let mut p = plan(Kind::Sandbox, true, Net::Host);
    p.allow_userns = true;
    let mut pipe = Pipe::new(false);
    confine(&fake, &p, &mut pipe.status, confined(None, false, 0, Handed::default())).unwrap();
    assert_eq!(
        fake.take(),
        [
            "chdir /src",
            "close_range 3.. cloexec",
            "capbset drop all",
            "ambient clear",
            "capset none",
            "seccomp allow_userns"
        ]
    );
}

/// The Landlock backend's command: no namespace to enter, every capability
/// dropped, the rules enforced, then the filter, which with `--net none`
/// lets only unix sockets be made.
#[test]
fn the_command_under_landlock() {
    let fake = Fake::user(1000);
    fake.dir("/src");
    let mut p = plan(Kind::Sandbox, false, Net::None);
    p.mounts.clear();
    p.landlock = Some(crate::sandbox::landlock::Rules {
        read: vec!["/usr".into(), "/etc".into()],
        files: Vec::new(),
        write: vec!["/r/runs/x/work".into()],
        devices: vec!["/dev/null".into()],
        deny_tcp: true,
    });
    let mut pipe = Pipe::new(false);
    confine(&fake, &p, &mut pipe.status, confined(None, false, 0, Handed::default())).unwrap();
    assert_eq!(
        fake.take(),
        [
            "chdir /src",
            "close_range 3.. cloexec",
            "capbset drop all",
            "ambient clear",
            "capset none",
            "landlock read 2 write 1 deny_tcp true",
            "seccomp unix_only"
        ]
    );
    // Refused rules refuse the run; with `--sandbox=try` they are noted.
    let fake = Fake::user(1000);
    fake.dir("/src").refuse("landlock", libc::EOPNOTSUPP);
    confine(&fake, &p, &mut Pipe::new(false).status, confined(None, false, 0, Handed::default()))
        .unwrap_err();
}

/// An audit's command enters the staged root and keeps what it has.
#[test]
fn the_command_of_an_audit() {
    let fake = Fake::user(1000);
    fake.dir("/src");
    let p = plan(Kind::Audit, true, Net::Host);
    let mut pipe = Pipe::new(false);
    filter(&fake, &p, &mut pipe.status).unwrap();
    let root = PathBuf::from("/r/runs/x/tmp/root");
    confine(&fake, &p, &mut pipe.status, confined(Some(&root), true, 0, Handed::default())).unwrap();
    assert_eq!(fake.take(), ["chroot /r/runs/x/tmp/root", "chdir /src"]);
}

/// The command's refusals: with `--sandbox=try` a refused capability drop
/// or filter is noted and the rest goes on; the unprivileged ids and the
/// working directory are never optional.
#[test]
fn the_command_refused() {
    let p = plan(Kind::Sandbox, true, Net::Host);
    let fake = Fake::user(1000);
    fake.dir("/src").refuse("capset", libc::EPERM).refuse("seccomp", libc::EINVAL);
    let mut pipe = Pipe::new(true);
    confine(&fake, &p, &mut pipe.status, confined(None, false, 0, Handed::default())).unwrap();
    assert_eq!(fake.take()[4..], ["capset none = EPERM", "seccomp = EINVAL"]);
    assert_eq!(
        pipe.lines(),
        [
            missing("capability drop", "capset: Operation not permitted (os error 1)"),
            missing("system-call filter", "prctl(PR_SET_SECCOMP): Invalid argument (os error 22)"),
        ]
    );

    let mut pipe = Pipe::new(false);
    let r = confine(&fake, &p, &mut pipe.status, confined(None, false, 0, Handed::default())).unwrap_err();
    let Report::Failed(why) = r else { panic!("{r:?}") };
    assert_eq!(why, "cannot set up the capability drop: capset: Operation not permitted (os error 1)");
    assert_eq!(fake.take().last().unwrap(), "capset none = EPERM");

    let fake = Fake::new();
    fake.dir("/src").refuse("setns", libc::EPERM);
    let userns = File::open("/dev/null").unwrap();
    let handed = Handed { userns: Some(userns.as_fd()), own_userns: None, net: None };
    let mut pipe = Pipe::new(true);
    let r = confine(
        &fake,
        &plan(Kind::Sandbox, false, Net::Host),
        &mut pipe.status,
        confined(None, true, 0, handed),
    );
    assert!(
        matches!(r, Err(Report::Failed(why)) if why.starts_with("cannot set up the unprivileged uid: setns"))
    );
    assert!(pipe.lines().is_empty());

    let fake = Fake::user(1000);
    let mut pipe = Pipe::new(true);
    let r = confine(&fake, &p, &mut pipe.status, confined(None, true, 0, Handed::default())).unwrap_err();
    let Report::Failed(why) = r else { panic!("{r:?}") };
    assert_eq!(why, "cannot enter the working directory `/src`: ENOENT: No such file or directory");
}

/// The whole plan of an ordinary user's `run --sandbox --net none`, from
/// the outer init to the `execve`, in one sequence.
#[test]
fn the_whole_plan_of_an_ordinary_user() {
    let fake = Fake::user(1000);
    fake.dir("/src").dir("/home/ann").dir("/r/runs/x/work");
    let mut p = plan(Kind::Sandbox, true, Net::None);
    p.mounts = vec![
        MountOp::Dev { target: "/dev".into() },
        MountOp::Tmpfs { target: "/tmp".into(), mode: 0o1777, writable: true },
        MountOp::Tmpfs { target: "/home/ann".into(), mode: 0o755, writable: false },
        MountOp::Bind {
            source: "/r/runs/x".into(),
            target: "/r/runs/x".into(),
            writable: false,
            mapped: true,
        },
        MountOp::Bind {
            source: "/r/runs/x/work".into(),
            target: "/r/runs/x/work".into(),
            writable: true,
            mapped: false,
        },
    ];
    mounts::order(&mut p.mounts);
    let mut pipe = Pipe::new(false);
    fake.set_parent(RUNWS);
    let entered = enter_outer(&fake, &p, &mut pipe.status, Handed::default()).unwrap().unwrap();
    fake.set_parent(0);
    filter(&fake, &p, &mut pipe.status).unwrap();
    set_up(&fake, &p, &mut pipe.status, &entered, RUNWS, Handed::default()).unwrap();
    confine(&fake, &p, &mut pipe.status, confined(None, true, 0, Handed::default())).unwrap();
    let owned = |lines: &[&str]| lines.iter().map(|l| l.to_string()).collect::<Vec<_>>();
    let mut want = owned(&outer_of_a_user());
    want.extend(owned(&[
        // The command, forked early, installs its filter meanwhile.
        "seccomp",
        "pdeathsig kill",
        "socket inet dgram",
        "ioctl [socket] lo flags up,loopback,running",
        "mount none on / (rec,private)",
        "open /dev (path,directory)",
    ]));
    want.extend(dev_clones());
    want.extend(owned(&[
        "open_tree /r/runs/x (clone,cloexec,recursive)",
        "open_tree /r/runs/x/work (clone,cloexec,recursive)",
        "setattr / +ro,nosuid,nodev recursive",
        "mount tmpfs on /dev type tmpfs (nosuid,nodev,noexec) mode=755",
    ]));
    want.extend(dev_binds());
    want.extend(dev_tail());
    want.extend(owned(&DEFAULT_LAYOUT));
    want.extend(owned(&["setattr /dev +ro", "setattr /home/ann +ro"]));
    want.extend(owned(&PROC));
    want.extend(owned(&[
        "chdir /src",
        "close_range 3.. cloexec",
        "capbset drop all",
        "ambient clear",
        "capset none",
    ]));
    assert_eq!(fake.take(), want);
    assert!(pipe.lines().is_empty());
}
