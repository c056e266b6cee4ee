//! A seal larger than one read chunk and one zstd job: restored byte for
//! byte by `runws restore` and by GNU tar, and a secret anywhere in it,
//! across a chunk boundary or in a file's last bytes, still found.

use std::path::Path;

use crate::harness::*;

/// The seal reads files a mebibyte at a time.
const CHUNK: usize = 1 << 20;

/// Deterministic mixed text: words, numbers and punctuation, `len` bytes.
fn text(seed: u64, len: usize) -> Vec<u8> {
    const WORDS: [&str; 12] =
        ["fn", "let", "value", "buffer", "index", "offset", "path", "reader", "{", "}", ";", "0x1f"];
    let mut x = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    let mut out = Vec::with_capacity(len + 16);
    while out.len() < len {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let r = (x >> 33) as usize;
        out.extend_from_slice(WORDS[r % WORDS.len()].as_bytes());
        out.push(if r.is_multiple_of(9) { b'\n' } else { b' ' });
        if r.is_multiple_of(5) {
            out.extend_from_slice(format!("{}", r % 100_000).as_bytes());
        }
    }
    out.truncate(len);
    out
}

/// A token the scanner must find, built at run time.
fn github_token() -> String {
    format!("{}{}", "ghp_", "Zq8vL2mP0sXc4tBn7wRy".repeat(2).chars().take(36).collect::<String>())
}

fn same_files(a: &Path, b: &Path, names: &[&str]) {
    for n in names {
        let (x, y) = (std::fs::read(a.join(n)).unwrap(), std::fs::read(b.join(n)).unwrap());
        assert!(x == y, "{n} differs after the round trip ({} bytes against {})", x.len(), y.len());
    }
}

/// `runws restore` and `tar --zstd -xf` each give back the files `names`
/// of run `id` from `archive`, byte for byte.
fn both_restore_it(env: &Env, archive: &Path, id: &str, names: &[&str]) {
    let restored = env.path("restored");
    env.run(&["restore", archive.to_str().unwrap(), "--to", restored.to_str().unwrap()]).ok();
    same_files(&env.run_dir(id), &restored, names);
    let extracted = env.path("extracted");
    std::fs::create_dir_all(&extracted).unwrap();
    let out = std::process::Command::new("tar")
        .args(["--zstd", "-xf"])
        .arg(archive)
        .arg("-C")
        .arg(&extracted)
        .output()
        .unwrap();
    assert!(out.status.success(), "tar --zstd -xf: {}", String::from_utf8_lossy(&out.stderr));
    same_files(&env.run_dir(id), &extracted, names);
}

#[test]
fn a_seal_larger_than_one_zstd_job_restores_byte_identical_with_runws_and_gnu_tar() {
    let env = Env::new();
    env.run(&["run", "--run-id", "big", "--", "true"]).ok();
    let work = env.run_dir("big").join("work");
    // 12 MiB of text (more than one zstd job), 3 MiB of it in one file, plus
    // bytes that do not compress and small files.
    std::fs::create_dir_all(work.join("d")).unwrap();
    std::fs::write(work.join("big.txt"), text(1, 3 * CHUNK + 12_345)).unwrap();
    for i in 0..9u64 {
        std::fs::write(work.join(format!("d/part{i}.log")), text(10 + i, CHUNK + 777 * i as usize)).unwrap();
    }
    let noise: Vec<u8> =
        text(99, 2 * CHUNK).iter().enumerate().map(|(i, b)| b ^ (i * 31 % 251) as u8).collect();
    std::fs::write(work.join("noise.bin"), &noise).unwrap();
    std::fs::write(work.join("empty"), b"").unwrap();
    std::fs::write(work.join("odd"), b"x").unwrap();
    let mut names: Vec<String> =
        ["big.txt", "noise.bin", "empty", "odd"].iter().map(|n| format!("work/{n}")).collect();
    names.extend((0..9).map(|i| format!("work/d/part{i}.log")));
    let names: Vec<&str> = names.iter().map(String::as_str).collect();

    let to = env.path("archives");
    env.run(&["seal", "big", "--to", to.to_str().unwrap()]).ok();
    let archive = to.join("big.tar.zst");
    assert!(std::fs::metadata(&archive).unwrap().len() > 0);

    both_restore_it(&env, &archive, "big", &names);
}

#[test]
fn a_secret_across_a_read_chunk_or_at_the_very_end_of_a_large_file_is_found() {
    let token = github_token();
    let cases: [(&str, usize); 3] = [
        // Split by the boundary of the first read chunk.
        ("split.txt", CHUNK - token.len() / 2),
        // Split by the boundary of the third.
        ("split3.txt", 3 * CHUNK - 7),
        // The file's last bytes.
        ("end.txt", 5 * CHUNK - token.len()),
    ];
    for (name, at) in cases {
        let env = Env::new();
        env.run(&["run", "--run-id", "leak", "--", "true"]).ok();
        let work = env.run_dir("leak").join("work");
        let len = at + token.len() + if name == "end.txt" { 0 } else { CHUNK / 3 };
        let mut data = text(7, len);
        // Whitespace around the token, as a config file would have it.
        data[at - 1] = b' ';
        data[at..at + token.len()].copy_from_slice(token.as_bytes());
        if at + token.len() < len {
            data[at + token.len()] = b'\n';
        }
        std::fs::write(work.join(name), &data).unwrap();
        let to = env.path("archives");
        let out = Out::from(env.cmd(&["seal", "leak", "--to", to.to_str().unwrap()]).output().unwrap());
        out.code(80).stderr_has(&format!("work/{name}:")).stderr_has("github-token");
        assert!(!out.stderr.contains(&token), "the secret was printed");
        assert!(
            !to.join("leak.tar.zst").exists(),
            "{name}: a secret-holding archive in the ordinary location"
        );
        assert!(to.join("quarantine/leak.tar.zst").exists(), "{name}: not quarantined");
    }
}

/// What `zstd -lv` says of `archive`: the value after `key`.
fn zstd_list(archive: &Path, key: &str) -> String {
    let out = std::process::Command::new("zstd").arg("-lv").arg(archive).output().unwrap();
    assert!(out.status.success(), "zstd -lv: {}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let line = text
        .lines()
        .find_map(|l| l.trim().strip_prefix(key))
        .unwrap_or_else(|| panic!("no `{key}` in {text}"));
    line.trim().to_string()
}

#[test]
fn a_seal_of_many_blocks_is_several_checksummed_frames_that_gnu_tar_and_restore_read_whole() {
    let env = Env::new();
    env.run(&["run", "--run-id", "frames", "--", "true"]).ok();
    let work = env.run_dir("frames").join("work");
    // 21 MiB in one file and 3 more: the tar stream spans three 8 MiB blocks,
    // and a file's read is cut at each block's end.
    std::fs::write(work.join("long.txt"), text(3, 21 * CHUNK + 333)).unwrap();
    for i in 0..3u64 {
        std::fs::write(work.join(format!("f{i}.log")), text(20 + i, CHUNK + 99 * i as usize)).unwrap();
    }
    let names = ["work/long.txt", "work/f0.log", "work/f1.log", "work/f2.log"];
    let to = env.path("archives");
    env.run(&["seal", "frames", "--to", to.to_str().unwrap()]).ok();
    let archive = to.join("frames.tar.zst");

    // One frame per block, compressed on every core, each with its checksum
    // and its size: `zstd -l` then knows the whole stream's size.
    let frames: u64 = zstd_list(&archive, "# Zstandard Frames:").parse().unwrap();
    assert!(frames >= 4, "{frames} frames for 24 MiB of tar stream");
    assert_eq!(zstd_list(&archive, "Check:"), "XXH64");
    let size = zstd_list(&archive, "Decompressed Size:");
    assert!(size.contains(" B)"), "the decompressed size is not known: {size}");
    let out = std::process::Command::new("zstd").arg("-tq").arg(&archive).output().unwrap();
    assert!(out.status.success(), "zstd -t: {}", String::from_utf8_lossy(&out.stderr));

    both_restore_it(&env, &archive, "frames", &names);
}

#[test]
fn a_secret_across_the_end_of_a_compression_block_is_found() {
    // The stream is compressed in blocks of 8 MiB, and a file's read is cut
    // where a block ends. That place, in the file below, is 8 MiB less the
    // bytes before its content in the tar stream (the manifest and a few
    // headers, under 16 KiB): every line there is a token, so whichever
    // byte the block ends at, the token around it must be found.
    const BLOCK: usize = 8 * CHUNK;
    let token = github_token();
    let mut data = text(5, BLOCK - 16 * 1024);
    *data.last_mut().unwrap() = b'\n';
    let first = data.iter().filter(|&&b| b == b'\n').count() + 1;
    let mut lines = 0;
    while data.len() < BLOCK + 512 {
        data.extend_from_slice(token.as_bytes());
        data.push(b'\n');
        lines += 1;
    }
    data.extend_from_slice(&text(6, 2 * CHUNK));
    let env = Env::new();
    env.run(&["run", "--run-id", "edge", "--", "true"]).ok();
    std::fs::write(env.run_dir("edge").join("work/straddle.txt"), &data).unwrap();
    let to = env.path("archives");
    let out = Out::from(env.cmd(&["seal", "edge", "--to", to.to_str().unwrap()]).output().unwrap());
    out.code(80);
    for line in first..first + lines {
        out.stderr_has(&format!("work/straddle.txt:{line}:github-token"));
    }
    assert!(!out.stderr.contains(&token), "the secret was printed");
    assert!(to.join("quarantine/edge.tar.zst").exists(), "not quarantined");
}
