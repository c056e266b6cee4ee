//! `runws restore` against hostile archives and faults: killed at any
//! moment, archives that expand without bound, special files given as the
//! archive, and a full file system. Archives are built here, at test time.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

use crate::harness::*;

/// An AWS access key id the scanner must find, made at run time.
fn aws_key() -> String {
    const BASE32: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";
    let random = uuid::Uuid::now_v7().as_bytes().to_vec();
    let tail: String = random.iter().rev().take(16).map(|b| BASE32[(*b % 32) as usize] as char).collect();
    format!("{}{tail}", "AKIA")
}

/// Writes `<path>.sha256` the way `sha256sum` does.
fn write_checksum(path: &Path) {
    let mut hasher = Sha256::new();
    hasher.update(std::fs::read(path).unwrap());
    let digest: String = hasher.finalize().iter().map(|b| format!("{b:02x}")).collect();
    let name = path.file_name().unwrap().to_str().unwrap();
    std::fs::write(path.with_file_name(format!("{name}.sha256")), format!("{digest}  {name}\n")).unwrap();
}

/// A zstd tar archive at `path` (with its checksum) holding what `fill` adds.
fn archive(path: &Path, fill: impl FnOnce(&mut tar::Builder<zstd::Encoder<'static, std::fs::File>>)) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let enc = zstd::Encoder::new(std::fs::File::create(path).unwrap(), 3).unwrap();
    let mut b = tar::Builder::new(enc);
    fill(&mut b);
    b.into_inner().unwrap().finish().unwrap().sync_all().unwrap();
    write_checksum(path);
}

fn add(b: &mut tar::Builder<impl Write>, name: &str, size: u64, data: impl Read) {
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(tar::EntryType::Regular);
    h.set_size(size);
    h.set_mode(0o644);
    h.set_mtime(1_700_000_000);
    b.append_data(&mut h, name, data).unwrap();
}

/// Text that scans slowly enough to be interrupted: many lines, some with
/// scanner keywords, none a secret.
fn filler(seed: usize, len: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(len + 100);
    let mut i = seed;
    while out.len() < len {
        writeln!(out, "line {i} token_count={} password_hint=none ghp_ sk- AKIA xoxb eyJ", i * 7).unwrap();
        i += 1;
    }
    out.truncate(len);
    out
}

/// Files in `dir`, or none when it is absent.
fn names_in(dir: &Path) -> Vec<String> {
    if !dir.exists() {
        return Vec::new();
    }
    tree(dir)
}

/// Removes the staging directories a killed restore left beside `dir`.
fn remove_staging(dir: &Path) {
    let parent = dir.parent().unwrap();
    for e in std::fs::read_dir(parent).unwrap() {
        let e = e.unwrap();
        let name = e.file_name().to_string_lossy().into_owned();
        if name.contains(".restore-") {
            let _ = std::process::Command::new("chmod").arg("-R").arg("u+rwx").arg(e.path()).status();
            std::fs::remove_dir_all(e.path()).unwrap();
        }
    }
}

fn restore_cmd(env: &Env, archive: &Path, to: &Path, extra: &[&str]) -> std::process::Command {
    let mut args = vec!["restore", archive.to_str().unwrap(), "--to", to.to_str().unwrap()];
    args.extend_from_slice(extra);
    let mut c = env.cmd(&args);
    c.stdout(Stdio::null()).stderr(Stdio::null());
    c
}

/// Runs `runws restore` to its end; its duration.
fn timed_restore(env: &Env, archive: &Path, to: &Path) -> (Out, Duration) {
    let start = Instant::now();
    let out = env.run(&["restore", archive.to_str().unwrap(), "--to", to.to_str().unwrap()]);
    let took = start.elapsed();
    eprintln!("a whole restore of {} took {took:?}", archive.display());
    (out, took)
}

/// Kills restore after delays spread over a whole restore, 24 times; after
/// each kill `check` looks at DIR.
fn kill_loop(env: &Env, archive: &Path, to: &Path, full: Duration, mut check: impl FnMut(usize, Duration)) {
    const KILLS: u32 = 24;
    for i in 0..KILLS {
        let delay = full * i / (KILLS - 4);
        let mut child = restore_cmd(env, archive, to, &[]).spawn().unwrap();
        std::thread::sleep(delay);
        let _ = child.kill();
        child.wait().unwrap();
        check(i as usize, delay);
        remove_staging(to);
        if to.exists() {
            std::fs::remove_dir_all(to).unwrap();
        }
    }
}

/// The archive for the kill tests: 64 files of text, and one with an AWS key
/// at its very end, named to come last.
fn secret_archive(path: &Path, key: &str) -> usize {
    let files = 10;
    archive(path, |b| {
        for i in 0..files {
            let data = filler(i * 100_000, 32 * 1024);
            add(b, &format!("work/part-{i:03}.txt"), data.len() as u64, &data[..]);
        }
        let mut last = filler(0, 16 * 1024);
        writeln!(last, "\naws_access_key_id = {key}").unwrap();
        add(b, "work/zz-config.ini", last.len() as u64, &last[..]);
    });
    files + 1
}

#[test]
fn a_restore_killed_at_any_point_never_leaves_an_unscanned_secret_in_dir() {
    let env = Env::new();
    let key = aws_key();
    let archive = env.path("copies/run.tar.zst");
    secret_archive(&archive, &key);
    let to = env.path("restored");

    let (out, full) = timed_restore(&env, &archive, &to);
    out.code(82).stderr_has("aws-access-key-id");
    assert!(!out.stderr.contains(&key), "the secret was printed");
    assert!(names_in(&to).is_empty(), "a refused restore left {:?}", names_in(&to));
    remove_staging(&to);

    kill_loop(&env, &archive, &to, full, |i, delay| {
        let left = names_in(&to);
        assert!(
            left.is_empty(),
            "kill {i} after {delay:?} (a whole restore takes {full:?}) left {} entries in DIR, the secret among them: {}",
            left.len(),
            left.iter().any(|n| n.ends_with("zz-config.ini"))
        );
    });
}

#[test]
fn a_quarantine_restore_killed_at_any_point_leaves_dir_empty_or_whole_and_scanned() {
    let env = Env::new();
    let key = aws_key();
    let archive = env.path("archive/j/quarantine/run.tar.zst");
    let files = secret_archive(&archive, &key);
    let to = env.path("restored");

    // Restored whole, and the scan that ran before DIR was filled is shown.
    let (out, full) = timed_restore(&env, &archive, &to);
    out.ok().stderr_has("quarantine").stderr_has("work/zz-config.ini:").stderr_has("aws-access-key-id");
    assert!(!out.stderr.contains(&key), "the secret was printed");
    let whole = names_in(&to);
    assert_eq!(whole.len(), files + 1, "{whole:?}");
    std::fs::remove_dir_all(&to).unwrap();

    kill_loop(&env, &archive, &to, full, |i, delay| {
        let left = names_in(&to);
        assert!(
            left.is_empty() || left == whole,
            "kill {i} after {delay:?} left a partial DIR: {} of {} entries",
            left.len(),
            whole.len()
        );
    });
}

#[test]
fn restore_refuses_an_archive_that_expands_past_max_bytes() {
    let env = Env::new();
    // 64 MiB of zeros: a few kilobytes compressed.
    let bomb = env.path("bomb.tar.zst");
    archive(&bomb, |b| add(b, "zeros", 64 << 20, std::io::repeat(0).take(64 << 20)));
    assert!(std::fs::metadata(&bomb).unwrap().len() < 64 * 1024);
    let to = env.path("t");
    env.run(&["restore", bomb.to_str().unwrap(), "--to", to.to_str().unwrap(), "--max-bytes", "1MiB"])
        .code(125)
        .one_line_error()
        .stderr_has("bytes of file content")
        .stderr_has("--max-bytes");
    assert!(names_in(&to).is_empty(), "{:?}", names_in(&to));
    assert_eq!(tree(env.tmp.path()).iter().filter(|n| n.contains(".restore-")).count(), 0, "staging left");

    // The budget is the sum over files: two of 600 KiB pass 1 MiB together.
    let pair = env.path("pair.tar.zst");
    archive(&pair, |b| {
        for n in ["a", "b"] {
            add(b, n, 600 << 10, std::io::repeat(b'x').take(600 << 10));
        }
    });
    env.run(&["restore", pair.to_str().unwrap(), "--to", to.to_str().unwrap(), "--max-bytes", "1MiB"])
        .code(125)
        .stderr_has("--max-bytes");
    assert!(names_in(&to).is_empty());
    env.run(&["restore", pair.to_str().unwrap(), "--to", to.to_str().unwrap(), "--max-bytes", "2MiB"]).ok();
    assert_eq!(names_in(&to), ["a", "b"]);
}

#[test]
fn restore_applies_the_seals_default_byte_budget() {
    let env = Env::new();
    // A header that claims 300 MiB; the bytes never follow. Nothing but the
    // default budget tells this apart from a real, large file.
    let big = env.path("big.tar.zst");
    archive(&big, |b| {
        let mut h = tar::Header::new_gnu();
        h.set_path("huge").unwrap();
        h.set_size(300 << 20);
        h.set_mode(0o644);
        h.set_entry_type(tar::EntryType::Regular);
        h.set_cksum();
        b.get_mut().write_all(h.as_bytes()).unwrap();
    });
    let to = env.path("t");
    env.run(&["restore", big.to_str().unwrap(), "--to", to.to_str().unwrap()])
        .code(125)
        .one_line_error()
        .stderr_has("268435456 bytes of file content")
        .stderr_has("--max-bytes");
    assert!(!to.exists());
}

#[test]
fn restore_refuses_an_archive_with_more_entries_than_max_files() {
    let env = Env::new();
    let many = env.path("many.tar.zst");
    archive(&many, |b| {
        for i in 0..11 {
            add(b, &format!("d/f{i}"), 0, std::io::empty());
        }
    });
    let to = env.path("t");
    // Eleven files and the directory `d` made for them: twelve entries.
    env.run(&["restore", many.to_str().unwrap(), "--to", to.to_str().unwrap(), "--max-files", "11"])
        .code(125)
        .one_line_error()
        .stderr_has("more than 11 entries")
        .stderr_has("--max-files");
    assert!(names_in(&to).is_empty());
    env.run(&["restore", many.to_str().unwrap(), "--to", to.to_str().unwrap(), "--max-files", "12"]).ok();
    assert_eq!(names_in(&to).len(), 12);
}

#[test]
fn restore_refuses_headers_or_a_tail_that_expand_without_bound() {
    let env = Env::new();
    // A long-name header 64 MiB long: tar would read all of it into memory
    // before the entry it names is seen.
    let names = env.path("long-name.tar.zst");
    archive(&names, |b| {
        let mut h = tar::Header::new_gnu();
        h.set_path("././@LongLink").unwrap();
        h.set_entry_type(tar::EntryType::GNULongName);
        h.set_size(64 << 20);
        h.set_mode(0o644);
        h.set_cksum();
        b.get_mut().write_all(h.as_bytes()).unwrap();
        std::io::copy(&mut std::io::repeat(b'a').take(64 << 20), b.get_mut()).unwrap();
        add(b, "f", 1, &b"x"[..]);
    });
    // A small archive, then 64 MiB of zeros after its end.
    let tail = env.path("tail.tar.zst");
    archive(&tail, |b| {
        add(b, "f", 1, &b"x"[..]);
        b.finish().unwrap();
        std::io::copy(&mut std::io::repeat(0).take(64 << 20), b.get_mut()).unwrap();
    });
    for (archive, why) in
        [(&names, "bytes that are neither its data nor an entry"), (&tail, "bytes that are neither")]
    {
        let to = env.path("t");
        let start = Instant::now();
        env.run(&["restore", archive.to_str().unwrap(), "--to", to.to_str().unwrap()])
            .code(125)
            .one_line_error()
            .stderr_has(why);
        assert!(!to.exists());
        eprintln!("{} refused after {:?}", archive.display(), start.elapsed());
    }
}

/// Runs `runws ARGS` for at most 10 s; a hang is a failure, not a stuck suite.
fn run_bounded(env: &Env, args: &[&str]) -> Out {
    let mut child = env.cmd(args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            child.wait().unwrap();
            panic!("`runws {}` hung", args.join(" "));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Out::from(child.wait_with_output().unwrap())
}

#[test]
fn a_fifo_directory_socket_or_device_given_as_the_archive_is_refused_at_once() {
    let env = Env::new();
    let dir = env.path("specials");
    std::fs::create_dir_all(&dir).unwrap();
    let empty_sum = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
    let fifo = dir.join("fifo.tar.zst");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    std::fs::create_dir(dir.join("dir.tar.zst")).unwrap();
    let _socket = std::os::unix::net::UnixListener::bind(dir.join("socket.tar.zst")).unwrap();
    std::os::unix::fs::symlink("/dev/null", dir.join("device.tar.zst")).unwrap();
    for name in ["fifo", "dir", "socket", "device"] {
        std::fs::write(dir.join(format!("{name}.tar.zst.sha256")), format!("{empty_sum}  {name}.tar.zst\n"))
            .unwrap();
    }
    for name in ["fifo", "dir", "socket", "device"] {
        let archive = dir.join(format!("{name}.tar.zst"));
        let to = env.path(&format!("to-{name}"));
        run_bounded(&env, &["restore", archive.to_str().unwrap(), "--to", to.to_str().unwrap()])
            .code(125)
            .one_line_error()
            .stderr_has("is not a regular file");
        assert!(!to.exists(), "{name}: DIR was made");
        run_bounded(&env, &["verify", archive.to_str().unwrap()])
            .code(125)
            .stderr_has("is not a regular file");
    }

    // A fifo as the checksum file hangs nothing either.
    let real = dir.join("real.tar.zst");
    archive(&real, |b| add(b, "f", 1, &b"x"[..]));
    std::fs::remove_file(dir.join("real.tar.zst.sha256")).unwrap();
    nix::unistd::mkfifo(&dir.join("real.tar.zst.sha256"), nix::sys::stat::Mode::from_bits_truncate(0o600))
        .unwrap();
    let to = env.path("to-real");
    run_bounded(&env, &["restore", real.to_str().unwrap(), "--to", to.to_str().unwrap()])
        .code(4)
        .one_line_error()
        .stderr_has("is not a regular file");
    assert!(!to.exists());
}

/// Mounts a tmpfs of `size` at `at`; unmounted on drop.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(at: &Path, size: &str) -> Tmpfs {
        std::fs::create_dir_all(at).unwrap();
        let data = format!("size={size},mode=0755");
        nix::mount::mount(
            Some("tmpfs"),
            at,
            Some("tmpfs"),
            nix::mount::MsFlags::empty(),
            Some(data.as_str()),
        )
        .unwrap();
        Tmpfs(at.to_path_buf())
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = nix::mount::umount2(&self.0, nix::mount::MntFlags::MNT_DETACH);
    }
}

#[test]
fn a_restore_that_fills_the_disk_leaves_dir_empty_and_no_staging() {
    if !is_root() {
        eprintln!(
            "skipped a_restore_that_fills_the_disk_leaves_dir_empty_and_no_staging: needs root to mount"
        );
        return;
    }
    let env = Env::new();
    let full = env.path("small");
    let _fs = Tmpfs::mount(&full, "4m");
    let archive_path = env.path("big.tar.zst");
    archive(&archive_path, |b| {
        for i in 0..8 {
            add(b, &format!("f{i}"), 1 << 20, std::io::repeat(b'y').take(1 << 20));
        }
    });
    // DIR absent, and DIR an existing empty directory.
    for existing in [false, true] {
        let to = full.join("restored");
        if existing {
            std::fs::create_dir(&to).unwrap();
        }
        env.run(&["restore", archive_path.to_str().unwrap(), "--to", to.to_str().unwrap()])
            .code(125)
            .one_line_error()
            .stderr_has("No space left on device");
        assert_eq!(to.exists(), existing);
        assert!(names_in(&to).is_empty());
        let left: Vec<String> = tree(&full).into_iter().filter(|n| n != "restored").collect();
        assert!(left.is_empty(), "left on the full file system: {left:?}");
    }
}

/// Entries beside `dir` left by a restore (its staging directories).
fn staging_beside(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir.parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".restore-"))
        .collect()
}

/// A few MiB of text and noise in several files, so that a byte in the
/// middle of the compressed archive lies inside some file's data.
fn plain_archive(path: &Path) {
    archive(path, |b| {
        for i in 0..6 {
            let mut data = filler(i * 10_000, 512 * 1024);
            let noise: Vec<u8> =
                (0..256 * 1024u32).map(|n| (n.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
            data.extend_from_slice(&noise);
            add(b, &format!("work/part-{i}.bin"), data.len() as u64, &data[..]);
        }
    });
}

/// The checksum is checked in the same pass as the extraction; an archive
/// damaged anywhere (a flipped byte the decompressor chokes on, one it
/// decodes into other bytes, a cut) still ends in the checksum error, with
/// nothing under DIR and no staging directory left.
#[test]
fn a_corrupted_or_truncated_archive_restores_nothing_and_fails_its_checksum() {
    let env = Env::new();
    let archive = env.path("copies/run.tar.zst");
    plain_archive(&archive);
    let good = std::fs::read(&archive).unwrap();
    let to = env.path("restored");
    env.run(&["restore", archive.to_str().unwrap(), "--to", to.to_str().unwrap()]).ok();
    std::fs::remove_dir_all(&to).unwrap();

    let mut damaged: Vec<(String, Vec<u8>)> = Vec::new();
    for at in [good.len() / 4, good.len() / 2, good.len() * 3 / 4, good.len() - 1] {
        let mut bytes = good.clone();
        bytes[at] ^= 0x10;
        damaged.push((format!("byte {at} of {} flipped", good.len()), bytes));
    }
    damaged.push(("cut in half".into(), good[..good.len() / 2].to_vec()));
    damaged.push(("cut to its first 100 bytes".into(), good[..100].to_vec()));
    let sum = std::fs::read(archive.with_file_name("run.tar.zst.sha256")).unwrap();
    for (what, bytes) in damaged {
        std::fs::write(&archive, &bytes).unwrap();
        assert_eq!(std::fs::read(archive.with_file_name("run.tar.zst.sha256")).unwrap(), sum);
        let out = env.run(&["restore", archive.to_str().unwrap(), "--to", to.to_str().unwrap()]);
        out.code(4).one_line_error().stderr_has("does not match its recorded sha256");
        assert!(!to.exists(), "{what}: DIR was made: {:?}", names_in(&to));
        assert!(staging_beside(&to).is_empty(), "{what}: left {:?}", staging_beside(&to));
    }
}

/// An archive made by tar directly, with a matching checksum, so no seal's
/// scan ever saw it: the scan during extraction finds the secret, reports
/// it, and nothing appears under DIR.
#[test]
fn an_archive_made_by_tar_holding_a_secret_restores_nothing_and_reports_it() {
    let env = Env::new();
    let key = aws_key();
    let archive = env.path("copies/run.tar.zst");
    secret_archive(&archive, &key);
    let to = env.path("restored");
    let out = env.run(&["restore", archive.to_str().unwrap(), "--to", to.to_str().unwrap()]);
    out.code(82).stderr_has("secret found: work/zz-config.ini:").stderr_has("aws-access-key-id");
    assert!(!out.stderr.contains(&key), "the secret was printed");
    assert!(!to.exists(), "DIR was made: {:?}", names_in(&to));
    assert!(staging_beside(&to).is_empty(), "left {:?}", staging_beside(&to));
}

/// Secrets that straddle every 64 KiB boundary of the file and of the
/// decompressed stream (the file's data starts 512 bytes in, after its
/// header), wherever the reads and the hand-over between the reading thread
/// and the extraction cut them, are each found once.
#[test]
fn a_secret_split_across_a_read_boundary_is_still_found() {
    let env = Env::new();
    let mut starts: Vec<usize> = Vec::new();
    for k in 1..=40usize {
        starts.push(k * 64 * 1024 - 10);
        starts.push(k * 64 * 1024 - 512 - 10);
    }
    starts.sort_unstable();
    let mut data: Vec<u8> = Vec::new();
    let mut keys = Vec::new();
    for start in starts {
        // Text lines up to two bytes before the key, then `x KEY`.
        let mut room = start - 2 - data.len();
        while room > 101 {
            data.extend_from_slice(&[b'.'; 99]);
            data.push(b'\n');
            room -= 100;
        }
        if room > 0 {
            data.extend(std::iter::repeat_n(b'-', room - 1));
            data.push(b'\n');
        }
        let key = aws_key();
        data.extend_from_slice(b"x ");
        assert_eq!(data.len(), start);
        data.extend_from_slice(key.as_bytes());
        data.push(b'\n');
        keys.push(key);
    }
    data.extend_from_slice(&[b'.'; 4096]);
    let archive = env.path("archive/j/quarantine/run.tar.zst");
    self::archive(&archive, |b| add(b, "work/split.txt", data.len() as u64, &data[..]));
    let to = env.path("restored");
    let out = env.run(&["restore", archive.to_str().unwrap(), "--to", to.to_str().unwrap()]);
    out.ok();
    let found = out.stderr.lines().filter(|l| l.contains("secret found: work/split.txt:")).count();
    assert_eq!(found, keys.len(), "{}", out.stderr);
    assert!(keys.iter().all(|k| !out.stderr.contains(k.as_str())), "a secret was printed");
    assert_eq!(std::fs::read(to.join("work/split.txt")).unwrap(), data);
}
