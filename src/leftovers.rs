//! What a runws process killed half-way leaves behind, and how `reap`
//! proves it dead before removing it.
//!
//! Every temp file runws writes is locked by its writer for as long as it
//! is open ([`Dir::create_locked`]): the temp files of atomic writes
//! (`.NAME.PID.N.NANOS.tmp`: manifests, outputs, the store's files) and a
//! seal's temp archive (`.NAME.PID.N.partial`). A lock dies with its
//! process, so a temp file whose lock is free was left by a writer that
//! died, even when its pid was reused since. Restores register their
//! staging directories ([`crate::restores`]); run directories left without
//! a manifest are handled by the reaper itself ([`crate::reap`]).

use std::collections::BTreeSet;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use crate::fsx::{self, Dir, Leftover};
use crate::seal::archive;

/// One leftover found, removed, or kept.
pub struct Found {
    /// False when the step is a failure.
    pub ok: bool,
    /// Something was (or, in a dry run, would be) removed.
    pub acted: bool,
    pub message: String,
}

/// True for the name of a temp file runws writes and removes itself.
pub fn is_temp(name: &OsStr) -> bool {
    fsx::is_temp_name(name.as_bytes()) || archive::is_partial_name(name.as_bytes())
}

/// Removes (with `dry_run`, lists) the temp files of dead writers in `dir`
/// and, `depth` levels down, in its subdirectories (never through a
/// symlink); a live writer's are left alone, and so is every path in
/// `recorded` (relative to `dir`): a run's evidence may bear any name (an
/// input, or an output another run imported), a temp file's among them.
pub fn temp_files(
    dir: &Dir,
    depth: usize,
    recorded: &BTreeSet<PathBuf>,
    dry_run: bool,
    out: &mut Vec<Found>,
) {
    walk(dir, Path::new(""), depth, recorded, dry_run, out);
}

fn walk(
    dir: &Dir,
    rel: &Path,
    depth: usize,
    recorded: &BTreeSet<PathBuf>,
    dry_run: bool,
    out: &mut Vec<Found>,
) {
    let names = match dir.entries_raw() {
        Ok(n) => n,
        Err(e) => {
            out.push(Found { ok: false, acted: false, message: format!("cannot look for temp files: {e}") });
            return;
        }
    };
    for (name, is_dir) in names {
        let path = rel.join(&name);
        if recorded.contains(&path) {
            continue;
        }
        if is_temp(&name) {
            out.push(temp_file(dir, &name, dry_run));
        } else if depth > 0 && is_dir != Some(false) {
            // A name that is not a directory, or a symlink, is refused here.
            if let Ok(sub) = dir.sub(&name) {
                walk(&sub, &path, depth - 1, recorded, dry_run, out);
            }
        }
    }
}

fn temp_file(dir: &Dir, name: &OsStr, dry_run: bool) -> Found {
    let shown = crate::shown::os(dir.join(name).as_os_str());
    let what = if archive::is_partial_name(name.as_bytes()) { "seal's temp archive" } else { "temp file" };
    let found = |acted, message| Found { ok: true, acted, message };
    match dir.abandoned(name, !dry_run) {
        Ok(Leftover::Abandoned) if dry_run => {
            found(true, format!("would remove the {what} `{shown}` of a writer that died"))
        }
        Ok(Leftover::Abandoned) => found(true, format!("removed the {what} `{shown}` of a writer that died")),
        Ok(Leftover::Held) => found(false, format!("kept the {what} `{shown}`: its writer is alive")),
        Ok(Leftover::NotAFile) => found(false, format!("kept `{shown}`: not a regular file")),
        Ok(Leftover::Gone) => found(false, format!("{what} `{shown}`: already gone")),
        Err(e) => Found { ok: false, acted: false, message: format!("cannot remove `{shown}`: {e}") },
    }
}
