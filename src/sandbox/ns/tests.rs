//! The init's namespace and credential steps, call by call, against the
//! recording fake kernel.

use std::fs::File;
use std::os::fd::AsFd;

use super::*;
use crate::sandbox::kernel::fake::Fake;
use crate::sandbox::kernel::fake::logs::USER_NAMESPACE;

/// The user namespace first, then `setgroups` denied before `gid_map` is
/// written, the ids mapped to themselves.
#[test]
fn a_user_namespace_maps_the_ids_to_themselves() {
    let fake = Fake::user(1000);
    enter_user_namespace(&fake, 1000, 100).unwrap();
    assert_eq!(fake.take(), USER_NAMESPACE);
}

/// Each way the kernel refuses a user namespace is named for the user.
#[test]
fn a_refused_user_namespace_says_why() {
    for (errno, why) in [
        (libc::EPERM, "user namespaces are disabled (unshare: EPERM)"),
        (libc::ENOSPC, "user namespaces are disabled (user.max_user_namespaces is 0 or exhausted)"),
        (libc::EINVAL, "user namespaces are not supported by this kernel"),
        (libc::ENOMEM, "unshare: ENOMEM: Out of memory"),
    ] {
        let fake = Fake::user(1000);
        fake.refuse("unshare newuser", errno);
        let r = enter_user_namespace(&fake, 1000, 1000).unwrap_err();
        assert_eq!((r.protection, r.why.as_str()), ("user namespace", why));
        assert_eq!(fake.take().len(), 1, "nothing after the refusal");
    }
    let fake = Fake::user(1000);
    fake.refuse("write /proc/self/gid_map", libc::EPERM);
    let r = enter_user_namespace(&fake, 1000, 1000).unwrap_err();
    assert_eq!(r.why, "cannot write /proc/self/gid_map: Operation not permitted (os error 1)");
}

/// `lo` is brought up with the flags it had, plus up and running.
#[test]
fn loopback_comes_up() {
    let fake = Fake::user(1000);
    loopback_up(&fake).unwrap();
    assert_eq!(fake.take(), ["socket inet dgram", "ioctl [socket] lo flags up,loopback,running"]);
    fake.refuse("ioctl", libc::EPERM);
    let r = loopback_up(&fake).unwrap_err();
    assert_eq!(
        r.to_string(),
        "cannot set up the network namespace: cannot bring `lo` up: Operation not permitted (os error 1)"
    );
}

/// The parent-death signal, then whether the parent is the one expected.
#[test]
fn die_with_parent_checks_the_parent() {
    let fake = Fake::user(1000);
    fake.set_parent(42);
    assert!(die_with_parent(&fake, 42).unwrap());
    assert!(!die_with_parent(&fake, 7).unwrap());
    assert_eq!(fake.take(), ["pdeathsig kill", "pdeathsig kill"]);
}

/// Every capability set is emptied: bounding, ambient, then the rest.
#[test]
fn capabilities_are_dropped_in_order() {
    let fake = Fake::new();
    drop_capabilities(&fake).unwrap();
    assert_eq!(fake.take(), ["capbset drop all", "ambient clear", "capset none"]);
    fake.refuse("ambient", libc::EINVAL);
    let r = drop_capabilities(&fake).unwrap_err();
    assert_eq!(r.protection, "capability drop");
    assert_eq!(fake.take(), ["capbset drop all", "ambient clear = EINVAL"]);
}

/// A root command gives up its groups, enters the namespace that maps its
/// uid 0 to `nobody`, and becomes that 0 (the gid first, while the process
/// may still change it).
#[test]
fn becoming_unprivileged() {
    let fake = Fake::new();
    let userns = File::open("/dev/null").unwrap();
    fake.name_fd(userns.as_fd(), "userns");
    become_unprivileged(&fake, userns.as_fd()).unwrap();
    assert_eq!(fake.take(), ["setgroups []", "setns userns newuser", "setresgid 0", "setresuid 0"]);
    fake.refuse("setns", libc::EPERM);
    let r = become_unprivileged(&fake, userns.as_fd()).unwrap_err();
    assert_eq!(r.to_string(), "cannot set up the unprivileged uid: setns: EPERM: Operation not permitted");
}

/// Descriptors from `first` up are marked close-on-exec, not closed.
#[test]
fn inherited_descriptors_close_on_exec() {
    let fake = Fake::new();
    close_inherited(&fake, 5).unwrap();
    no_new_privs(&fake).unwrap();
    assert_eq!(fake.take(), ["close_range 5.. cloexec", "no_new_privs"]);
}
