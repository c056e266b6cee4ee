//! Round trips, targets and checksum files; then hostile archives, built
//! entry by entry with raw headers: each must be refused whole, leaving the
//! target empty and nothing written outside.

use std::ffi::OsStr;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use super::*;
use crate::exit;
use crate::seal::archive::{Format, NoInspection, PackOptions, pack, write_sha256_file};

fn opts(format: Format) -> PackOptions {
    PackOptions {
        format,
        max_bytes: 1 << 30,
        max_files: 10_000,
        deadline: None,
        include: ["manifest.json", "outputs", "work"].map(String::from).to_vec(),
        durable: true,
    }
}

fn sample_run(base: &Path) -> PathBuf {
    let run = base.join("run");
    fs::create_dir_all(run.join("work/sub/deep")).unwrap();
    fs::create_dir_all(run.join("outputs")).unwrap();
    fs::write(run.join("manifest.json"), b"{}\n").unwrap();
    fs::write(run.join("outputs/report.txt"), b"all good\n").unwrap();
    fs::write(run.join("work/sub/deep/data.bin"), vec![7u8; 300_000]).unwrap();
    fs::write(run.join("work/tool"), b"#!/bin/sh\n").unwrap();
    fs::set_permissions(run.join("work/tool"), fs::Permissions::from_mode(0o4750)).unwrap();
    fs::write(run.join(OsStr::from_bytes(b"work/caf\xe9")), b"latin-1 name").unwrap();
    fs::write(run.join(format!("work/{}", "n".repeat(150))), b"long name").unwrap();
    fs::set_permissions(run.join("work/sub"), fs::Permissions::from_mode(0o750)).unwrap();
    std::os::unix::fs::symlink("sub/deep/data.bin", run.join("work/link")).unwrap();
    run
}

fn sealed(base: &Path, format: Format) -> PathBuf {
    let run = sample_run(base);
    let dst = base.join(format!("r1.{}", format.extension()));
    let report = pack(&run, &dst, &opts(format), &mut NoInspection).unwrap();
    write_sha256_file(&dst, &report.archive_sha256).unwrap();
    dst
}

#[test]
fn round_trip_zst_into_absent_target() {
    let tmp = tempfile::tempdir().unwrap();
    let archive = sealed(tmp.path(), Format::Zst);
    let sha = verify(&archive).unwrap();
    assert_eq!(sha, hex(&Sha256::digest(fs::read(&archive).unwrap())));
    let target = tmp.path().join("restored");
    let report = restore(&archive, &target, None, Limits::default()).unwrap();
    assert_eq!(
        report,
        RestoreReport {
            files: 6,
            bytes: 3 + 9 + 300_000 + 10 + 12 + 9,
            from_quarantine: false,
            findings: Vec::new(),
            unscanned: Vec::new()
        }
    );
    let run = tmp.path().join("run");
    for f in ["manifest.json", "outputs/report.txt", "work/sub/deep/data.bin", "work/tool"] {
        assert_eq!(fs::read(target.join(f)).unwrap(), fs::read(run.join(f)).unwrap(), "{f}");
    }
    assert_eq!(fs::read(target.join(OsStr::from_bytes(b"work/caf\xe9"))).unwrap(), b"latin-1 name");
    assert_eq!(fs::read(target.join(format!("work/{}", "n".repeat(150)))).unwrap(), b"long name");
    assert_eq!(fs::read_link(target.join("work/link")).unwrap(), Path::new("sub/deep/data.bin"));
    assert_eq!(fs::metadata(target.join("work/tool")).unwrap().mode() & 0o7777, 0o750);
    assert_eq!(fs::metadata(target.join("work/sub")).unwrap().mode() & 0o7777, 0o750);
    let src_mtime = fs::metadata(run.join("outputs/report.txt")).unwrap().mtime();
    assert_eq!(fs::metadata(target.join("outputs/report.txt")).unwrap().mtime(), src_mtime);
    assert_eq!(leftovers(tmp.path()), ["r1.tar.zst", "r1.tar.zst.sha256", "restored", "run"]);
}

#[test]
fn round_trip_gz_into_empty_directory() {
    let tmp = tempfile::tempdir().unwrap();
    let archive = sealed(tmp.path(), Format::Gz);
    let target = tmp.path().join("restored");
    fs::create_dir(&target).unwrap();
    let report = restore(&archive, &target, None, Limits::default()).unwrap();
    assert_eq!(report.files, 6);
    assert_eq!(fs::read(target.join("outputs/report.txt")).unwrap(), b"all good\n");
}

#[test]
fn quarantine_is_decided_by_location() {
    let tmp = tempfile::tempdir().unwrap();
    let archive = sealed(tmp.path(), Format::Zst);
    let q = tmp.path().join("job/quarantine");
    fs::create_dir_all(&q).unwrap();
    fs::copy(&archive, q.join("r1.tar.zst")).unwrap();
    fs::copy(archive.with_file_name("r1.tar.zst.sha256"), q.join("r1.tar.zst.sha256")).unwrap();
    assert!(
        restore(&q.join("r1.tar.zst"), &tmp.path().join("a"), None, Limits::default())
            .unwrap()
            .from_quarantine
    );
    // A symlink from elsewhere does not launder a quarantined archive.
    let elsewhere = tmp.path().join("elsewhere");
    fs::create_dir(&elsewhere).unwrap();
    std::os::unix::fs::symlink(q.join("r1.tar.zst"), elsewhere.join("r1.tar.zst")).unwrap();
    fs::copy(q.join("r1.tar.zst.sha256"), elsewhere.join("r1.tar.zst.sha256")).unwrap();
    assert!(
        restore(&elsewhere.join("r1.tar.zst"), &tmp.path().join("b"), None, Limits::default())
            .unwrap()
            .from_quarantine
    );
    assert!(!restore(&archive, &tmp.path().join("c"), None, Limits::default()).unwrap().from_quarantine);
}

#[test]
fn target_must_be_absent_or_empty() {
    let tmp = tempfile::tempdir().unwrap();
    let archive = sealed(tmp.path(), Format::Zst);
    let full = tmp.path().join("full");
    fs::create_dir(&full).unwrap();
    fs::write(full.join("keep"), b"x").unwrap();
    let file = tmp.path().join("file");
    fs::write(&file, b"x").unwrap();
    let link = tmp.path().join("link");
    std::os::unix::fs::symlink(tmp.path().join("empty"), &link).unwrap();
    fs::create_dir(tmp.path().join("empty")).unwrap();
    for target in [&full, &file, &link] {
        let err = restore(&archive, target, None, Limits::default()).unwrap_err();
        assert!(matches!(err, Error::RestoreTarget { .. }), "{}: {err}", target.display());
    }
    assert_eq!(fs::read(full.join("keep")).unwrap(), b"x");
    assert_eq!(fs::read_dir(tmp.path().join("empty")).unwrap().count(), 0);
}

#[test]
fn archive_changed_by_one_byte_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let archive = sealed(tmp.path(), Format::Zst);
    let mut bytes = fs::read(&archive).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 1;
    fs::write(&archive, bytes).unwrap();
    let err = restore(&archive, &tmp.path().join("t"), None, Limits::default()).unwrap_err();
    assert!(matches!(err, Error::Integrity { .. }), "{err}");
    assert!(!tmp.path().join("t").exists());
}

#[test]
fn checksum_file_missing_or_naming_another_file() {
    let tmp = tempfile::tempdir().unwrap();
    let archive = sealed(tmp.path(), Format::Zst);
    let sum = archive.with_file_name("r1.tar.zst.sha256");
    let good = fs::read_to_string(&sum).unwrap();
    fs::write(&sum, good.replace("r1.tar.zst", "other.tar.zst")).unwrap();
    let err = verify(&archive).unwrap_err();
    assert!(matches!(err, Error::ChecksumFile { why: "names another file", .. }), "{err}");
    fs::write(&sum, "not a checksum\n").unwrap();
    assert!(matches!(verify(&archive), Err(Error::ChecksumFile { .. })));
    fs::remove_file(&sum).unwrap();
    let err = restore(&archive, &tmp.path().join("t"), None, Limits::default()).unwrap_err();
    assert!(matches!(err, Error::ChecksumFile { why: "is missing", .. }), "{err}");
    assert_eq!(err.exit_code(), exit::INTEGRITY);
    // `sha256sum`'s binary-mode marker is accepted.
    fs::write(&sum, good.replace("  r1", " *r1")).unwrap();
    verify(&archive).unwrap();
}

#[test]
fn unknown_compression_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let archive = tmp.path().join("x.tar");
    fs::write(&archive, vec![0u8; 1024]).unwrap();
    write_sha256_file(&archive, &hex(&Sha256::digest(vec![0u8; 1024]))).unwrap();
    let err = restore(&archive, &tmp.path().join("t"), None, Limits::default()).unwrap_err();
    assert!(matches!(err, Error::ArchiveFormat { .. }), "{err}");
}

#[test]
fn archives_made_by_gnu_tar_are_restored() {
    let tmp = tempfile::tempdir().unwrap();
    let run = sample_run(tmp.path());
    // GNU tar keeps the setuid bit, which a restore refuses.
    fs::set_permissions(run.join("work/tool"), fs::Permissions::from_mode(0o750)).unwrap();
    let archive = tmp.path().join("gnu.tar.gz");
    let st = std::process::Command::new("tar")
        .arg("-czf")
        .arg(&archive)
        .arg("-C")
        .arg(&run)
        .arg(".")
        .status()
        .unwrap();
    assert!(st.success());
    write_sha256_file(&archive, &hex(&Sha256::digest(fs::read(&archive).unwrap()))).unwrap();
    let target = tmp.path().join("t");
    let report = restore(&archive, &target, None, Limits::default()).unwrap();
    assert_eq!(report.files, 6);
    assert_eq!(fs::read(target.join("work/sub/deep/data.bin")).unwrap(), vec![7u8; 300_000]);
    assert_eq!(fs::read_link(target.join("work/link")).unwrap(), Path::new("sub/deep/data.bin"));
}

/// Names in `dir`, sorted: a refused restore leaves no staging directory.
fn leftovers(dir: &Path) -> Vec<String> {
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
