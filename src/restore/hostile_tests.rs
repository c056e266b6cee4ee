//! Hostile archives, built entry by entry with raw headers: each must be
//! refused whole, leaving the target empty and nothing written outside.

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use super::*;
use crate::exit;
use crate::seal::archive::write_sha256_file;

/// Names in `dir`, sorted: a refused restore leaves no staging directory.
pub(super) fn leftovers(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> =
        fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    names
}

/// One raw tar entry, written without the checks `tar::Builder` makes.
struct Raw {
    name: Vec<u8>,
    kind: tar::EntryType,
    mode: u32,
    link: Vec<u8>,
    data: Vec<u8>,
}

impl Raw {
    fn file(name: &str, data: &[u8]) -> Raw {
        Raw {
            name: name.into(),
            kind: tar::EntryType::Regular,
            mode: 0o644,
            link: vec![],
            data: data.to_vec(),
        }
    }
    fn dir(name: &str) -> Raw {
        Raw { name: name.into(), kind: tar::EntryType::Directory, mode: 0o755, link: vec![], data: vec![] }
    }
    fn symlink(name: &str, target: &str) -> Raw {
        Raw {
            name: name.into(),
            kind: tar::EntryType::Symlink,
            mode: 0o777,
            link: target.into(),
            data: vec![],
        }
    }
    fn hardlink(name: &str, target: &str) -> Raw {
        Raw { name: name.into(), kind: tar::EntryType::Link, mode: 0o644, link: target.into(), data: vec![] }
    }
    fn of(kind: tar::EntryType, name: &str, mode: u32) -> Raw {
        Raw { name: name.into(), kind, mode, link: vec![], data: vec![] }
    }
}

/// Writes `entries` as `base/a.tar.zst` with a correct `.sha256`, and makes
/// `base/outside/`, where nothing may appear.
fn hostile(base: &Path, entries: &[Raw]) -> PathBuf {
    fs::create_dir_all(base.join("outside")).unwrap();
    let mut builder = tar::Builder::new(Vec::new());
    for e in entries {
        let mut h = tar::Header::new_gnu();
        h.as_old_mut().name[..e.name.len()].copy_from_slice(&e.name);
        h.as_old_mut().linkname[..e.link.len()].copy_from_slice(&e.link);
        h.set_entry_type(e.kind);
        h.set_mode(e.mode);
        h.set_size(e.data.len() as u64);
        h.set_mtime(1_700_000_000);
        if matches!(e.kind, tar::EntryType::Char | tar::EntryType::Block) {
            h.set_device_major(1).unwrap();
            h.set_device_minor(3).unwrap();
        }
        h.set_cksum();
        builder.append(&h, e.data.as_slice()).unwrap();
    }
    let tar_bytes = builder.into_inner().unwrap();
    let compressed = zstd::encode_all(tar_bytes.as_slice(), 3).unwrap();
    let archive = base.join("a.tar.zst");
    fs::write(&archive, &compressed).unwrap();
    write_sha256_file(&archive, &hex(&Sha256::digest(&compressed))).unwrap();
    archive
}

/// Restores a hostile archive into a fresh empty target and expects a
/// refusal naming `why`, the target still empty and nothing outside.
#[track_caller]
fn refused(entries: &[Raw], why: &str) {
    let tmp = tempfile::tempdir().unwrap();
    let base = tmp.path().join("b/c");
    fs::create_dir_all(&base).unwrap();
    let archive = hostile(&base, entries);
    let target = base.join("target");
    fs::create_dir(&target).unwrap();
    let err =
        restore(&archive, &target, None, Limits::default()).expect_err("restore accepted a hostile archive");
    assert!(matches!(err, Error::ArchiveRefused { .. }), "{err}");
    assert!(err.to_string().contains(why), "`{err}` does not say `{why}`");
    assert_eq!(fs::read_dir(&target).unwrap().count(), 0, "target not empty after: {err}");
    assert_eq!(fs::read_dir(base.join("outside")).unwrap().count(), 0, "wrote outside: {err}");
    assert_eq!(leftovers(&base), ["a.tar.zst", "a.tar.zst.sha256", "outside", "target"], "after: {err}");
    assert_eq!(leftovers(tmp.path()), ["b"]);
    assert_eq!(leftovers(&tmp.path().join("b")), ["c"]);
}

#[test]
fn names_leaving_the_target_are_refused() {
    refused(&[Raw::file("ok", b"1"), Raw::file("../../x", b"x")], "`..`");
    refused(&[Raw::file("../outside/x", b"x")], "`..`");
    refused(&[Raw::file("a/../../x", b"x")], "`..`");
    refused(&[Raw::file("/etc/x", b"x")], "absolute");
}

#[test]
fn absolute_name_inside_a_tempdir_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let outside = tmp.path().join("b/c/outside/x");
    refused(&[Raw::file(outside.to_str().unwrap(), b"x")], "absolute");
}

#[test]
fn symlinks_are_never_passed_through() {
    // The link itself escapes.
    refused(&[Raw::symlink("x", "/tmp/outside"), Raw::file("x", b"x")], "outside the target");
    refused(&[Raw::symlink("s", ".."), Raw::file("s/a/b", b"x")], "outside the target");
    refused(&[Raw::symlink("x", "../outside")], "outside the target");
    // The link stays inside, but a later entry would write through it.
    refused(
        &[Raw::dir("d"), Raw::symlink("s", "d"), Raw::file("s/a", b"x")],
        "passes through the symlink `s`",
    );
    refused(&[Raw::symlink("s", "."), Raw::file("s/s/a", b"x")], "passes through the symlink `s`");
    refused(&[Raw::dir("d"), Raw::symlink("x", "d"), Raw::file("x", b"x")], "appears twice");
    refused(&[Raw::dir("d"), Raw::symlink("x", "d"), Raw::dir("x")], "appears twice");
    refused(&[Raw::file("f", b"x"), Raw::file("f/a", b"x")], "below the file `f`");
}

#[test]
fn symlink_chains_leaving_the_target_are_refused() {
    // `a/b/l` alone is inside; `x` through it is the target's parent.
    refused(&[Raw::symlink("a/b/l", "../.."), Raw::symlink("x", "a/b/l/..")], "outside the target");
    // The same, with the link that makes `x` escape arriving after `x`.
    refused(
        &[Raw::symlink("x", "a/b/l/../outside"), Raw::symlink("a/b/l", "../..")],
        "outside the target once every entry is in place",
    );
}

#[test]
fn hard_links_must_point_at_earlier_files_inside() {
    refused(&[Raw::hardlink("h", "../outside/x")], "`..`");
    refused(&[Raw::hardlink("h", "/etc/passwd")], "absolute");
    refused(&[Raw::hardlink("h", "missing")], "not to a file extracted before it");
    refused(&[Raw::dir("d"), Raw::hardlink("h", "d")], "not to a file extracted before it");
    refused(
        &[Raw::dir("d"), Raw::symlink("s", "d"), Raw::hardlink("h", "s")],
        "not to a file extracted before it",
    );

    let tmp = tempfile::tempdir().unwrap();
    let archive = hostile(tmp.path(), &[Raw::file("a/f", b"same"), Raw::hardlink("g", "a/f")]);
    let target = tmp.path().join("t");
    assert_eq!(restore(&archive, &target, None, Limits::default()).unwrap().files, 2);
    assert_eq!(
        fs::metadata(target.join("g")).unwrap().ino(),
        fs::metadata(target.join("a/f")).unwrap().ino()
    );
}

#[test]
fn special_entries_and_privilege_bits_are_refused() {
    refused(&[Raw::of(tar::EntryType::Char, "null", 0o666)], "device node");
    refused(&[Raw::of(tar::EntryType::Block, "disk", 0o660)], "device node");
    refused(&[Raw::of(tar::EntryType::Fifo, "pipe", 0o644)], "fifo");
    refused(&[Raw::of(tar::EntryType::Continuous, "c", 0o644)], "entry type");
    refused(&[Raw { mode: 0o4755, ..Raw::file("suid", b"x") }], "setuid or setgid");
    refused(&[Raw { mode: 0o2755, ..Raw::dir("sgid") }], "setuid or setgid");
}

#[test]
fn duplicate_names_are_refused() {
    refused(&[Raw::file("a", b"1"), Raw::file("a", b"2")], "appears twice");
    refused(&[Raw::file("d/a", b"1"), Raw::file("./d//a", b"2")], "appears twice");
    refused(&[Raw::dir("d"), Raw::dir("d/")], "appears twice");
}

#[test]
fn implicit_parents_and_dot_entries_are_accepted() {
    let tmp = tempfile::tempdir().unwrap();
    let archive = hostile(
        tmp.path(),
        &[
            Raw::dir("./"),
            Raw::file("./x/y/z", b"z"),
            Raw { mode: 0o700, ..Raw::dir("x") },
            Raw::symlink("x/l", "y/z"),
        ],
    );
    let target = tmp.path().join("t");
    restore(&archive, &target, None, Limits::default()).unwrap();
    assert_eq!(fs::read(target.join("x/l")).unwrap(), b"z");
    assert_eq!(fs::metadata(target.join("x")).unwrap().mode() & 0o777, 0o700);
}

#[test]
fn checksum_mismatch_is_refused_before_extraction() {
    let tmp = tempfile::tempdir().unwrap();
    // Hostile content too: were it extracted first, the error would be a refusal.
    let archive = hostile(tmp.path(), &[Raw::file("../escape", b"x")]);
    let sum = archive.with_file_name("a.tar.zst.sha256");
    let text = fs::read_to_string(&sum).unwrap();
    let flipped = if text.starts_with('0') { "1" } else { "0" };
    fs::write(&sum, format!("{flipped}{}", &text[1..])).unwrap();
    let target = tmp.path().join("t");
    let err = restore(&archive, &target, None, Limits::default()).unwrap_err();
    assert!(matches!(err, Error::Integrity { .. }), "{err}");
    assert_eq!(err.exit_code(), exit::INTEGRITY);
    assert!(matches!(verify(&archive), Err(Error::Integrity { .. })));
    assert!(!target.exists());
    assert_eq!(leftovers(tmp.path()), ["a.tar.zst", "a.tar.zst.sha256", "outside"]);
}
