//! Names the commit runws is built from in `runws --version`, a constant
//! compiled in (RUNWS_VERSION): `0.1.0 (commit 1a2b3c4d5e6f)` when the
//! package directory is the top of a git checkout, the crate version alone
//! otherwise (a tarball, `cargo install` from the registry, no git). A
//! packager building from a tarball may give the commit in
//! RUNWS_BUILD_COMMIT.

use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    let version = std::env::var("CARGO_PKG_VERSION").expect("cargo sets CARGO_PKG_VERSION");
    let dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=RUNWS_BUILD_COMMIT");
    let given = std::env::var("RUNWS_BUILD_COMMIT").ok().filter(|c| is_commit(c));
    let commit = given.or_else(|| from_git(&dir));
    let shown = match commit {
        Some(c) => format!("{version} (commit {})", &c[..c.len().min(12)]),
        None => version,
    };
    println!("cargo:rustc-env=RUNWS_VERSION={shown}");
}

/// HEAD's commit, when `dir` is the top of a git work tree; and tells
/// cargo to run this again when HEAD moves.
fn from_git(dir: &Path) -> Option<String> {
    let top = git(dir, &["rev-parse", "--show-toplevel"])?;
    // A tarball unpacked inside some other repository is not a checkout of runws.
    if Path::new(&top).canonicalize().ok()? != dir.canonicalize().ok()? {
        return None;
    }
    let commit = git(dir, &["rev-parse", "HEAD"]).filter(|c| is_commit(c))?;
    // HEAD, the branch it names and packed-refs (only those that exist: a
    // missing path would make cargo run this at every build).
    let git_dir = git(dir, &["rev-parse", "--absolute-git-dir"])?;
    let common =
        git(dir, &["rev-parse", "--path-format=absolute", "--git-common-dir"]).unwrap_or(git_dir.clone());
    let mut watched = vec![Path::new(&git_dir).join("HEAD"), Path::new(&common).join("packed-refs")];
    if let Some(branch) = git(dir, &["symbolic-ref", "-q", "HEAD"]) {
        watched.push(Path::new(&common).join(branch));
    }
    for path in watched.iter().filter(|p| p.is_file()) {
        println!("cargo:rerun-if-changed={}", path.display());
    }
    Some(commit)
}

fn git(dir: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new("git").arg("-C").arg(dir).args(args).env_remove("GIT_DIR").output().ok()?;
    let text = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (out.status.success() && !text.is_empty()).then_some(text)
}

fn is_commit(text: &str) -> bool {
    (7..=64).contains(&text.len()) && text.bytes().all(|b| b.is_ascii_hexdigit())
}
