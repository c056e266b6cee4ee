//! The secret scan looks inside compressed files and archives a run leaves
//! (gzip, zstd, tar, zip, nested), within budgets; what it cannot open is
//! named with the reason, and a seal quarantines it unless told otherwise.
//!
//! Every secret is assembled at run time; the archives are built here and
//! the run's command copies them in, as a command writing them would.

use std::io::Write;
use std::path::Path;

use crate::harness::*;

fn token(seed: u8) -> String {
    let body: String =
        (0..36u32).map(|i| char::from(b'a' + ((i * 7 + u32::from(seed)) % 26) as u8)).collect();
    format!("{}{}{}", "gh", "p_", body.replace('k', "4").replace('q', "9"))
}

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

fn zstd(data: &[u8]) -> Vec<u8> {
    zstd::encode_all(data, 1).unwrap()
}

fn tar(members: &[(&str, &[u8])]) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    for (name, data) in members {
        let mut h = tar::Header::new_gnu();
        h.set_size(data.len() as u64);
        h.set_mode(0o644);
        h.set_cksum();
        b.append_data(&mut h, name, *data).unwrap();
    }
    b.into_inner().unwrap()
}

/// A zip written by hand: `(name, data, deflate, flags)` per member.
fn zip(members: &[(&str, &[u8], bool, u16)]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut central = Vec::new();
    for (name, data, deflate, flags) in members {
        let body = if *deflate {
            let mut e = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::fast());
            e.write_all(data).unwrap();
            e.finish().unwrap()
        } else {
            data.to_vec()
        };
        let mut crc = flate2::Crc::new();
        crc.update(data);
        let method: u16 = if *deflate { 8 } else { 0 };
        let offset = out.len() as u32;
        let common = |v: &mut Vec<u8>| {
            v.extend_from_slice(&20u16.to_le_bytes());
            v.extend_from_slice(&flags.to_le_bytes());
            v.extend_from_slice(&method.to_le_bytes());
            v.extend_from_slice(&[0, 0, 0x21, 0]);
            v.extend_from_slice(&crc.sum().to_le_bytes());
            v.extend_from_slice(&(body.len() as u32).to_le_bytes());
            v.extend_from_slice(&(data.len() as u32).to_le_bytes());
            v.extend_from_slice(&(name.len() as u16).to_le_bytes());
            v.extend_from_slice(&0u16.to_le_bytes());
        };
        out.extend_from_slice(b"PK\x03\x04");
        common(&mut out);
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(&body);
        central.extend_from_slice(b"PK\x01\x02\x14\x03");
        common(&mut central);
        central.extend_from_slice(&[0; 10]);
        central.extend_from_slice(&offset.to_le_bytes());
        central.extend_from_slice(name.as_bytes());
    }
    let cd_off = out.len() as u32;
    out.extend_from_slice(&central);
    out.extend_from_slice(b"PK\x05\x06\0\0\0\0");
    let n = members.len() as u16;
    out.extend_from_slice(&n.to_le_bytes());
    out.extend_from_slice(&n.to_le_bytes());
    out.extend_from_slice(&(central.len() as u32).to_le_bytes());
    out.extend_from_slice(&cd_off.to_le_bytes());
    out.extend_from_slice(&[0, 0]);
    out
}

fn write(dir: &Path, name: &str, data: &[u8]) {
    let path = dir.join(name);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, data).unwrap();
}

/// A run whose command copies `stage` into its working directory, sealed.
fn sealed_run(env: &Env, id: &str, stage: &Path, extra: &[&str]) -> Out {
    let script = format!("cp -R {}/. .", stage.display());
    let mut args = vec!["run", "--run-id", id, "--job", "arch", "--seal"];
    args.extend_from_slice(extra);
    args.extend_from_slice(&["--", "sh", "-c", &script]);
    env.run(&args)
}

fn receipt(env: &Env, path: &str) -> serde_json::Value {
    let bytes = std::fs::read(env.root.join("archive/arch").join(path)).expect("receipt");
    serde_json::from_slice(&bytes).unwrap()
}

#[test]
fn a_secret_inside_every_compressed_format_and_nesting_is_found() {
    let env = Env::new();
    let stage = env.path("stage");
    let text = |seed: u8| format!("line one\nexport GH={}\n", token(seed)).into_bytes();
    write(&stage, "a.log.gz", &gzip(&text(1)));
    write(&stage, "b.log.zst", &zstd(&text(2)));
    write(&stage, "c.tar", &tar(&[("inner/x.txt", &text(3))]));
    write(&stage, "d.tar.gz", &gzip(&tar(&[("notes.md", b"nothing\n"), ("keys/e.txt", &text(4))])));
    write(&stage, "e.zip", &zip(&[("readme", b"hello\n", true, 0), ("conf/f.env", &text(5), true, 0)]));
    write(&stage, "f.zip", &zip(&[("g.txt", &text(6), false, 0)]));
    let inner = gzip(&tar(&[("deep/h.txt", &text(7))]));
    write(&stage, "nested.zip", &zip(&[("bundle.tar.gz", &inner, false, 0)]));
    let inner_zst = zstd(&zip(&[("i.txt", &text(8), true, 0)]));
    write(&stage, "sub/j.zip.zst", &inner_zst);
    // Names are names inside the archive: shown escaped.
    write(&stage, "odd.tar", &tar(&[("a\x1b[31mred", &text(9))]));

    let out = env.run(&["scan", stage.to_str().unwrap()]);
    out.code(82);
    for want in [
        "a.log.gz!gzip:2:github-token ghp_…",
        "b.log.zst!zstd:2:github-token",
        "c.tar!/inner/x.txt:2:github-token",
        "d.tar.gz!gzip!/keys/e.txt:2:github-token",
        "e.zip!/conf/f.env:2:github-token",
        "f.zip!/g.txt:2:github-token",
        "nested.zip!/bundle.tar.gz!gzip!/deep/h.txt:2:github-token",
        "sub/j.zip.zst!zstd!/i.txt:2:github-token",
        "odd.tar!/a\\e[31mred:2:github-token",
    ] {
        out.stdout_has(want);
    }
    for seed in 1..=9 {
        assert!(!out.stdout.contains(&token(seed)) && !out.stderr.contains(&token(seed)));
    }
    assert!(!out.stderr.contains("not scanned"), "{}", out.stderr);

    // The seal sees the same and quarantines.
    let out = sealed_run(&env, "inside", &stage, &[]);
    out.code(80).stderr_has("secret found: work/nested.zip!/bundle.tar.gz!gzip!/deep/h.txt:2:github-token");
    let r = receipt(&env, "quarantine/inside.receipt.json");
    // Each member's finding (and raw ones, where a container stores its
    // members' bytes as they are).
    let listed = r["scan"]["findings"].as_array().cloned().unwrap_or_default();
    assert!(listed.len() >= 9, "{r}");
    assert!(listed.iter().any(|f| f == "work/sub/j.zip.zst!zstd!/i.txt:2:github-token ghp_…"), "{r}");
}

/// Archives the scan cannot fully open, each named for the reason.
fn unscannable(stage: &Path) -> Vec<(&'static str, &'static str)> {
    // 32 MiB of zeros in 32 KiB: far past 200 times its size.
    write(stage, "bomb.gz", &gzip(&vec![0u8; 32 << 20]));
    let mut corrupt = gzip(b"some log text that goes on for a while\n".repeat(50).as_slice());
    let mid = corrupt.len() / 2;
    corrupt[mid..].iter_mut().for_each(|b| *b = !*b);
    write(stage, "corrupt.gz", &corrupt);
    write(stage, "corrupt.zip", b"PK\x03\x04 this is not really a zip at all");
    write(stage, "locked.zip", &zip(&[("secret.txt", b"ciphertext\n", false, 1)]));
    write(stage, "data.xz", &[0xfd, b'7', b'z', b'X', b'Z', 0, 0, 4, 0xe6, 0xd6]);
    let mut deep = b"bottom\n".to_vec();
    for _ in 0..5 {
        deep = gzip(&deep);
    }
    write(stage, "deep.gz", &deep);
    // A member the zip's directory does not list.
    let mut hidden = zip(&[("shown.txt", b"fine\n", false, 0)]);
    let extra = zip(&[("hidden.txt", b"hidden\n", false, 0)]);
    let cut = extra.windows(4).position(|w| w == b"PK\x01\x02").unwrap();
    hidden.splice(0..0, extra[..cut].iter().copied());
    // The directory's offsets now point `cut` bytes early: fix them up.
    let cd = hidden.windows(4).position(|w| w == b"PK\x01\x02").unwrap();
    let local = u32::from_le_bytes(hidden[cd + 42..cd + 46].try_into().unwrap()) + cut as u32;
    hidden[cd + 42..cd + 46].copy_from_slice(&local.to_le_bytes());
    let eocd = hidden.len() - 22;
    hidden[eocd + 16..eocd + 20].copy_from_slice(&(cd as u32).to_le_bytes());
    write(stage, "hidden.zip", &hidden);
    vec![
        ("bomb.gz!gzip", "expands more than 200 times"),
        ("corrupt.gz!gzip", "corrupt gzip data"),
        ("corrupt.zip", "corrupt zip"),
        ("locked.zip!/secret.txt", "encrypted"),
        ("data.xz", "xz files are not opened"),
        ("deep.gz!gzip!gzip!gzip!gzip", "nested more than 4"),
        ("hidden.zip", "1 entry that its directory does not list"),
    ]
}

#[test]
fn what_cannot_be_scanned_is_named_and_sends_the_seal_to_quarantine_unless_allowed() {
    let env = Env::new();
    let stage = env.path("stage");
    let want = unscannable(&stage);
    let out = env.run(&["scan", stage.to_str().unwrap()]);
    out.code(83);
    for (path, why) in &want {
        assert!(
            out.stderr.lines().any(|l| l.contains(&format!("{path}: not scanned: ")) && l.contains(why)),
            "no `{path}: not scanned: …{why}…`\n--- stderr\n{}",
            out.stderr
        );
    }
    assert_eq!(out.stdout, "", "nothing found");

    // The seal: quarantined, the receipt says what and why.
    let out = sealed_run(&env, "q", &stage, &[]);
    out.code(80).stderr_has("could not look inside").stderr_has("--allow-unscanned");
    let r = receipt(&env, "quarantine/q.receipt.json");
    let listed = r["scan"]["not_scanned"].as_array().cloned().unwrap_or_default();
    assert_eq!(listed.len(), want.len(), "{r}");
    for (path, why) in &want {
        assert!(
            listed.iter().any(|u| u["path"] == format!("work/{path}")
                && u["why"].as_str().unwrap_or_default().contains(why)),
            "{path} missing from {r}"
        );
    }

    // Opted out: sealed, the receipt still lists them and says partial.
    let out = sealed_run(&env, "ok", &stage, &["--allow-unscanned"]);
    out.ok().stderr_has("work/bomb.gz!gzip: not scanned:");
    let r = receipt(&env, "ok.receipt.json");
    assert_eq!(r["scan"]["result"], "partial", "{r}");
    assert_eq!(r["scan"]["not_scanned"].as_array().map(Vec::len), Some(want.len()));
    assert!(env.root.join("archive/arch/ok.tar.zst").exists());
    // Restore warns about them and restores.
    let to = env.path("restored");
    env.run(&[
        "restore",
        env.root.join("archive/arch/ok.tar.zst").to_str().unwrap(),
        "--to",
        to.to_str().unwrap(),
    ])
    .ok()
    .stderr_has("warning: ")
    .stderr_has("bomb.gz!gzip: not scanned:");
}

#[test]
fn truncated_and_mangled_archives_are_reported_never_a_crash() {
    let env = Env::new();
    let stage = env.path("stage");
    let t = token(11);
    let body = format!("a\n{t}\n").into_bytes();
    let originals = [
        ("tgz", gzip(&tar(&[("x/y.txt", &body), ("z.txt", b"zz\n")]))),
        ("zip", zip(&[("y.txt", &body, true, 0), ("z.txt", b"zz\n", false, 0)])),
        ("zst", zstd(&tar(&[("y.txt", &body)]))),
    ];
    let mut n = 0;
    for (ext, data) in &originals {
        // Cut at 25 points, and flip one byte at 25 others.
        for k in 1..=25 {
            let at = data.len() * k / 26;
            write(&stage, &format!("cut{n}.{ext}"), &data[..at]);
            let mut flipped = data.clone();
            flipped[at] ^= 0x5a;
            write(&stage, &format!("flip{n}.{ext}"), &flipped);
            n += 1;
        }
    }
    let out = env.run(&["scan", stage.to_str().unwrap()]);
    assert!(matches!(out.code, Some(82 | 83)), "{out:?}");
    assert!(!out.stderr.contains("panicked"), "{}", out.stderr);
    assert!(!out.stdout.contains(&t) && !out.stderr.contains(&t));
}

/// A zip64 archive of one deflated member, written by hand: every size and
/// offset is in the zip64 fields, the classic ones all ones.
fn zip64(name: &str, data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(data).unwrap();
    let body = e.finish().unwrap();
    let mut crc = flate2::Crc::new();
    crc.update(data);
    let (usize64, csize64) = (data.len() as u64, body.len() as u64);
    let common = |v: &mut Vec<u8>, extra: u16| {
        v.extend_from_slice(&45u16.to_le_bytes());
        v.extend_from_slice(&0u16.to_le_bytes());
        v.extend_from_slice(&8u16.to_le_bytes());
        v.extend_from_slice(&[0, 0, 0x21, 0]);
        v.extend_from_slice(&crc.sum().to_le_bytes());
        v.extend_from_slice(&[0xff; 8]);
        v.extend_from_slice(&(name.len() as u16).to_le_bytes());
        v.extend_from_slice(&extra.to_le_bytes());
    };
    let mut out = b"PK\x03\x04".to_vec();
    common(&mut out, 20);
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(&[1, 0, 16, 0]);
    out.extend_from_slice(&usize64.to_le_bytes());
    out.extend_from_slice(&csize64.to_le_bytes());
    out.extend_from_slice(&body);
    let cd_off = out.len() as u64;
    out.extend_from_slice(b"PK\x01\x02\x2d\x03");
    common(&mut out, 28);
    out.extend_from_slice(&[0; 10]);
    out.extend_from_slice(&[0xff; 4]);
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(&[1, 0, 24, 0]);
    out.extend_from_slice(&usize64.to_le_bytes());
    out.extend_from_slice(&csize64.to_le_bytes());
    out.extend_from_slice(&0u64.to_le_bytes());
    let cd_size = out.len() as u64 - cd_off;
    let eocd64 = out.len() as u64;
    out.extend_from_slice(b"PK\x06\x06");
    out.extend_from_slice(&44u64.to_le_bytes());
    out.extend_from_slice(&[0x2d, 3, 0x2d, 0]);
    out.extend_from_slice(&[0; 8]);
    out.extend_from_slice(&1u64.to_le_bytes());
    out.extend_from_slice(&1u64.to_le_bytes());
    out.extend_from_slice(&cd_size.to_le_bytes());
    out.extend_from_slice(&cd_off.to_le_bytes());
    out.extend_from_slice(b"PK\x06\x07\0\0\0\0");
    out.extend_from_slice(&eocd64.to_le_bytes());
    out.extend_from_slice(&1u32.to_le_bytes());
    out.extend_from_slice(b"PK\x05\x06\0\0\0\0");
    out.extend_from_slice(&[0xff; 12]);
    out.extend_from_slice(&[0, 0]);
    out
}

#[test]
fn zip64_archives_and_members_with_a_bad_crc_are_scanned() {
    let env = Env::new();
    let stage = env.path("stage");
    let text = |seed: u8| format!("line one\nexport GH={}\n", token(seed)).into_bytes();
    write(&stage, "big.zip", &zip64("k/l.txt", &text(21)));
    // Every byte of a member is scanned before its CRC could be checked: a
    // wrong one hides nothing.
    let mut bad_crc = zip(&[("m.txt", &text(22), true, 0)]);
    for at in [14, bad_crc.windows(4).position(|w| w == b"PK\x01\x02").unwrap() + 16] {
        bad_crc[at] ^= 0xff;
    }
    write(&stage, "crc.zip", &bad_crc);
    let out = env.run(&["scan", stage.to_str().unwrap()]);
    out.code(82).stdout_has("big.zip!/k/l.txt:2:github-token").stdout_has("crc.zip!/m.txt:2:github-token");
    assert!(!out.stderr.contains("not scanned"), "{}", out.stderr);
}

#[test]
fn zip_members_that_share_a_name_are_each_scanned_or_named() {
    let env = Env::new();
    let stage = env.path("stage");
    let secret = format!("line one\nexport GH={}\n", token(23)).into_bytes();
    // The first `a.txt` holds the secret, the second (the one an extractor
    // leaves on disk) does not.
    write(&stage, "twice.zip", &zip(&[("a.txt", &secret, true, 0), ("a.txt", b"nothing\n", true, 0)]));
    let out = env.run(&["scan", stage.to_str().unwrap()]);
    let found = out.stdout.contains("twice.zip!/a.txt:2:github-token");
    let named = out.stderr.lines().any(|l| {
        l.starts_with("runws: ") && l.contains("twice.zip: not scanned: ") && l.contains("share a name")
    });
    assert!(found || named, "{out:?}");
    assert!(!out.stdout.contains(&token(23)) && !out.stderr.contains(&token(23)));
}
