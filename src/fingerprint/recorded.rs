//! Inputs as a run recorded them: reading a run's input copies back into
//! records (to check them against the manifest), copying recorded files
//! again with their sha256 checked, and comparing two lists of records.
//! A replay uses all three: its inputs are the original's copies, and must
//! come out as the original's records.

use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use super::{InputRecord, digest};
use crate::error::{Error, IoContext, Result};
use crate::fsx::Dir;
use crate::fsx::walk::{Kind, Visit, Walk};
use crate::osname::OsName;

/// Recorded inputs to copy again: the run directory whose `inputs/` holds
/// them, and their records.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub run_dir: PathBuf,
    pub records: Vec<InputRecord>,
}

/// The records of every file and symlink below `inputs` (paths relative to
/// it, sorted), their bytes hashed as [`super::copy_inputs`] hashes them;
/// nothing followed. Directories give no record; anything else (a fifo, a
/// device) is refused. Producers are not known here: every record has none.
pub fn records_of(inputs: &Dir) -> Result<Vec<InputRecord>> {
    let mut out = Vec::new();
    let mut buf = vec![0u8; 256 * 1024];
    Walk::new().run(inputs, |e| {
        let path = OsName::from(e.rel.as_os_str().to_os_string());
        match e.kind() {
            Kind::Dir => Ok(Visit::Descend),
            Kind::Symlink => {
                let target =
                    nix::fcntl::readlinkat(e.dir.borrow(), e.name).ctx("cannot read link", e.path())?;
                let text = target.as_bytes();
                out.push(InputRecord {
                    path,
                    kind: "symlink".into(),
                    bytes: text.len() as u64,
                    sha256: crate::hex::encode(&Sha256::digest(text)),
                    from_run: None,
                    from_output: None,
                });
                Ok(Visit::Skip)
            }
            Kind::File => {
                let mut f = e
                    .dir
                    .open_read(e.name)?
                    .ok_or_else(|| Error::io("cannot open", e.path(), std::io::ErrorKind::NotFound.into()))?;
                let (bytes, sha256) = digest(&mut f, None, &mut buf).ctx("cannot read", e.path())?;
                out.push(InputRecord {
                    path,
                    kind: "file".into(),
                    bytes,
                    sha256,
                    from_run: None,
                    from_output: None,
                });
                Ok(Visit::Skip)
            }
            Kind::Special => Err(Error::SpecialFile { path: e.path() }),
            Kind::Gone => Err(Error::io("cannot read", e.path(), std::io::ErrorKind::NotFound.into())),
        }
    })?;
    out.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(out)
}

/// Copies each recorded file of `from` (`<run_dir>/inputs/<path>`) to the
/// same path in `into`, making its directories, and checks that its bytes
/// hash to the record; returns the records. Only plain files are copied
/// (imports are); nothing on the way is followed. Durable once it returns.
pub fn copy_recorded(from: &Recorded, into: &Dir) -> Result<Vec<InputRecord>> {
    if from.records.is_empty() {
        return Ok(Vec::new());
    }
    let source = Dir::open(&from.run_dir)?.sub("inputs")?;
    let mut buf = vec![0u8; 256 * 1024];
    for r in &from.records {
        let parts: Vec<&[u8]> = r.path.as_bytes().split(|b| *b == b'/').collect();
        let (name, dirs) = parts.split_last().expect("split yields at least one part");
        let os = |b: &[u8]| std::ffi::OsStr::from_bytes(b).to_os_string();
        let (mut src_sub, mut dst_sub): (Option<Dir>, Option<Dir>) = (None, None);
        for d in dirs {
            let s = src_sub.as_ref().unwrap_or(&source).sub(os(d))?;
            let parent = dst_sub.as_ref().unwrap_or(into);
            parent.mkdir_if_missing(os(d), 0o755)?;
            let t = parent.sub(os(d))?;
            (src_sub, dst_sub) = (Some(s), Some(t));
        }
        let (src, dst) = (src_sub.as_ref().unwrap_or(&source), dst_sub.as_ref().unwrap_or(into));
        let src_path = source.join(Path::new(&os(r.path.as_bytes())));
        let mut f = src.open_read(os(name))?.ok_or_else(|| Error::Integrity {
            path: src_path.clone(),
            expected: r.sha256.clone(),
            found: "no file".into(),
        })?;
        let mut to = dst.create_new(os(name), 0o644).ctx("cannot create", dst.join(os(name)))?;
        let (bytes, sha256) = digest(&mut f, Some(&mut to), &mut buf).ctx("cannot copy", &src_path)?;
        if sha256 != r.sha256 || bytes != r.bytes {
            return Err(Error::Integrity { path: src_path, expected: r.sha256.clone(), found: sha256 });
        }
    }
    nix::unistd::syncfs(into.borrow()).map_err(|e| Error::io("cannot sync", into.path(), e.into()))?;
    Ok(from.records.clone())
}

/// Fails, naming the first path that differs, unless `got` lists the same
/// inputs as `expected` (path, kind, bytes, sha256, producer; in any order).
pub fn check_same(expected: &[InputRecord], got: &[InputRecord], dir: &Path) -> Result<()> {
    let sorted = |l: &[InputRecord]| {
        let mut v = l.to_vec();
        v.sort_by(|a, b| a.path.cmp(&b.path));
        v
    };
    let (want, have) = (sorted(expected), sorted(got));
    if want == have {
        return Ok(());
    }
    let mismatch = |path: &OsName, expected: String, found: String| Error::Integrity {
        path: dir.join(Path::new(&std::ffi::OsStr::from_bytes(path.as_bytes()))),
        expected,
        found,
    };
    let describe = |r: &InputRecord| match &r.from_run {
        Some(run) => format!("{} (imported from run {run})", r.sha256),
        None if r.kind == "file" => r.sha256.clone(),
        None => format!("{} ({})", r.sha256, r.kind),
    };
    for w in &want {
        match have.iter().find(|h| h.path == w.path) {
            None => return Err(mismatch(&w.path, describe(w), "no file".into())),
            Some(h) if h != w => return Err(mismatch(&w.path, describe(w), describe(h))),
            Some(_) => {}
        }
    }
    let extra = have.iter().find(|h| !want.iter().any(|w| w.path == h.path)).expect("the lists differ");
    Err(mismatch(&extra.path, "no file (not recorded)".into(), describe(extra)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(path: &str, sha: &str) -> InputRecord {
        InputRecord {
            path: path.into(),
            kind: "file".into(),
            bytes: 1,
            sha256: sha.into(),
            from_run: None,
            from_output: None,
        }
    }

    #[test]
    fn the_same_records_in_another_order_are_the_same() {
        let d = Path::new("/x");
        check_same(&[rec("a", "1"), rec("b", "2")], &[rec("b", "2"), rec("a", "1")], d).unwrap();
    }

    #[test]
    fn a_difference_names_its_path() {
        let d = Path::new("/x");
        let changed = check_same(&[rec("a", "1")], &[rec("a", "2")], d).unwrap_err().to_string();
        assert!(changed.contains("/x/a"), "{changed}");
        let gone = check_same(&[rec("a", "1"), rec("b", "1")], &[rec("a", "1")], d).unwrap_err().to_string();
        assert!(gone.contains("/x/b") && gone.contains("no file"), "{gone}");
        let added = check_same(&[rec("a", "1")], &[rec("a", "1"), rec("c", "3")], d).unwrap_err().to_string();
        assert!(added.contains("/x/c") && added.contains("not recorded"), "{added}");
        let producer = InputRecord { from_run: Some("p".into()), ..rec("a", "1") };
        let moved = check_same(&[producer], &[rec("a", "1")], d).unwrap_err().to_string();
        assert!(moved.contains("imported from run p"), "{moved}");
    }

    #[test]
    fn records_of_a_tree_are_what_its_copy_records() {
        let tmp = tempfile::tempdir().unwrap();
        let src = tmp.path().join("data");
        std::fs::create_dir_all(src.join("sub/empty")).unwrap();
        std::fs::write(src.join("a.txt"), b"alpha").unwrap();
        std::fs::write(src.join("sub/b.bin"), vec![7u8; 300_000]).unwrap();
        std::os::unix::fs::symlink("a.txt", src.join("link")).unwrap();
        let copies = tmp.path().join("inputs");
        std::fs::create_dir(&copies).unwrap();
        let copied = super::super::copy_inputs(&[src], &Dir::open(&copies).unwrap()).unwrap();
        assert_eq!(records_of(&Dir::open(&copies).unwrap()).unwrap(), copied);
    }

    #[test]
    fn copy_recorded_refuses_changed_bytes_and_copies_the_rest() {
        let tmp = tempfile::tempdir().unwrap();
        let run = tmp.path().join("run");
        std::fs::create_dir_all(run.join("inputs/p")).unwrap();
        std::fs::write(run.join("inputs/p/out"), b"data").unwrap();
        let good = InputRecord {
            path: "p/out".into(),
            bytes: 4,
            sha256: crate::hex::encode(&Sha256::digest(b"data")),
            from_run: Some("p".into()),
            from_output: Some("out".into()),
            ..rec("x", "")
        };
        let into = tmp.path().join("into");
        std::fs::create_dir(&into).unwrap();
        let from = Recorded { run_dir: run.clone(), records: vec![good.clone()] };
        assert_eq!(copy_recorded(&from, &Dir::open(&into).unwrap()).unwrap(), vec![good.clone()]);
        assert_eq!(std::fs::read(into.join("p/out")).unwrap(), b"data");

        let bad = InputRecord { sha256: "0".repeat(64), ..good };
        let into2 = tmp.path().join("into2");
        std::fs::create_dir(&into2).unwrap();
        let err = copy_recorded(&Recorded { run_dir: run, records: vec![bad] }, &Dir::open(&into2).unwrap());
        assert!(matches!(err, Err(Error::Integrity { .. })), "{err:?}");
    }
}
