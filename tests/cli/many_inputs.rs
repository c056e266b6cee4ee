//! Many inputs at once: copied exactly, and recorded with the same hashes
//! and the same fingerprint as ever, whatever copies them.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::harness::*;

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Deterministic bytes: `len` of them, different for each `seed`.
fn bytes(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// A recorded path as bytes: a string, or `{"hex": ...}` for a name that is
/// not UTF-8.
fn path_bytes(v: &serde_json::Value) -> Vec<u8> {
    match v {
        serde_json::Value::String(s) => s.as_bytes().to_vec(),
        other => {
            let h = other["hex"].as_str().expect("a path or {hex}");
            (0..h.len()).step_by(2).map(|i| u8::from_str_radix(&h[i..i + 2], 16).unwrap()).collect()
        }
    }
}

/// The manifest's inputs by path: (kind, bytes, sha256).
fn recorded(m: &serde_json::Value) -> BTreeMap<Vec<u8>, (String, u64, String)> {
    m["inputs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            let v = (
                i["kind"].as_str().unwrap().to_string(),
                i["bytes"].as_u64().unwrap(),
                i["sha256"].as_str().unwrap().to_string(),
            );
            (path_bytes(&i["path"]), v)
        })
        .collect()
}

/// The fingerprint as README.md defines it, computed here on its own:
/// sha256 over "runws-inputs-v1\n" and, sorted by path, each input's
/// path, kind, bytes, sha256 and producer run, NUL-separated.
fn fingerprint(inputs: &BTreeMap<Vec<u8>, (String, u64, String)>) -> String {
    let mut h = Sha256::new();
    h.update(b"runws-inputs-v1\n");
    for (path, (kind, n, sha)) in inputs {
        h.update(path);
        h.update(b"\0");
        h.update(kind.as_bytes());
        h.update(b"\0");
        h.update(n.to_string().as_bytes());
        h.update(b"\0");
        h.update(sha.as_bytes());
        h.update(b"\0");
        h.update(b"\n");
    }
    format!("sha256:{}", hex(&h.finalize()))
}

/// What a tree holds, by path below `base`, prefixed with `prefix`: files
/// and symlinks, as `recorded` lists them, from the bytes on disk.
fn expected(base: &Path, prefix: &[u8]) -> BTreeMap<Vec<u8>, (String, u64, String)> {
    let mut out = BTreeMap::new();
    fn walk(dir: &Path, rel: &[u8], out: &mut BTreeMap<Vec<u8>, (String, u64, String)>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let e = e.unwrap();
            let mut r = rel.to_vec();
            r.push(b'/');
            r.extend_from_slice(e.file_name().as_bytes());
            let t = e.file_type().unwrap();
            if t.is_symlink() {
                let target = std::fs::read_link(e.path()).unwrap();
                let b = target.as_os_str().as_bytes();
                out.insert(r, ("symlink".into(), b.len() as u64, hex(&Sha256::digest(b))));
            } else if t.is_dir() {
                walk(&e.path(), &r, out);
            } else {
                let b = std::fs::read(e.path()).unwrap();
                out.insert(r, ("file".into(), b.len() as u64, hex(&Sha256::digest(&b))));
            }
        }
    }
    walk(base, prefix, &mut out);
    out
}

/// A small fixed tree: an empty file, text, a file of 100 KiB (past the
/// size a clone is tried at) and one of 9 MiB (copied in overlapping
/// stages), nested directories and a symlink.
fn fixed_tree(dir: &Path) {
    std::fs::create_dir_all(dir.join("a/b/c")).unwrap();
    std::fs::write(dir.join("empty"), b"").unwrap();
    std::fs::write(dir.join("a/text.txt"), b"alpha\nbeta\n").unwrap();
    std::fs::write(dir.join("a/b/mid.bin"), bytes(1, 100 * 1024)).unwrap();
    std::fs::write(dir.join("a/b/c/big.bin"), bytes(2, 9 * 1024 * 1024 + 17)).unwrap();
    std::os::unix::fs::symlink("../text.txt", dir.join("a/b/link")).unwrap();
}

#[test]
fn a_fixed_tree_is_recorded_with_the_same_hashes_and_fingerprint() {
    let env = Env::new();
    fixed_tree(&env.path("tree"));
    std::fs::write(env.path("one.txt"), b"one file\n").unwrap();
    env.run(&["run", "--run-id", "fixed", "--input", "tree", "--input", "one.txt", "--", "true"]).ok();
    let m = env.manifest("fixed");
    let got = recorded(&m);
    let mut want = expected(&env.path("tree"), b"tree");
    want.insert(b"one.txt".to_vec(), ("file".into(), 9, hex(&Sha256::digest(b"one file\n"))));
    assert_eq!(got, want);
    assert_eq!(m["input_fingerprint"], fingerprint(&want));
    // The value this tree has always had (recorded by the build before
    // inputs were copied by a pool of threads): old manifests compare it.
    assert_eq!(
        m["input_fingerprint"],
        "sha256:c851baf0d537eddb7561a972cf576068c78f3efb6588d216345a2eec87bae441"
    );
    assert_eq!(
        std::fs::read(env.run_dir("fixed").join("inputs/tree/a/b/c/big.bin")).unwrap(),
        bytes(2, 9 * 1024 * 1024 + 17)
    );
}

/// 2,000 files over nested directories, with names that are odd (spaces, a
/// newline, a leading dash, bytes that are not UTF-8), empty files, and
/// symlinks (to a file outside the tree and to a directory inside it), all
/// copied byte for byte; the symlinks are copied as symlinks, never followed.
#[test]
fn many_files_with_odd_names_and_symlinks_are_copied_exactly() {
    let env = Env::new();
    let src = env.path("many");
    let names: [&[u8]; 6] = [b"plain", b"with space", b"new\nline", b"-dash", b"caf\xe9", b"\xff\xfe"];
    let mut files = 0;
    for i in 0..2000u64 {
        let depth = (i % 4) as usize;
        let mut dir = src.clone();
        for d in 0..depth {
            dir.push(OsStr::from_bytes(names[(i as usize / 7 + d) % names.len()]));
            dir.push(format!("d{}", i % 13));
        }
        std::fs::create_dir_all(&dir).unwrap();
        let mut name = names[i as usize % names.len()].to_vec();
        name.extend_from_slice(format!(".{i}").as_bytes());
        let len = if i % 10 == 0 { 0 } else { (i * 37 % 5000) as usize };
        std::fs::write(dir.join(OsStr::from_bytes(&name)), bytes(i, len)).unwrap();
        files += 1;
    }
    std::fs::write(env.path("outside.txt"), b"outside the tree").unwrap();
    std::os::unix::fs::symlink(env.path("outside.txt"), src.join("to-outside")).unwrap();
    std::os::unix::fs::symlink("plain", src.join("to-dir")).unwrap();
    env.run(&["run", "--run-id", "many", "--input", "many", "--", "true"]).ok();

    let m = env.manifest("many");
    let got = recorded(&m);
    let want = expected(&src, b"many");
    assert_eq!(got.len(), files + 2);
    assert_eq!(got, want);
    assert_eq!(m["input_fingerprint"], fingerprint(&want));
    // The copy holds what the source holds, byte for byte, and nothing else.
    let copy = env.run_dir("many").join("inputs/many");
    assert_eq!(expected(&copy, b"many"), want);
    assert_eq!(tree(&copy), tree(&src));
    let link: PathBuf = copy.join("to-outside");
    assert!(std::fs::symlink_metadata(&link).unwrap().file_type().is_symlink());
    assert_eq!(std::fs::read_link(&link).unwrap(), env.path("outside.txt"));
    assert!(std::fs::symlink_metadata(copy.join("to-dir")).unwrap().file_type().is_symlink());
}
