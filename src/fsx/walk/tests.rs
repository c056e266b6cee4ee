use std::fs;
use std::os::unix::fs::symlink;

use super::*;

fn tree() -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path().join("t");
    fs::create_dir_all(t.join("a/b/c")).unwrap();
    fs::write(t.join("a/b/c/deep"), b"x").unwrap();
    fs::write(t.join("a/f"), b"x").unwrap();
    fs::write(t.join("z"), b"x").unwrap();
    fs::create_dir(tmp.path().join("outside")).unwrap();
    fs::write(tmp.path().join("outside/secret"), b"x").unwrap();
    symlink(tmp.path().join("outside"), t.join("l")).unwrap();
    tmp
}

fn root(tmp: &tempfile::TempDir) -> Dir {
    Dir::open(tmp.path().join("t")).unwrap()
}

#[test]
fn a_symlink_is_reported_and_never_followed() {
    let tmp = tree();
    let seen = names_below(&Walk::new(), &root(&tmp));
    let want = [
        ("a", Kind::Dir),
        ("a/b", Kind::Dir),
        ("a/b/c", Kind::Dir),
        ("a/b/c/deep", Kind::File),
        ("a/f", Kind::File),
        ("l", Kind::Symlink),
        ("z", Kind::File),
    ];
    assert_eq!(seen, want.iter().map(|(n, k)| (n.to_string(), *k)).collect::<Vec<_>>());
}

#[test]
fn sorted_by_bytes_and_paths_are_shown_from_the_root() {
    let tmp = tempfile::tempdir().unwrap();
    for name in [&b"b"[..], b"B", b"\xe9", b"a.b", b"a"] {
        fs::write(tmp.path().join(std::ffi::OsStr::from_bytes(name)), b"").unwrap();
    }
    let dir = Dir::open(tmp.path()).unwrap();
    let mut seen = Vec::new();
    Walk::new()
        .run(&dir, |e| {
            assert_eq!(e.path(), tmp.path().join(e.rel));
            seen.push(e.name.as_bytes().to_vec());
            Ok::<_, Error>(Visit::Descend)
        })
        .unwrap();
    assert_eq!(seen, [&b"B"[..], b"a", b"a.b", b"b", b"\xe9"]);
    let mut listed = Vec::new();
    Walk::new()
        .order(Order::AsListed)
        .run(&dir, |e| {
            listed.push(e.name.as_bytes().to_vec());
            Ok::<_, Error>(Visit::Skip)
        })
        .unwrap();
    listed.sort();
    assert_eq!(listed, seen);
}

#[test]
fn a_directory_swapped_for_a_symlink_mid_walk_is_not_followed() {
    let tmp = tree();
    let t = tmp.path().join("t");
    let mut seen = Vec::new();
    let err = Walk::new()
        .run(&root(&tmp), |e| {
            seen.push(e.rel.to_path_buf());
            if e.rel == Path::new("a") {
                // Seen as a directory; a symlink out of the tree by the open.
                fs::rename(t.join("a"), tmp.path().join("moved")).unwrap();
                symlink(tmp.path().join("outside"), t.join("a")).unwrap();
            }
            Ok::<_, Error>(Visit::Descend)
        })
        .unwrap_err();
    assert!(matches!(&err, Error::Symlink { path } if *path == t.join("a")), "{err}");
    assert_eq!(seen, [PathBuf::from("a")]);
}

/// Passes over every failure, keeping it.
struct Lenient {
    seen: Vec<String>,
    failed: Vec<Failure>,
}

impl Visitor for Lenient {
    type Error = Error;
    fn entry(&mut self, e: &Entry<'_>) -> Result<Visit> {
        self.seen.push(e.rel.to_string_lossy().into_owned());
        Ok(Visit::Descend)
    }
    fn failed(&mut self, failure: Failure) -> Result<()> {
        self.failed.push(failure);
        Ok(())
    }
}

#[test]
fn the_depth_is_bounded() {
    let tmp = tree();
    let t = tmp.path().join("t");
    // Two levels entered: `a/b/c` is seen, not entered.
    let err = Walk::new().max_depth(2).run(&root(&tmp), |_| Ok::<_, Error>(Visit::Descend)).unwrap_err();
    assert_eq!(err.to_string(), format!("`{}` is nested more than 2 levels deep", t.join("a/b/c").display()));
    let mut v = Lenient { seen: Vec::new(), failed: Vec::new() };
    Walk::new().max_depth(2).run_with(&root(&tmp), &mut v).unwrap();
    assert_eq!(v.seen, ["a", "a/b", "a/b/c", "a/f", "l", "z"]);
    assert!(matches!(&v.failed[..], [Failure::TooDeep { path, limit: 2 }] if *path == t.join("a/b/c")));
    // Zero levels: the root's own entries only.
    let mut v = Lenient { seen: Vec::new(), failed: Vec::new() };
    Walk::new().max_depth(0).run_with(&root(&tmp), &mut v).unwrap();
    assert_eq!(v.seen, ["a", "l", "z"]);
}

#[test]
fn a_skipped_directory_is_not_entered() {
    let tmp = tree();
    let mut seen = Vec::new();
    Walk::new()
        .run(&root(&tmp), |e| {
            seen.push(e.rel.to_string_lossy().into_owned());
            Ok::<_, Error>(if e.rel == Path::new("a/b") { Visit::Skip } else { Visit::Descend })
        })
        .unwrap();
    assert_eq!(seen, ["a", "a/b", "a/f", "l", "z"]);
}

#[test]
fn named_entries_in_their_order_and_a_missing_one_is_gone() {
    let tmp = tree();
    let mut v = Lenient { seen: Vec::new(), failed: Vec::new() };
    let names = [OsStr::new("z"), OsStr::new("missing"), OsStr::new("a")];
    let mut kinds = Vec::new();
    struct Kinds<'a>(&'a mut Lenient, &'a mut Vec<Kind>);
    impl Visitor for Kinds<'_> {
        type Error = Error;
        fn entry(&mut self, e: &Entry<'_>) -> Result<Visit> {
            self.1.push(e.kind());
            self.0.entry(e)
        }
    }
    Walk::new().run_names(&root(&tmp), &names, &mut Kinds(&mut v, &mut kinds)).unwrap();
    assert_eq!(v.seen, ["z", "missing", "a", "a/b", "a/b/c", "a/b/c/deep", "a/f"]);
    assert_eq!(kinds[..3], [Kind::File, Kind::Gone, Kind::Dir]);
}

/// Unmounts on drop.
struct Mounted(PathBuf);

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = nix::mount::umount2(&self.0, nix::mount::MntFlags::MNT_DETACH);
    }
}

/// Mounts `what` on `at` (a tmpfs when `None`, else a bind mount); `None`
/// when this process may not mount (not root, or no mount privilege).
fn mount(what: Option<&Path>, at: &Path) -> Option<Mounted> {
    use nix::mount::MsFlags;
    if !nix::unistd::geteuid().is_root() {
        eprintln!("skipped: mounting needs root");
        return None;
    }
    let r = match what {
        None => nix::mount::mount(Some("tmpfs"), at, Some("tmpfs"), MsFlags::empty(), Some("size=1m")),
        Some(src) => nix::mount::mount(Some(src), at, None::<&str>, MsFlags::MS_BIND, None::<&str>),
    };
    match r {
        Ok(()) => Some(Mounted(at.to_path_buf())),
        Err(e) => {
            eprintln!("skipped: cannot mount here: {e}");
            None
        }
    }
}

#[test]
fn a_mount_is_entered_or_not_as_asked() {
    let tmp = tree();
    let t = tmp.path().join("t");
    fs::create_dir(t.join("m")).unwrap();
    fs::create_dir(t.join("bind")).unwrap();
    let Some(_tmpfs) = mount(None, &t.join("m")) else { return };
    fs::write(t.join("m/on-tmpfs"), b"x").unwrap();
    // A bind mount of the same file system: the same device, another mount.
    let Some(_bind) = mount(Some(&tmp.path().join("outside")), &t.join("bind")) else { return };

    let seen = |walk: Walk| {
        let mut seen = Vec::new();
        walk.run(&root(&tmp), |e| {
            seen.push(e.rel.to_string_lossy().into_owned());
            Ok::<_, Error>(Visit::Descend)
        })
        .unwrap();
        seen
    };
    // The mount points are seen, not entered.
    let stay = seen(Walk::new().mounts(Mounts::Stay));
    assert_eq!(stay, ["a", "a/b", "a/b/c", "a/b/c/deep", "a/f", "bind", "l", "m", "z"]);
    let cross = seen(Walk::new());
    assert!(cross.iter().any(|n| n == "m/on-tmpfs"), "{cross:?}");
    assert!(cross.iter().any(|n| n == "bind/secret"), "{cross:?}");
    // Each kind of mount is told apart from a plain directory.
    let dir = root(&tmp);
    assert!(dir.is_mount_point("m").unwrap() && dir.is_mount_point("bind").unwrap());
    assert!(!dir.is_mount_point("a").unwrap());
}
