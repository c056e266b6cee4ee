//! The layout's mounts, call by call, against the recording fake kernel.

use std::fs::File;
use std::os::fd::AsFd;

use super::*;
use crate::sandbox::kernel::fake::logs::{DEFAULT_LAYOUT, PROC, dev_binds, dev_clones, dev_tail};
use crate::sandbox::kernel::fake::{Fake, HOST_DEV, Node};

fn tmpfs_op(target: &str, mode: u32, writable: bool) -> MountOp {
    MountOp::Tmpfs { target: target.into(), mode, writable }
}

fn bind(path: &str, writable: bool, mapped: bool) -> MountOp {
    MountOp::Bind { source: path.into(), target: path.into(), writable, mapped }
}

/// The run directory of these tests, with one writable subdirectory.
const RUN: &str = "/r/runs/x";

/// What `build` did, or the refusal it ended with.
fn built(fake: &Fake, ops: &[MountOp], userns: Option<BorrowedFd<'_>>) -> Result<Vec<String>, String> {
    build(fake, ops, userns).map(|()| fake.take()).map_err(|r| r.to_string())
}

/// The default layout of an ordinary user: everything read-only, a
/// private /tmp, the home hidden, the run directory read-only at its top
/// and writable below. Private propagation comes first; every source is
/// cloned before `/` turns read-only; the hiding tmpfs is made read-only
/// last.
#[test]
fn read_only_root_private_tmp_hidden_home() {
    let fake = Fake::user(1000);
    fake.dir("/home/ann").dir(&format!("{RUN}/work"));
    let ops = [
        tmpfs_op("/tmp", 0o1777, true),
        tmpfs_op("/home/ann", 0o755, false),
        bind(RUN, false, true),
        bind(&format!("{RUN}/work"), true, false),
    ];
    let cloned = [
        "mount none on / (rec,private)",
        "open_tree /r/runs/x (clone,cloexec,recursive)",
        "open_tree /r/runs/x/work (clone,cloexec,recursive)",
        "setattr / +ro,nosuid,nodev recursive",
    ];
    assert_eq!(
        built(&fake, &ops, None).unwrap(),
        [&cloned[..], &DEFAULT_LAYOUT, &["setattr /home/ann +ro"]].concat()
    );
}

/// As root, the command is an unprivileged id: the run directory's top
/// level and every writable bind are id-mapped through its user namespace
/// (before anything is attached); a read-only bind is not.
#[test]
fn as_root_the_writable_binds_are_id_mapped() {
    let fake = Fake::new();
    fake.dir(&format!("{RUN}/work")).dir("/srv/data");
    let userns = File::open("/dev/null").unwrap();
    fake.name_fd(userns.as_fd(), "userns");
    let ops =
        [bind("/srv/data", false, false), bind(RUN, false, true), bind(&format!("{RUN}/work"), true, false)];
    assert_eq!(
        built(&fake, &ops, Some(userns.as_fd())).unwrap(),
        [
            "mount none on / (rec,private)",
            "open_tree /srv/data (clone,cloexec,recursive)",
            "open_tree /r/runs/x (clone,cloexec,recursive)",
            "setattr [/r/runs/x] +idmap recursive userns=userns",
            "open_tree /r/runs/x/work (clone,cloexec,recursive)",
            "setattr [/r/runs/x/work] +idmap recursive userns=userns",
            "setattr / +ro,nosuid,nodev recursive",
            "move_mount [/srv/data] to /srv/data",
            "setattr /srv/data +ro,nosuid,nodev recursive",
            "move_mount [/r/runs/x] to /r/runs/x",
            "setattr /r/runs/x +ro,nosuid,nodev recursive",
            "move_mount [/r/runs/x/work] to /r/runs/x/work",
            "setattr /r/runs/x/work +nosuid,nodev recursive",
        ]
    );
}

/// An id map the file system refuses is the unprivileged uid's refusal.
#[test]
fn a_refused_id_map_names_the_unprivileged_uid() {
    let fake = Fake::new();
    fake.dir("/srv/data").refuse("setattr [/srv/data] +idmap", libc::EINVAL);
    let userns = File::open("/dev/null").unwrap();
    let err = built(&fake, &[bind("/srv/data", true, false)], Some(userns.as_fd())).unwrap_err();
    assert!(
        err.starts_with("cannot set up the unprivileged uid: cannot id-map `/srv/data` (its file system"),
        "{err}"
    );
}

/// `--rw /data --hide /data/secret --ro /data/secret/pub`, given in any
/// order: parents first, so the hide covers the writable bind beneath it,
/// the read-only bind shows through the hide on a mount point made inside
/// its tmpfs, and the hide is made read-only once all is placed.
#[test]
fn rw_hide_ro_are_placed_parents_first() {
    let fake = Fake::user(1000);
    fake.dir("/data/secret/pub");
    let mut ops = [
        bind("/data/secret/pub", false, false),
        tmpfs_op("/data/secret", 0o755, false),
        bind("/data", true, false),
    ];
    order(&mut ops);
    assert_eq!(
        ops.iter().map(|op| op.target().to_str().unwrap()).collect::<Vec<_>>(),
        ["/data", "/data/secret", "/data/secret/pub"]
    );
    assert_eq!(
        built(&fake, &ops, None).unwrap(),
        [
            "mount none on / (rec,private)",
            "open_tree /data (clone,cloexec,recursive)",
            "open_tree /data/secret/pub (clone,cloexec,recursive)",
            "setattr / +ro,nosuid,nodev recursive",
            "move_mount [/data] to /data",
            "setattr /data +nosuid,nodev recursive",
            "mount tmpfs on /data/secret type tmpfs (nosuid,nodev) mode=755",
            "mkdir -p /data/secret",
            "mkdir /data/secret/pub",
            "move_mount [/data/secret/pub] to /data/secret/pub",
            "setattr /data/secret/pub +ro,nosuid,nodev recursive",
            "setattr /data/secret +ro",
        ]
    );
}

/// Equal depths keep the order they were given in.
#[test]
fn order_is_stable_among_equal_depths() {
    let mut ops = [
        bind("/b/x", true, false),
        tmpfs_op("/a", 0o755, false),
        bind("/a/y", false, false),
        bind("/c", true, false),
    ];
    order(&mut ops);
    let targets: Vec<_> = ops.iter().map(|op| op.target().to_str().unwrap()).collect();
    assert_eq!(targets, ["/a", "/c", "/b/x", "/a/y"]);
}

/// A hidden file is covered by a clone of `/dev/null` taken while the host's
/// `/dev` was visible; a file gone since the layout was made is skipped,
/// any other refusal is the run's.
#[test]
fn hidden_files() {
    let fake = Fake::user(1000);
    fake.file("/etc/shadow", "");
    let ops = [
        MountOp::HideFile { target: "/etc/shadow".into() },
        MountOp::HideFile { target: "/run/gone.sock".into() },
    ];
    assert_eq!(
        built(&fake, &ops, None).unwrap(),
        [
            "mount none on / (rec,private)",
            "open_tree /dev/null (clone,cloexec,recursive)",
            "open_tree /dev/null (clone,cloexec,recursive)",
            "setattr / +ro,nosuid,nodev recursive",
            "move_mount [/dev/null] to /etc/shadow",
            "setattr /etc/shadow +ro,nosuid,nodev,noexec",
            "move_mount [/dev/null] to /run/gone.sock = ENOENT",
        ]
    );
    fake.refuse("move_mount [/dev/null] to /etc/shadow", libc::EPERM);
    let err = built(&fake, &ops[..1], None).unwrap_err();
    assert_eq!(
        err,
        "cannot set up the read-only file system: cannot mount onto `/etc/shadow`: Operation not permitted (os error 1)"
    );
}

/// Root of the host makes the private `/dev`'s nodes with `mknod` on a
/// tmpfs that allows device nodes, then makes it read-only.
#[test]
fn private_dev_as_root_makes_its_nodes() {
    let fake = Fake::new();
    let mut want: Vec<String> = vec![
        "mount none on / (rec,private)".into(),
        "open /dev (path,directory)".into(),
        "setattr / +ro,nosuid,nodev recursive".into(),
        "mount tmpfs on /dev type tmpfs (nosuid,noexec) mode=755".into(),
    ];
    for (name, major, minor) in HOST_DEV {
        want.push(format!("mknod /dev/{name} c {major}:{minor} 666"));
        want.push(format!("chmod /dev/{name} 666"));
    }
    want.extend(dev_tail());
    want.push("setattr /dev +ro".into());
    assert_eq!(built(&fake, &[MountOp::Dev { target: "/dev".into() }], None).unwrap(), want);
    assert_eq!(fake.node("/dev/null"), Some(Node::Char(nix::sys::stat::makedev(1, 3), 0o666)));
    assert_eq!(fake.node("/dev/sda"), None);
}

/// In a user namespace no node can be made: each is a clone of the host's,
/// taken before the whole tree is `nodev`, bound on a `nodev` tmpfs and
/// left with its `nodev` cleared by nothing (the clone kept its own flags).
#[test]
fn private_dev_in_a_user_namespace_binds_the_host_nodes() {
    let fake = Fake::user(1000);
    let mut want: Vec<String> =
        vec!["mount none on / (rec,private)".into(), "open /dev (path,directory)".into()];
    want.extend(dev_clones());
    want.push("setattr / +ro,nosuid,nodev recursive".into());
    want.push("mount tmpfs on /dev type tmpfs (nosuid,nodev,noexec) mode=755".into());
    want.extend(dev_binds());
    want.extend(dev_tail());
    want.push("setattr /dev +ro".into());
    assert_eq!(built(&fake, &[MountOp::Dev { target: "/dev".into() }], None).unwrap(), want);
}

/// Root whose `mknod` is refused (a device controller) binds a clone of
/// the host's node taken late, and lifts the `nodev` it has by then.
#[test]
fn private_dev_as_root_without_mknod_binds_late_clones() {
    let fake = Fake::new();
    fake.refuse("mknod", libc::EPERM);
    let log = built(&fake, &[MountOp::Dev { target: "/dev".into() }], None).unwrap();
    assert_eq!(
        log[4..11],
        [
            "mknod /dev/null c 1:3 666 = EPERM",
            "unlink /dev/null = ENOENT",
            "open_tree /dev/null (clone,cloexec)",
            "mkdir -p /dev",
            "create /dev/null",
            "move_mount [/dev/null] to /dev/null",
            "setattr /dev/null +nosuid,noexec -nodev",
        ]
    );
    assert_eq!(log.len(), 4 + 6 * 7 + dev_tail().len() + 1);
}

/// `/dev/shm`, a child of the private `/dev`, is placed on it after it.
#[test]
fn dev_shm_goes_on_the_private_dev() {
    let fake = Fake::new();
    let mut ops = [tmpfs_op("/dev/shm", 0o1777, true), MountOp::Dev { target: "/dev".into() }];
    order(&mut ops);
    let log = built(&fake, &ops, None).unwrap();
    let tail: Vec<&str> = log.iter().rev().take(4).rev().map(String::as_str).collect();
    assert_eq!(
        tail,
        [
            "mkdir -p /dev",
            "mkdir /dev/shm",
            "mount tmpfs on /dev/shm type tmpfs (nosuid,nodev) mode=1777",
            "setattr /dev +ro"
        ]
    );
}

/// The sandbox's `/proc`: read-only as a whole, then every masked entry
/// this kernel has hidden (a file behind `/dev/null`, a directory behind a
/// read-only tmpfs); the others are skipped.
#[test]
fn proc_is_read_only_and_masked() {
    let fake = Fake::new();
    proc_fs(&fake).unwrap();
    mask_proc(&fake).unwrap();
    assert_eq!(fake.take(), PROC);
    fake.refuse("move_mount [/dev/null] to /proc/keys", libc::EPERM);
    let err = mask_proc(&fake).unwrap_err().to_string();
    assert_eq!(
        err,
        "cannot set up the masked /proc: cannot mount onto `/proc/keys`: Operation not permitted (os error 1)"
    );
    fake.refuse("mount proc", libc::EPERM);
    assert_eq!(
        proc_fs(&fake).unwrap_err().to_string(),
        "cannot set up the private /proc: cannot mount proc on `/proc`: EPERM: Operation not permitted"
    );
}

fn cache_op(userxattr: bool) -> MountOp {
    MountOp::Overlay {
        lower: "/var/cache/cargo".into(),
        upper: format!("{RUN}/cache/.runws-overlay/0/upper").into(),
        work: format!("{RUN}/cache/.runws-overlay/0/work").into(),
        target: "/cache".into(),
        userxattr,
    }
}

/// The mount of [`cache_op`]'s overlay, with its upper and work layers
/// at the descriptor paths `upper` and `work`.
fn overlay_mounted(upper: &str, work: &str) -> String {
    format!(
        "mount overlay on /cache type overlay (nosuid,nodev) lowerdir=/proc/self/fd/[/var/cache/cargo],\
         upperdir=/proc/self/fd/{upper},workdir=/proc/self/fd/{work}"
    )
}

/// A `--cache` of an ordinary user: its lower layer is opened before
/// anything is hidden, and the overlay is placed after every other mount
/// (the run's writable `cache/` holds its layers), with paths passed as
/// descriptors.
#[test]
fn caches_are_overlays_placed_last() {
    let fake = Fake::user(1000);
    fake.dir("/var/cache/cargo").dir("/cache").dir(&format!("{RUN}/cache/.runws-overlay/0/upper"));
    fake.dir(&format!("{RUN}/cache/.runws-overlay/0/work"));
    let ops = [cache_op(true), bind(&format!("{RUN}/cache"), true, false)];
    let layers = ["[/r/runs/x/cache/.runws-overlay/0/upper]", "[/r/runs/x/cache/.runws-overlay/0/work]"];
    let overlay = overlay_mounted(layers[0], layers[1]) + ",userxattr";
    let steps = [
        "mount none on / (rec,private)",
        "open /var/cache/cargo (path,directory)",
        "open_tree /r/runs/x/cache (clone,cloexec,recursive)",
        "setattr / +ro,nosuid,nodev recursive",
        "move_mount [/r/runs/x/cache] to /r/runs/x/cache",
        "setattr /r/runs/x/cache +nosuid,nodev recursive",
        "open /r/runs/x/cache/.runws-overlay/0/upper (path,directory)",
        "open /r/runs/x/cache/.runws-overlay/0/work (path,directory)",
    ];
    assert_eq!(built(&fake, &ops, None).unwrap(), [&steps[..], &[overlay.as_str()]].concat());
}

/// As root, a cache's lower layer is an id-mapped clone and its layers a
/// clone of their directory, so copies up belong to the command.
#[test]
fn caches_as_root_go_through_id_mapped_clones() {
    let fake = Fake::new();
    fake.dir("/var/cache/cargo").dir("/cache").dir(&format!("{RUN}/cache/.runws-overlay/0/upper"));
    let userns = File::open("/dev/null").unwrap();
    fake.name_fd(userns.as_fd(), "userns");
    let layers = ["[/r/runs/x/cache/.runws-overlay/0]/upper", "[/r/runs/x/cache/.runws-overlay/0]/work"];
    let overlay = overlay_mounted(layers[0], layers[1]);
    let steps = [
        "mount none on / (rec,private)",
        "open_tree /var/cache/cargo (clone,cloexec,recursive)",
        "setattr [/var/cache/cargo] +idmap recursive userns=userns",
        "open_tree /r/runs/x/cache/.runws-overlay/0 (clone,cloexec,recursive)",
        "setattr / +ro,nosuid,nodev recursive",
    ];
    assert_eq!(
        built(&fake, &[cache_op(false)], Some(userns.as_fd())).unwrap(),
        [&steps[..], &[overlay.as_str()]].concat()
    );
}

/// A mount the kernel refuses ends the build there, with what and where.
#[test]
fn a_refused_mount_stops_the_build() {
    let fake = Fake::user(1000);
    fake.dir("/home/ann").refuse("mount tmpfs on /tmp", libc::EPERM);
    let ops = [tmpfs_op("/tmp", 0o1777, true), tmpfs_op("/home/ann", 0o755, false)];
    assert_eq!(
        build(&fake, &ops, None).unwrap_err().to_string(),
        "cannot set up the read-only file system: cannot mount a tmpfs on `/tmp`: Operation not permitted (os error 1)"
    );
    assert_eq!(
        fake.take(),
        [
            "mount none on / (rec,private)",
            "setattr / +ro,nosuid,nodev recursive",
            "mount tmpfs on /tmp type tmpfs (nosuid,nodev) mode=1777 = EPERM",
        ]
    );
    fake.refuse("mount none on /", libc::EINVAL);
    assert_eq!(
        build(&fake, &ops, None).unwrap_err().to_string(),
        "cannot set up the mount namespace: cannot make `/` private: EINVAL: Invalid argument"
    );
}

/// A mount point missing outside any tmpfs cannot be made: the file system
/// is read-only by then, and the error says where.
#[test]
fn a_missing_mount_point_outside_a_tmpfs_is_refused() {
    let fake = Fake::user(1000);
    fake.dir("/opt/tool").refuse("mkdir /opt/new", libc::EROFS);
    let ops = [MountOp::Bind {
        source: "/opt/tool".into(),
        target: "/opt/new".into(),
        writable: false,
        mapped: false,
    }];
    assert_eq!(
        build(&fake, &ops, None).unwrap_err().to_string(),
        "cannot set up the read-only file system: cannot create the mount point `/opt/new`: \
         Read-only file system (os error 30)"
    );
}
