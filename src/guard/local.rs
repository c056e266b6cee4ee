//! The guard in the command's own process (a plain run), and in runws on a
//! sandboxed command's behalf: it checks that the caller belongs to the live
//! run, and reads and writes the run's files itself.

use std::ffi::OsStr;
use std::fs::File;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use super::calls::{Calls, Written};
use crate::allowlist;
use crate::error::{Error, IoContext, Result};
use crate::fingerprint::{self, copy_and_hash, hash_reader};
use crate::fsx::{self, Dir};
use crate::manifest::{self, Claim, ClaimKind, InputRecord, Manifest, OutputRecord, RefusedRecord, Status};
use crate::osname::OsName;
use crate::procinfo;
use crate::shown;
use crate::spool;
use crate::workspace::{self, Root, RunDir};

/// At most this many refusals are listed; the last entry is the latest.
const MAX_REFUSED: usize = 100;
/// The longest value or repository a claim records, in bytes (a path's
/// limit): the command chooses them, and the record must stay readable.
pub const MAX_CLAIM_BYTES: usize = 4096;
/// The most claims one run holds.
pub const MAX_CLAIMS: usize = 1000;

/// A run whose files this process reads and writes itself.
#[derive(Debug)]
pub struct Local {
    run: RunDir,
    caller: Caller,
}

/// The process whose membership in the run every call checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Caller {
    /// This process, checked against `/proc` (a plain run).
    This,
    /// The process with this pid, on whose behalf runws calls (a sandboxed
    /// run; runws sees its whole ancestry from outside the sandbox).
    Peer(i32),
}

/// Output `name` of `run` as its manifest `m` records it, read once into a
/// private copy (at most `in_memory` bytes of it in memory) whose hash is
/// the recorded one, with its length and path: only that copy is handed
/// on, since the file itself may be rewritten in place at any moment. `m`
/// must have been read with [`manifest::read`], which checked that each
/// output's file is exactly `<name>.<run_id>`.
pub(crate) fn verified_output(
    run: &RunDir,
    m: &Manifest,
    name: &OsStr,
    in_memory: usize,
) -> Result<(spool::Spool, u64, PathBuf)> {
    let (mut f, rec, path) = open_output(run, m, name)?;
    let (copy, bytes, sha) = spool::read_hashed_within(&mut f, in_memory).ctx("cannot read", &path)?;
    if sha != rec.sha256 {
        return Err(Error::Integrity { path, expected: rec.sha256.clone(), found: sha });
    }
    Ok((copy, bytes, path))
}

/// Opens output `name` of `run`, as `m` records it, for reading, with its
/// record and path.
fn open_output(run: &RunDir, m: &Manifest, name: &OsStr) -> Result<(File, OutputRecord, PathBuf)> {
    fsx::check_name(name)?;
    let rec = m
        .output(name)
        .cloned()
        .ok_or_else(|| Error::NotProduced { run: run.id.clone(), name: shown::os(name) })?;
    let outputs = run.sub("outputs")?;
    let path = outputs.join(&rec.file);
    let Some(f) = outputs.open_read(&rec.file)? else {
        return Err(Error::Integrity { path, expected: rec.sha256.clone(), found: "no file".into() });
    };
    Ok((f, rec, path))
}

/// The run in `run_dir`, which must be `ROOT/runs/<run_id>` (under `root`
/// when given), and its manifest as read now.
pub(crate) fn locate(run_dir: &Path, run_id: &str, root: Option<&Path>) -> Result<(RunDir, Manifest)> {
    workspace::check_run_id(run_id).map_err(|e| Error::NotInRun { why: e.to_string() })?;
    let derived_root = Root::of_run_dir(run_dir, run_id).ok_or_else(|| Error::NotInRun {
        why: format!("RUNWS_DIR `{}` is not the directory of run `{run_id}`", run_dir.display()),
    })?;
    if let Some(r) = root
        && r != derived_root.path()
    {
        return Err(Error::NotInRun {
            why: format!("RUNWS_DIR `{}` is not under RUNWS_ROOT `{}`", run_dir.display(), r.display()),
        });
    }
    let run = RunDir::open(&derived_root, run_id)?;
    let m = manifest::read(&run.dir)?;
    Ok((run, m))
}

/// The sandboxed run in `run_dir`, when [`locate`] cannot open it: under
/// the Landlock backend the command may read its own run directory but not
/// list ROOT's `runs/`. The same checks of the id and ROOT; the directory
/// is opened by its path, and the manifest must say the run is sandboxed
/// (its calls then go to runws, which opens the run its own way).
pub(crate) fn locate_sandboxed(
    run_dir: &Path,
    run_id: &str,
    root: Option<&Path>,
) -> Option<(String, PathBuf)> {
    workspace::check_run_id(run_id).ok()?;
    let derived_root = Root::of_run_dir(run_dir, run_id)?;
    if root.is_some_and(|r| r != derived_root.path()) {
        return None;
    }
    let m = manifest::read(&crate::fsx::Dir::open(run_dir).ok()?).ok()?;
    (m.run_id == run_id && m.sandbox.is_some()).then(|| (run_id.to_string(), run_dir.to_path_buf()))
}

impl Local {
    /// The run `run` (with manifest `m`, as [`locate`] found them), for this
    /// process, which must belong to it.
    pub(crate) fn for_this(run: RunDir, m: &Manifest) -> Result<Local> {
        let local = Local { run, caller: Caller::This };
        local.check_live(m)?;
        Ok(local)
    }

    /// The run in `run_dir`, for calls runws makes on behalf of process
    /// `pid`, which must belong to it.
    pub(crate) fn for_peer(run_dir: &Path, run_id: &str, root: &Path, pid: i32) -> Result<Local> {
        let (run, m) = locate(run_dir, run_id, Some(root))?;
        let local = Local { run, caller: Caller::Peer(pid) };
        local.check_live(&m)?;
        Ok(local)
    }

    fn check_live(&self, m: &Manifest) -> Result<()> {
        let id = &self.run.id;
        if &m.run_id != id {
            return Err(Error::NotInRun {
                why: format!(
                    "the manifest in `{}` names run `{}`, not `{id}`",
                    self.dir().display(),
                    m.run_id
                ),
            });
        }
        if m.status != Status::Running {
            return Err(Error::RunNotLive { run: id.clone(), why: format!("it is {}", m.status.as_str()) });
        }
        if m.host != procinfo::hostname() {
            return Err(Error::RunNotLive { run: id.clone(), why: format!("it runs on host `{}`", m.host) });
        }
        if !procinfo::is_same_process(m.runws.pid, m.runws.start_time) {
            return Err(Error::RunNotLive {
                run: id.clone(),
                why: format!("its runws process {} is gone", m.runws.pid),
            });
        }
        let caller = match self.caller {
            Caller::Peer(pid) => pid,
            Caller::This => std::process::id() as i32,
        };
        // Descent only: a process group can be joined by any process of the
        // same session (another run's among them), a parent cannot be chosen.
        if !procinfo::pid_belongs_to(caller, m.runws.pid, m.runws.start_time) {
            return Err(Error::NotInRun { why: format!("this process is not part of run `{id}`") });
        }
        Ok(())
    }

    fn outputs(&self) -> Result<Dir> {
        self.run.sub("outputs")
    }

    fn file_name(&self, name: &OsStr) -> OsName {
        OsName::from(name).joined(".", &self.run.id)
    }

    fn on_disk_matches(&self, outputs: &Dir, rec: &OutputRecord) -> Result<bool> {
        match outputs.open_read(&rec.file)? {
            None => Ok(false),
            Some(mut f) => {
                let (_, sha) = hash_reader(&mut f).ctx("cannot read", outputs.join(&rec.file))?;
                Ok(sha == rec.sha256)
            }
        }
    }

    /// Output `name` of this run, read once into a private copy (at most
    /// `in_memory` bytes of it in memory) whose hash is the recorded one,
    /// with its length and path: only that copy is handed on, since the
    /// file itself may be rewritten in place at any moment. `from` may only
    /// name this run.
    pub(crate) fn verified_copy(
        &self,
        name: &OsStr,
        from: Option<&str>,
        in_memory: usize,
    ) -> Result<(spool::Spool, u64, PathBuf)> {
        if let Some(other) = from
            && other != self.run.id
        {
            return Err(Error::CrossRunRead {
                current: self.run.id.clone(),
                other: shown::text(other),
                name: shown::os(name),
            });
        }
        verified_output(&self.run, &self.manifest()?, name, in_memory)
    }

    /// [`Calls::import`] held to `allowed` (runws's own copy of a sandboxed
    /// run's list) instead of the list the manifest records.
    /// `fleet` is the PostgreSQL store whose fleet view and archive store
    /// serve a run this ROOT does not hold (see [`super::elsewhere`]).
    pub(crate) fn import_within(
        &self,
        run: &str,
        name: &OsStr,
        allowed: Option<&[String]>,
        fleet: Option<&str>,
    ) -> Result<InputRecord> {
        fsx::check_name(name)?;
        workspace::check_run_id(run)?;
        let m = self.manifest()?;
        let refuse = |why: String| Error::ImportRefused { run: run.to_string(), name: shown::os(name), why };
        if run == self.run.id {
            return Err(refuse("a run cannot import its own output; use `runws get`".into()));
        }
        let local = RunDir::open(&self.run.root, run);
        let list = allowed.map(<[String]>::to_vec).or_else(|| allowlist::recorded(&m));
        // The fleet view is asked only when its answer could allow the
        // import: a run the list names, or any when it names jobs.
        let may_ask = list.as_ref().is_none_or(|l| allowlist::names_run(l, run) || allowlist::has_jobs(l));
        let remote = match (&local, fleet.filter(|u| crate::fleet::keeps_fleet(Some(u)))) {
            (Err(Error::NoSuchRun { .. }), Some(url)) if may_ask => super::elsewhere::record(url, run)?,
            _ => None,
        };
        if let Some(list) = list {
            let remote_job = remote.as_ref().filter(|r| r.status == "succeeded").map(|r| r.job.as_str());
            self.check_allowed(&list, run, name, remote_job)?;
        }
        // Imported already (by an earlier call, or by runws for a replay,
        // whose producer may be gone since): the copy in `inputs/` stands.
        if let Some(done) = m.inputs.iter().find(|i| {
            i.from_run.as_deref() == Some(run) && i.from_output.as_ref().is_some_and(|o| *o == *name)
        }) {
            return Ok(done.clone());
        }
        let producer = match (local, remote) {
            (Ok(p), _) => p,
            (Err(_), Some(rec)) => return self.import_elsewhere(run, name, &rec),
            (Err(e), None) => return Err(e),
        };
        let pm = manifest::read(&producer.dir)?;
        if pm.status != Status::Succeeded {
            return Err(refuse(format!(
                "run `{run}` is {}; only a succeeded run can be imported from",
                pm.status.as_str()
            )));
        }
        let rec = pm
            .output(name)
            .cloned()
            .ok_or_else(|| refuse(format!("run `{run}` did not produce `{}`", shown::os(name))))?;
        let src_dir = producer.sub("outputs")?;
        let src_path = src_dir.join(&rec.file);
        let Some(mut src) = src_dir.open_read(&rec.file)? else {
            return Err(Error::Integrity { path: src_path, expected: rec.sha256, found: "no file".into() });
        };
        let inputs = self.run.sub("inputs")?;
        inputs.mkdir_if_missing(run, 0o755)?;
        let into = inputs.sub(run)?;
        let (tmp, bytes, sha256) =
            stage(&into, name, &mut src, |e| Error::io("cannot import", &src_path, e))?;
        if sha256 != rec.sha256 {
            let _ = into.unlink(&tmp);
            return Err(Error::Integrity { path: src_path, expected: rec.sha256, found: sha256 });
        }
        self.commit_import(&into, &tmp, run, name, bytes, sha256)
    }

    /// An output of a run of another host, from the archive store the fleet
    /// view names, kept only when it hashes to what the view recorded.
    fn import_elsewhere(&self, run: &str, name: &OsStr, rec: &crate::store::FleetRun) -> Result<InputRecord> {
        let refuse = |why: String| Error::ImportRefused { run: run.to_string(), name: shown::os(name), why };
        let (expected, expected_bytes, url) = super::elsewhere::source(rec, run, name).map_err(refuse)?;
        let inputs = self.run.sub("inputs")?;
        inputs.mkdir_if_missing(run, 0o755)?;
        let into = inputs.sub(run)?;
        let (tmp, bytes, sha256) =
            super::elsewhere::extract(&self.run.root, &url, run, name, (&expected, expected_bytes), &into)?;
        if sha256 != expected || bytes != expected_bytes {
            let _ = into.unlink(&tmp);
            let path = PathBuf::from(format!("{url}!/outputs/{}.{run}", shown::os(name)));
            return Err(Error::Integrity { path, expected, found: sha256 });
        }
        self.commit_import(&into, &tmp, run, name, bytes, sha256)
    }

    /// Renames an imported output's temp file in `inputs/<run>/` to its
    /// name and records it as an input, while the run is live.
    fn commit_import(
        &self,
        into: &Dir,
        tmp: &str,
        run: &str,
        name: &OsStr,
        bytes: u64,
        sha256: String,
    ) -> Result<InputRecord> {
        let path = OsName::from(run).joined("/", name);
        let record = InputRecord {
            path: path.clone(),
            kind: "file".into(),
            bytes,
            sha256,
            from_run: Some(run.to_string()),
            from_output: Some(name.into()),
        };
        let result = manifest::update(&self.run.dir, true, |m| {
            self.check_live(m)?;
            into.rename(tmp, name)?;
            into.sync()?;
            m.inputs.retain(|i| i.path != path);
            m.inputs.push(record.clone());
            m.inputs.sort_by(|a, b| a.path.cmp(&b.path));
            m.input_fingerprint = fingerprint::combine(&m.inputs);
            Ok(record)
        });
        let _ = into.unlink(tmp);
        result
    }

    /// Refuses (exit 3), and records the refusal, unless `list` names run
    /// `run` or the job of that run (which must have succeeded). Whether the
    /// run exists is not told apart from whether it is allowed.
    fn check_allowed(
        &self,
        list: &[String],
        run: &str,
        name: &OsStr,
        remote_job: Option<&str>,
    ) -> Result<()> {
        if allowlist::names_run(list, run) {
            return Ok(());
        }
        // A succeeded run of another host, of a job the list names.
        if allowlist::has_jobs(list) && remote_job.is_some_and(|j| allowlist::names_job(list, j)) {
            return Ok(());
        }
        if allowlist::has_jobs(list)
            && let Ok(producer) = RunDir::open(&self.run.root, run)
            && let Ok(pm) = manifest::read(&producer.dir)
            && pm.status == Status::Succeeded
            && allowlist::names_job(list, &pm.job)
        {
            return Ok(());
        }
        let refusal = Error::ImportNotAllowed {
            current: self.run.id.clone(),
            other: run.to_string(),
            name: shown::os(name),
            allowed: allowlist::describe(list),
        };
        Err(self.record_refusal("import", run, name, refusal))
    }

    /// Records a cross-run call refused with exit 3 in the manifest's
    /// `refused` list (when, the call, the run asked for, the name, why)
    /// and returns the refusal, or why it could not be recorded.
    pub(crate) fn record_refusal(&self, call: &str, run: &str, name: &OsStr, refusal: Error) -> Error {
        let entry = RefusedRecord {
            at: manifest::format_time(SystemTime::now()),
            call: call.to_string(),
            name: OsName::from(name),
            run: run.to_string(),
            why: refusal.to_string(),
            extra: Default::default(),
        };
        let recorded = manifest::update(&self.run.dir, true, |m| {
            self.check_live(m)?;
            let list = m.refused.get_or_insert_with(Vec::new);
            list.truncate(MAX_REFUSED - 1);
            list.push(entry);
            Ok(())
        });
        match recorded {
            Ok(()) => refusal,
            Err(e) => e,
        }
    }
}

impl Calls for Local {
    fn run_id(&self) -> &str {
        &self.run.id
    }

    fn dir(&self) -> &Path {
        self.run.path()
    }

    /// The current manifest, after checking that the caller belongs to this
    /// live run.
    fn manifest(&self) -> Result<Manifest> {
        let m = manifest::read(&self.run.dir)?;
        self.check_live(&m)?;
        Ok(m)
    }

    /// Writes output `name` from `reader`: `outputs/<name>.<run_id>`,
    /// atomically, recorded with its bytes and sha256.
    fn put(&self, name: &OsStr, mut reader: &mut (dyn Read + Send)) -> Result<Written> {
        fsx::check_name(name)?;
        self.manifest()?;
        let outputs = self.outputs()?;
        let file = self.file_name(name);
        let fail = |e| Error::io("cannot write output", outputs.join(&file), e);
        let (tmp, bytes, sha256) = stage(&outputs, &file, &mut reader, fail)?;
        let result = manifest::update(&self.run.dir, true, |m| {
            self.check_live(m)?;
            if let Some(old) = m.output(name)
                && old.sha256 == sha256
                && self.on_disk_matches(&outputs, old)?
            {
                return Ok(Written::Unchanged(old.clone()));
            }
            outputs.rename(&tmp, &file)?;
            outputs.sync()?;
            let record = OutputRecord {
                name: name.into(),
                file: file.clone(),
                bytes,
                sha256: sha256.clone(),
                written_at: manifest::format_time(SystemTime::now()),
            };
            m.outputs.retain(|o| o.name != *name);
            m.outputs.push(record.clone());
            Ok(Written::New(record))
        });
        // Whatever happened, the temp file must not linger (after a rename
        // it no longer exists and this is a no-op).
        let _ = outputs.unlink(&tmp);
        result
    }

    /// Copies output `name` of this run to `out`. `from` may only name this
    /// run: reading another run's output is refused.
    fn get(&self, name: &OsStr, from: Option<&str>, mut out: &mut dyn Write) -> Result<u64> {
        let (copy, _, path) = self.verified_copy(name, from, spool::IN_MEMORY)?;
        copy.copy_to(&mut out).ctx("cannot copy output", &path)
    }

    /// True only if this run recorded `name` and its bytes still match.
    fn has(&self, name: &OsStr) -> Result<bool> {
        let checked =
            self.manifest().and_then(|m| open_output(&self.run, &m, name)).and_then(|(mut f, rec, path)| {
                let (_, sha) = hash_reader(&mut f).ctx("cannot read", &path)?;
                if sha != rec.sha256 {
                    return Err(Error::Integrity { path, expected: rec.sha256, found: sha });
                }
                Ok(())
            });
        match checked {
            Ok(()) => Ok(true),
            Err(Error::NotProduced { .. }) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Copies output `name` of the finished run `run` into
    /// `inputs/<run>/<name>`, and records it (with the producer run) in the
    /// inputs and the input fingerprint. Only from the runs the run's
    /// `--allow-import` names, when it has such a list (see
    /// [`crate::allowlist`]); a refusal is exit 3 and recorded.
    fn import(&self, run: &str, name: &OsStr) -> Result<InputRecord> {
        // A plain run's command has the store's URL when it was given one
        // (with a lease, or `--pass RUNWS_STORE`).
        let fleet = std::env::var("RUNWS_STORE").ok();
        self.import_within(run, name, None, fleet.as_deref())
    }

    /// Records something this run created outside plain files of its own
    /// directory (`path`, `branch`, `worktree`, `pgid`), for `reap`. A
    /// worktree must lie inside the run's directory and be listed by its
    /// repository; a branch must carry the run's id or `RUNWS_PREFIX` in its
    /// name (see [`crate::worktree`]); a process group is accepted only when
    /// its leader is alive and it and every member descend from this run's
    /// runws; anything else is refused here, and again by the reaper.
    fn claim(&self, kind: &ClaimKind, value: &str, repo: Option<&Path>) -> Result<Claim> {
        let cwd = std::env::current_dir().ctx("cannot read the current directory", ".")?;
        let absolute = |p: &Path| cwd.join(p).display().to_string();
        let too_long = |what: &str, len: usize| {
            Error::Usage(format!(
                "cannot claim {kind}: its {what} is {len} bytes; a claim is at most {MAX_CLAIM_BYTES} bytes"
            ))
        };
        if value.len() > MAX_CLAIM_BYTES {
            return Err(too_long("value", value.len()));
        }
        let bad = |why: &str| Error::Usage(format!("cannot claim {kind} `{}`: {why}", value.escape_debug()));
        if value.is_empty() || value.contains('\0') {
            return Err(bad("empty or holds NUL"));
        }
        let mut claim = Claim {
            kind: kind.clone(),
            value: value.to_string(),
            repo: None,
            start_time: None,
            claimed_at: manifest::format_time(SystemTime::now()),
            made_by_runws: false,
        };
        match claim.kind.clone() {
            ClaimKind::Path => claim.value = absolute(Path::new(value)),
            ClaimKind::Branch | ClaimKind::Worktree => {
                let repo_dir = absolute(repo.unwrap_or(Path::new(".")));
                if repo_dir.len() > MAX_CLAIM_BYTES {
                    return Err(too_long("repository", repo_dir.len()));
                }
                if claim.kind == ClaimKind::Branch {
                    if !crate::worktree::plain_branch_name(value) {
                        return Err(bad("not a branch name"));
                    }
                    if !crate::worktree::branch_is_the_runs(&self.run.id, value) {
                        return Err(bad(&format!(
                            "not a name runws gives run `{}`: use `runws/<run id>`, or a name starting with `$RUNWS_PREFIX` ({})",
                            self.run.id,
                            crate::workspace::prefix_for(&self.run.id)
                        )));
                    }
                    crate::git::dirs(Path::new(&repo_dir))
                        .map_err(|e| bad(&format!("`{repo_dir}` is not a git repository ({e})")))?;
                } else {
                    claim.value = absolute(Path::new(value));
                    match crate::worktree::owned(&self.run, &claim.value, Path::new(&repo_dir)) {
                        Ok(crate::worktree::Owned::Present { .. }) => {}
                        Ok(_) => return Err(bad("no such worktree")),
                        Err(why) => return Err(bad(why.message())),
                    }
                }
                claim.repo = Some(repo_dir);
            }
            ClaimKind::Pgid => {
                let pgid: i32 =
                    value.parse().ok().filter(|p| *p > 1).ok_or_else(|| bad("not a process group id"))?;
                claim.value = pgid.to_string();
            }
            ClaimKind::Unknown(_) => {
                return Err(Error::Usage(format!(
                    "cannot claim `{kind}`: use path, branch, worktree or pgid"
                )));
            }
        }
        // Made absolute, a value or repository may have grown past the limit.
        for (what, v) in [("value", Some(&claim.value)), ("repository", claim.repo.as_ref())] {
            if let Some(v) = v
                && v.len() > MAX_CLAIM_BYTES
            {
                return Err(too_long(what, v.len()));
            }
        }
        manifest::update(&self.run.dir, true, |m| {
            self.check_live(m)?;
            let held = m
                .claims
                .iter()
                .any(|c| c.kind == claim.kind && c.value == claim.value && c.repo == claim.repo);
            if !held && m.claims.len() >= MAX_CLAIMS {
                return Err(Error::Usage(format!(
                    "cannot claim {kind}: run `{}` already holds {MAX_CLAIMS} claims, the most a run holds",
                    self.run.id
                )));
            }
            if claim.kind == ClaimKind::Pgid {
                // Only a group the run made: its leader and every member
                // descend from this run's runws. The leader's start time is
                // kept so a reused id is not taken for it at reap time.
                let pgid: i32 = claim.value.parse().map_err(|_| bad("not a process group id"))?;
                let leader = crate::pgroup::claimable(pgid, m.runws.pid, m.runws.start_time, &m.run_id)
                    .map_err(|why| bad(&why))?;
                claim.start_time = Some(leader);
            }
            if !m
                .claims
                .iter()
                .any(|c| c.kind == claim.kind && c.value == claim.value && c.repo == claim.repo)
            {
                m.claims.push(claim.clone());
            }
            Ok(claim)
        })
    }
}

/// Copies `src` into a new temp file in `dir` that will become `name`, and
/// syncs it: the temp file's name, and the bytes and sha256 copied. When
/// the copy fails the temp file is removed, and `fail` makes the error.
fn stage(
    dir: &Dir,
    name: impl AsRef<OsStr>,
    src: &mut (impl Read + Send),
    fail: impl FnOnce(std::io::Error) -> Error,
) -> Result<(String, u64, String)> {
    let (tmp, mut f) = dir.create_temp(name, 0o644)?;
    let copied = copy_and_hash(src, &mut f).and_then(|r| f.sync_all().map(|()| r));
    drop(f);
    match copied {
        Ok((bytes, sha256)) => Ok((tmp, bytes, sha256)),
        Err(e) => {
            let _ = dir.unlink(&tmp);
            Err(fail(e))
        }
    }
}
