use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

use super::*;
use crate::hex::encode as hex;

pub(crate) fn opts(format: Format) -> PackOptions {
    PackOptions {
        format,
        max_bytes: 1 << 30,
        max_files: 10_000,
        deadline: None,
        include: ["manifest.json", "inputs", "outputs", "work", "logs"].map(String::from).to_vec(),
        durable: true,
    }
}

/// A small run directory with nested files, an inside symlink, a setuid
/// bit to strip, and a file in `tmp/`, which is not included.
pub(crate) fn sample_run(base: &Path) -> PathBuf {
    let run = base.join("run");
    for d in ["inputs", "outputs", "work/sub/deep", "logs", "tmp"] {
        fs::create_dir_all(run.join(d)).unwrap();
    }
    fs::write(run.join("manifest.json"), b"{\"run\":\"r1\"}\n").unwrap();
    fs::write(run.join("outputs/report.txt"), b"all good\n").unwrap();
    fs::write(
        run.join("work/sub/deep/data.bin"),
        (0..200_000u32).map(|i| (i * 7) as u8).collect::<Vec<u8>>(),
    )
    .unwrap();
    fs::write(run.join("logs/stdout.log"), b"line\n".repeat(1000)).unwrap();
    fs::write(run.join("tmp/scratch"), b"not packed").unwrap();
    fs::write(run.join("work/tool"), b"#!/bin/sh\n").unwrap();
    fs::set_permissions(run.join("work/tool"), fs::Permissions::from_mode(0o4755)).unwrap();
    symlink("sub/deep/data.bin", run.join("work/link")).unwrap();
    symlink("../outputs/report.txt", run.join("work/sub/up")).unwrap();
    run
}

fn sha_of(path: &Path) -> String {
    hex(&Sha256::digest(fs::read(path).unwrap()))
}

/// Names in `dir` other than `keep`: a failed pack must leave nothing behind.
fn leftovers(dir: &Path, keep: &[&str]) -> Vec<String> {
    fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| !keep.contains(&n.as_str()))
        .collect()
}

fn tar_list(archive: &Path, flag: &str) -> Vec<String> {
    let out = Command::new("tar").arg(flag).arg("-tvf").arg(archive).output().unwrap();
    assert!(out.status.success(), "tar failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap().lines().map(String::from).collect()
}

#[derive(Default)]
struct Recorder {
    current: Option<String>,
    seen: BTreeMap<String, Vec<u8>>,
    ended: usize,
}

impl Inspector for Recorder {
    fn begin_file(&mut self, rel: &str) {
        assert!(self.current.is_none(), "begin_file twice");
        self.current = Some(rel.to_string());
    }
    fn chunk(&mut self, data: &[u8]) {
        let name = self.current.clone().expect("chunk outside a file");
        self.seen.entry(name).or_default().extend_from_slice(data);
    }
    fn end_file(&mut self) {
        let name = self.current.take().expect("end_file without begin_file");
        self.seen.entry(name).or_default();
        self.ended += 1;
    }
}

#[test]
fn zst_archive_is_listed_by_gnu_tar_and_hashed_while_written() {
    let tmp = tempfile::tempdir().unwrap();
    let run = sample_run(tmp.path());
    let dst = tmp.path().join("r1.tar.zst");
    let mut rec = Recorder::default();
    let report = pack(&run, &dst, &opts(Format::Zst), &mut rec).unwrap();

    assert_eq!(report.archive_path, dst);
    assert_eq!(report.archive_sha256, sha_of(&dst));
    assert_eq!(report.archive_bytes, fs::metadata(&dst).unwrap().len());
    assert_eq!(report.files, 5);
    assert_eq!(report.bytes, 13 + 9 + 200_000 + 5000 + 10);
    assert!(report.excluded.is_empty());

    let listing = tar_list(&dst, "--zstd");
    let names: Vec<&str> = listing.iter().map(|l| l.split_whitespace().nth(5).unwrap()).collect();
    // Includes come in the caller's order, each directory's entries sorted.
    assert_eq!(
        names,
        [
            "manifest.json",
            "inputs/",
            "outputs/",
            "outputs/report.txt",
            "work/",
            "work/link",
            "work/sub/",
            "work/sub/deep/",
            "work/sub/deep/data.bin",
            "work/sub/up",
            "work/tool",
            "logs/",
            "logs/stdout.log",
        ]
    );
    for line in &listing {
        assert!(line.contains(" 0/0 "), "owner not normalised: {line}");
    }
    let tool = listing.iter().find(|l| l.ends_with("work/tool")).unwrap();
    assert!(tool.starts_with("-rwxr-xr-x"), "setuid kept: {tool}");
    assert!(listing.iter().any(|l| l.contains("work/link -> sub/deep/data.bin")));

    // The inspector saw every packed byte, file by file, once.
    assert_eq!(rec.ended, 5);
    assert_eq!(rec.seen["work/sub/deep/data.bin"], fs::read(run.join("work/sub/deep/data.bin")).unwrap());
    assert_eq!(rec.seen["manifest.json"], fs::read(run.join("manifest.json")).unwrap());

    // The checksum file is what `sha256sum -c` expects.
    write_sha256_file(&dst, &report.archive_sha256).unwrap();
    let check = Command::new("sha256sum")
        .arg("-c")
        .arg("r1.tar.zst.sha256")
        .current_dir(tmp.path())
        .output()
        .unwrap();
    assert!(check.status.success(), "{}", String::from_utf8_lossy(&check.stdout));
}

#[test]
fn gz_archive_is_extracted_by_gnu_tar() {
    let tmp = tempfile::tempdir().unwrap();
    let run = sample_run(tmp.path());
    let dst = tmp.path().join("r1.tar.gz");
    let report = pack(&run, &dst, &opts(Format::Gz), &mut NoInspection).unwrap();
    assert_eq!(report.archive_sha256, sha_of(&dst));
    assert_eq!(&fs::read(&dst).unwrap()[..2], [0x1f, 0x8b]);

    let out = tmp.path().join("out");
    fs::create_dir(&out).unwrap();
    let st = Command::new("tar").arg("-xzf").arg(&dst).arg("-C").arg(&out).status().unwrap();
    assert!(st.success());
    for f in ["manifest.json", "outputs/report.txt", "work/sub/deep/data.bin", "logs/stdout.log"] {
        assert_eq!(fs::read(out.join(f)).unwrap(), fs::read(run.join(f)).unwrap(), "{f}");
    }
    assert_eq!(fs::read_link(out.join("work/link")).unwrap(), Path::new("sub/deep/data.bin"));
    assert!(!out.join("tmp").exists());
}

#[test]
fn same_tree_gives_the_same_archive() {
    let tmp = tempfile::tempdir().unwrap();
    let run = sample_run(tmp.path());
    let a = pack(&run, &tmp.path().join("a.tar.zst"), &opts(Format::Zst), &mut NoInspection).unwrap();
    let b = pack(&run, &tmp.path().join("b.tar.zst"), &opts(Format::Zst), &mut NoInspection).unwrap();
    assert_eq!(a.archive_sha256, b.archive_sha256);
}

#[test]
fn never_packed_names_are_left_out_and_reported() {
    let tmp = tempfile::tempdir().unwrap();
    let run = sample_run(tmp.path());
    let secrets = [
        "work/.env",
        "work/.env.local",
        "work/a/server.pem",
        "work/.ssh/id_rsa",
        "work/.ssh/config",
        "work/.docker/config.json",
        "work/.npmrc",
        "work/.pypirc",
        "work/.netrc",
        "work/.git-credentials",
        "work/kubeconfig",
        "work/credentials.json",
        "outputs/id_ed25519",
    ];
    for s in secrets {
        let p = run.join(s);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(&p, b"SECRET").unwrap();
    }
    fs::write(run.join("work/.docker/daemon.json"), b"{}").unwrap();
    let dst = tmp.path().join("r.tar.zst");
    let mut rec = Recorder::default();
    let report = pack(&run, &dst, &opts(Format::Zst), &mut rec).unwrap();

    let listing = tar_list(&dst, "--zstd").join("\n");
    for s in secrets {
        assert!(!listing.contains(s), "{s} was packed");
        assert!(!rec.seen.contains_key(s), "{s} was read");
    }
    assert!(listing.contains(" work/a/\n"), "{listing}");
    assert!(listing.contains("work/.docker/daemon.json"));
    let mut excluded = report.excluded.clone();
    excluded.sort();
    let mut want: Vec<String> =
        secrets.iter().filter(|s| !s.starts_with("work/.ssh/")).map(|s| s.to_string()).collect();
    want.push("work/.ssh".into());
    want.sort();
    assert_eq!(excluded, want);
}

/// Packs and expects failure; checks nothing is left in the destination
/// directory (neither the archive nor a temp file).
#[track_caller]
fn pack_fails(run: &Path, opts: &PackOptions) -> Error {
    let out = run.parent().unwrap().join("out");
    fs::create_dir_all(&out).unwrap();
    let dst = out.join("r.tar.zst");
    let err = pack(run, &dst, opts, &mut NoInspection).expect_err("pack succeeded");
    assert!(!dst.exists(), "archive left behind after: {err}");
    assert_eq!(leftovers(&out, &[]), Vec::<String>::new(), "after: {err}");
    err
}

#[test]
fn too_many_entries_fails() {
    let tmp = tempfile::tempdir().unwrap();
    let run = sample_run(tmp.path());
    // 13 entries in the sample: 13 fit, 12 do not.
    let ok = pack(
        &run,
        &tmp.path().join("ok.tar.zst"),
        &PackOptions { max_files: 13, ..opts(Format::Zst) },
        &mut NoInspection,
    );
    assert!(ok.is_ok(), "{:?}", ok.err());
    let err = pack_fails(&run, &PackOptions { max_files: 12, ..opts(Format::Zst) });
    assert!(matches!(err, Error::PackBudget { what: "entries", limit: 12, .. }), "{err}");
}

#[test]
fn too_many_bytes_fails() {
    let tmp = tempfile::tempdir().unwrap();
    let run = sample_run(tmp.path());
    let total = 13 + 9 + 200_000 + 5000 + 10;
    let ok = pack(
        &run,
        &tmp.path().join("ok.tar.zst"),
        &PackOptions { max_bytes: total, ..opts(Format::Zst) },
        &mut NoInspection,
    );
    assert!(ok.is_ok(), "{:?}", ok.err());
    let err = pack_fails(&run, &PackOptions { max_bytes: total - 1, ..opts(Format::Gz) });
    assert!(matches!(err, Error::PackBudget { what: "bytes of file content", .. }), "{err}");
    assert!(err.to_string().contains("logs/stdout.log"), "{err}");
}

#[test]
fn fifo_fails() {
    let tmp = tempfile::tempdir().unwrap();
    let run = sample_run(tmp.path());
    nix::unistd::mkfifo(&run.join("work/pipe"), nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let err = pack_fails(&run, &opts(Format::Zst));
    assert!(matches!(&err, Error::SpecialFile { path } if path.ends_with("work/pipe")), "{err}");
}

#[test]
fn socket_fails() {
    let tmp = tempfile::tempdir().unwrap();
    let run = sample_run(tmp.path());
    let _sock = std::os::unix::net::UnixListener::bind(run.join("outputs/sock")).unwrap();
    let err = pack_fails(&run, &opts(Format::Zst));
    assert!(matches!(err, Error::SpecialFile { .. }), "{err}");
}

#[test]
fn escaping_symlinks_fail() {
    for (at, target) in [
        ("work/passwd", "/etc/passwd"),
        ("work/s", "../.."),
        ("outputs", "/tmp"),
        ("work/sub/deep/up", "../../../../x"),
        // Inside on its own, but `work/sub/l/..` is the run's parent.
        ("work/sub/l", "../.."),
    ] {
        let tmp = tempfile::tempdir().unwrap();
        let run = sample_run(tmp.path());
        if at == "outputs" {
            fs::remove_dir_all(run.join(at)).unwrap();
        }
        symlink(target, run.join(at)).unwrap();
        if at == "work/sub/l" {
            // `l` alone is accepted; the link through it is what escapes.
            symlink("sub/l/..", run.join("work/zz")).unwrap();
        }
        let err = pack_fails(&run, &opts(Format::Zst));
        assert!(matches!(err, Error::LinkEscapes { .. }), "{at} -> {target}: {err}");
    }
}

#[test]
fn deadline_passed_fails() {
    let tmp = tempfile::tempdir().unwrap();
    let run = sample_run(tmp.path());
    let past = Instant::now() - Duration::from_millis(1);
    let err = pack_fails(&run, &PackOptions { deadline: Some(past), ..opts(Format::Zst) });
    assert!(matches!(err, Error::PackDeadline { .. }), "{err}");
}

#[test]
fn existing_archive_is_not_replaced() {
    let tmp = tempfile::tempdir().unwrap();
    let run = sample_run(tmp.path());
    let dst = tmp.path().join("r.tar.zst");
    fs::write(&dst, b"earlier").unwrap();
    let err = pack(&run, &dst, &opts(Format::Zst), &mut NoInspection).unwrap_err();
    assert!(matches!(err, Error::ArchiveExists { .. }), "{err}");
    assert_eq!(fs::read(&dst).unwrap(), b"earlier");
}

#[test]
fn included_names_are_single_components() {
    let tmp = tempfile::tempdir().unwrap();
    let run = sample_run(tmp.path());
    for bad in ["../x", "a/b", "", ".."] {
        let o = PackOptions { include: vec![bad.to_string()], ..opts(Format::Zst) };
        assert!(pack(&run, &tmp.path().join("x.tar.zst"), &o, &mut NoInspection).is_err(), "{bad:?}");
    }
}
