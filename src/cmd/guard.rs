//! `runws put`, `get`, `has`, `import`, `info`: the guard's command line.

use std::ffi::OsStr;
use std::io::Write;
use std::path::Path;

use anyhow::Context;

use crate::exit;
use crate::guard::{Guard, Written};

pub fn put(name: &OsStr, file: Option<&Path>, verbose: bool) -> anyhow::Result<u8> {
    let guard = Guard::from_env()?;
    let written = match file {
        None => guard.put(name, &mut std::io::stdin())?,
        Some(p) if p.as_os_str() == "-" => guard.put(name, &mut std::io::stdin())?,
        Some(p) => {
            let mut f = std::fs::File::open(p)
                .with_context(|| format!("cannot open `{}`", crate::shown::os(p.as_os_str())))?;
            guard.put(name, &mut f)?
        }
    };
    if verbose {
        let (verb, rec) = match &written {
            Written::New(r) => ("wrote", r),
            Written::Unchanged(r) => ("unchanged", r),
        };
        eprintln!("runws: {verb} {} ({} bytes, sha256:{})", rec.file.shown(), rec.bytes, rec.sha256);
    }
    Ok(exit::OK)
}

pub fn get(name: &OsStr, from: Option<&str>) -> anyhow::Result<u8> {
    let guard = Guard::from_env()?;
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    guard.get(name, from, &mut out)?;
    out.flush()?;
    Ok(exit::OK)
}

pub fn has(name: &OsStr) -> anyhow::Result<u8> {
    let guard = Guard::from_env()?;
    Ok(if guard.has(name)? { exit::OK } else { exit::NO })
}

pub fn import(run: &str, name: &OsStr) -> anyhow::Result<u8> {
    let guard = Guard::from_env()?;
    guard.import(run, name)?;
    Ok(exit::OK)
}

pub fn info(json: bool) -> anyhow::Result<u8> {
    let guard = Guard::from_env()?;
    let m = guard.manifest()?;
    super::ls::print_manifest(&m, guard.dir(), json)?;
    Ok(exit::OK)
}

pub fn claim(kind: &str, value: &str, repo: Option<&Path>) -> anyhow::Result<u8> {
    let guard = Guard::from_env()?;
    guard.claim(kind, value, repo)?;
    Ok(exit::OK)
}
