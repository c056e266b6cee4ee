//! Round trips, targets and checksum files.

use std::ffi::OsStr;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use super::*;
use crate::exit;
use crate::restore::hostile_tests::leftovers;
use crate::seal::archive::{Format, NoInspection, PackOptions, pack, write_sha256_file};

fn opts(format: Format) -> PackOptions {
    PackOptions {
        format,
        max_bytes: 1 << 30,
        max_files: 10_000,
        deadline: None,
        include: ["manifest.json", "outputs", "work"].map(String::from).to_vec(),
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
            findings: Vec::new()
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
