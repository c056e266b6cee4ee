//! `runws replay`: a finished run run again from what it recorded, as a new
//! run, and its result compared with the original's.
//!
//! The original is a run under ROOT or a sealed archive, restored (verified
//! and scanned as `restore` does) into a registered staging directory under
//! `ROOT/restores/` that lives as long as the replay needs it. Before
//! anything is created the original is checked: it has ended, it was
//! recorded by the caller's own user (a plain run can rewrite its manifest,
//! and nobody should execute a command another user's run recorded), every
//! argument was recorded as it was, and its input copies still hash to
//! their records (the evidence has not changed). The replay's request then
//! takes the recorded command, job, working directory, worktree base,
//! ports, timeout, import allowlist and isolation; its inputs are the
//! original's copies, imports included, and must come out as the original's
//! records (the pipeline checks that before the command starts), so its
//! input fingerprint is the original's. Variables are the one thing runws
//! never recorded the values of: names the original was passed are passed
//! again from the current environment, the rest the caller gives again, and
//! a replay that lacks any of them is refused naming all of them.

mod compare;

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

pub use compare::{compare, render};

use crate::envbuild::{self, Grant};
use crate::error::{Error, Result};
use crate::fingerprint::{self, Recorded};
use crate::fsx::Dir;
use crate::manifest::sandbox::Kind;
use crate::manifest::{self, Manifest, ReplayOf, Status};
use crate::restore::{self, Staged};
use crate::run::Request;
use crate::sandbox::{self, Isolated};
use crate::workspace::{Root, RunDir};

/// The run to replay, read and checked.
pub struct Original {
    pub m: Manifest,
    /// The directory that holds its manifest and `inputs/`: the run's own,
    /// or the staging directory its archive was restored into.
    pub dir: PathBuf,
    /// The archive it came from, and whether that lay in quarantine.
    pub archive: Option<(PathBuf, bool)>,
    /// The restored archive, removed when dropped unless kept.
    restored: Option<Staged>,
    /// Where [`Original::keep`] puts it.
    kept_at: PathBuf,
}

/// What the caller gives a replay besides the original.
#[derive(Default)]
pub struct Options {
    /// `--env KEY=VALUE`, `--env-file FILE`, `--pass KEY`: as for `run`.
    pub env: Vec<String>,
    pub env_file: Vec<PathBuf>,
    pub pass: Vec<String>,
    /// `--path`; the default PATH otherwise (the original's was not recorded).
    pub path: Option<String>,
    /// `--sandbox` and its options; the original's isolation otherwise.
    pub sandbox: Option<sandbox::Options>,
    /// `--limits=try` (`Some(true)`) or `--limits=on`; else `try` only when
    /// the original ran without the limits it asked for.
    pub limits_try: Option<bool>,
}

/// Reads and checks run `id` under `root`.
pub fn from_run(root: &Root, id: &str) -> Result<Original> {
    let rd = RunDir::open(root, id)?;
    let me = nix::unistd::getuid().as_raw();
    let (owner, _) = rd.dir.owner_and_birth();
    let m = manifest::read(&rd.dir)?;
    if owner != Some(me) || m.uid != me {
        return Err(Error::Usage(format!(
            "run `{id}` was recorded by uid {}, not by you (uid {me}): replay runs the command a run recorded, \
             so only its own user may replay it",
            owner.unwrap_or(m.uid)
        )));
    }
    let o =
        Original { m, dir: rd.path().to_path_buf(), archive: None, restored: None, kept_at: PathBuf::new() };
    check(&o)?;
    Ok(o)
}

/// Verifies `archive`, restores it into a staging directory under
/// `ROOT/restores/` (the secret scan as `restore` does it), and reads and
/// checks the run it holds. An archive from quarantine is replayed only
/// with `from_quarantine`.
pub fn from_archive(root: &Root, archive: &Path, from_quarantine: bool) -> Result<Original> {
    let quarantined = restore::in_quarantine(archive);
    if quarantined && !from_quarantine {
        return Err(Error::Usage(format!(
            "`{}` lies in quarantine (its seal failed, its scan was not clean or never ran); \
             replay it only with --from-quarantine",
            archive.display()
        )));
    }
    let me = nix::unistd::getuid().as_raw();
    // The path first, so that nothing is created for an archive of another
    // user's; then the file that was read (the path may be swapped meanwhile).
    if let Ok(meta) = std::fs::metadata(archive) {
        foreign_archive(archive, std::os::unix::fs::MetadataExt::uid(&meta), me)?;
    }
    restore::verify(archive)?;
    let restores = root.restores();
    crate::fsx::create_private_dirs(&restores).map_err(|e| Error::io("cannot create", &restores, e))?;
    let millis =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_millis();
    let target = restores.join(format!("replay-{millis}-{}", std::process::id()));
    let staged = restore::stage(archive, &target, Some(root), restore::Limits::default())?;
    foreign_archive(archive, staged.archive_uid(), me)?;
    let report = staged.report();
    if !report.findings.is_empty() && !report.from_quarantine {
        return Err(Error::SecretsFound {
            what: format!("archive `{}`", archive.display()),
            count: report.findings.len(),
        });
    }
    let dir = staged.staged_at().to_path_buf();
    let m = manifest::read_restored(&Dir::open(&dir)?).map_err(|e| match e {
        Error::ManifestMissing { .. } => {
            Error::Usage(format!("`{}` holds no run: it has no manifest.json", archive.display()))
        }
        e => e,
    })?;
    let o = Original {
        m,
        dir,
        archive: Some((archive.to_path_buf(), quarantined)),
        restored: Some(staged),
        kept_at: target,
    };
    check(&o)?;
    Ok(o)
}

/// Refuses an archive file owned by another user than the caller (or
/// root): whoever can write an archive decides the command its manifest
/// records, so, as for a run, nobody executes what another user recorded.
fn foreign_archive(archive: &Path, owner: u32, me: u32) -> Result<()> {
    if owner == me || owner == 0 {
        return Ok(());
    }
    Err(Error::Usage(format!(
        "archive `{}` belongs to uid {owner}, not to you (uid {me}): replay runs the command an archive \
         records, so only an archive of your own (or root's) is replayed",
        archive.display()
    )))
}

impl Original {
    /// Moves the restored copy of an archive into place under
    /// `ROOT/restores/` instead of removing it; returns where it is.
    pub fn keep(&mut self) -> Result<Option<PathBuf>> {
        let Some(staged) = self.restored.take() else { return Ok(None) };
        let target = self.kept_at.clone();
        staged.place()?;
        Ok(Some(target))
    }
}

/// Everything that refuses a replay before anything is created, except
/// the variables (see [`request`]).
fn check(o: &Original) -> Result<()> {
    let m = &o.m;
    let id = &m.run_id;
    if m.status == Status::Running {
        return Err(Error::Usage(format!(
            "run `{id}` has not ended (it is running, or was abandoned and not yet reaped): \
             a replay compares with a finished result"
        )));
    }
    if m.argv.is_empty() {
        return Err(Error::Usage(format!("run `{id}` recorded no command")));
    }
    if let Some(i) = m.argv.iter().position(|a| a.contains('\u{fffd}')) {
        return Err(Error::Usage(format!(
            "argument {i} of run `{id}` was not recorded as it was given (it was not UTF-8): \
             it cannot be replayed exactly"
        )));
    }
    let inputs_path = o.dir.join("inputs");
    let found = match Dir::open(&o.dir)?.sub("inputs") {
        Ok(inputs) => fingerprint::records_of(&inputs)?,
        Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(e),
    };
    // The copies on disk do not say which run produced an import: compare
    // with the records as they would read without it.
    let without_producer: Vec<_> = m
        .inputs
        .iter()
        .map(|r| manifest::InputRecord { from_run: None, from_output: None, ..r.clone() })
        .collect();
    fingerprint::check_same(&without_producer, &found, &inputs_path).map_err(|e| match e {
        Error::Integrity { path, expected, found } => Error::Integrity {
            path,
            expected: format!("{expected}, as run `{id}` recorded it (its evidence has changed since)"),
            found,
        },
        e => e,
    })?;
    // Each top-level entry is given to the replay as `--input`, which
    // follows the path it is given: a link there would copy whatever it
    // points to. `--input` copies what its path names, so no run of runws's
    // recorded one; the manifest was edited.
    if let Some(link) = m.inputs.iter().find(|r| r.kind == "symlink" && !r.path.as_bytes().contains(&b'/')) {
        return Err(Error::Integrity {
            path: inputs_path.join(Path::new(std::ffi::OsStr::from_bytes(link.path.as_bytes()))),
            expected: format!(
                "{} (a symbolic link, which no --input records: run `{id}`'s evidence has changed since)",
                link.sha256
            ),
            found: "a link the replay's --input would follow".into(),
        });
    }
    if let Some(w) = &m.worktree
        && !Path::new(&w.repo).is_dir()
    {
        return Err(Error::Usage(format!(
            "run `{id}` ran in a worktree of `{}`, which is not a directory here",
            crate::shown::text(&w.repo)
        )));
    }
    Ok(())
}

/// One variable the replay lacks: its name and how the original got it.
struct Missing {
    name: String,
    how: &'static str,
}

/// The request that replays `o`: new id, directory, ports and paths; the
/// original's command, job, working directory, inputs and isolation.
pub fn request(o: &Original, opts: Options, root: Option<PathBuf>, store: Option<String>) -> Result<Request> {
    let m = &o.m;
    let pass = variables(m, &opts)?;
    let mut req = Request::new(m.argv.iter().map(OsString::from).collect());
    req.root = root;
    req.store = store;
    req.job = Some(m.job.clone());
    req.env = opts.env;
    req.env_file = opts.env_file;
    req.pass = pass;
    if let Some(p) = opts.path {
        req.path = p;
    }
    req.ports = u16::try_from(m.ports.len()).unwrap_or(u16::MAX);
    if let Some(p) = m.ports.first() {
        req.port_host = p.host.clone();
    }
    req.listen = m.listen;
    req.capture = m.capture;
    req.timeout = m.timeout_ms.map(Duration::from_millis);
    req.lease_ttl = Duration::from_millis(m.lease_ttl_ms).max(Duration::from_millis(30));
    // The limits it ran under: a job that ran out of memory (or processes)
    // under them is held to them again, not let loose on the machine.
    if let Some(r) = &m.resources {
        req.limits = crate::cgroup::Limits {
            memory: r.memory_limit,
            pids: r.pids_limit,
            cpu: r.cpu_limit.map(|c| c.clamp(0.01, 4096.0)),
            // Recorded as missing: it ran with `--limits=try` and without them.
            try_mode: opts.limits_try.unwrap_or(r.missing.is_some()),
        };
        crate::run::limits_available(&req.limits)?;
    }
    req.allow_import = m
        .sandbox
        .as_ref()
        .and_then(|s| s.allow_import.clone())
        .or_else(|| m.allow_import.clone())
        .unwrap_or_default();
    // Relative paths of the command are found from where the original was
    // started, while that directory is there.
    let from = Path::new(&m.invoked_from);
    if from.is_absolute() && from.is_dir() {
        req.invoked_from = Some(from.to_path_buf());
    }
    let (tops, imports) = split_inputs(o)?;
    req.inputs = tops;
    if !imports.is_empty() {
        req.imports = Some(Recorded { run_dir: o.dir.clone(), records: imports });
    }
    req.expect_inputs = Some(m.inputs.clone());
    // The working directory: the run's own work/ or worktree when the
    // original's was its own, else the same directory.
    let own = |sub: &str| m.cwd.ends_with(&format!("/runs/{}/{sub}", m.run_id));
    match &m.worktree {
        Some(w) => {
            req.worktree = Some(PathBuf::from(&w.repo));
            req.base = w.base.clone();
            if !own("repo") {
                req.cwd = Some(PathBuf::from(&m.cwd));
            }
        }
        None if own("work") => {}
        None => req.cwd = Some(PathBuf::from(&m.cwd)),
    }
    if let Some(c) = &req.cwd
        && !c.is_absolute()
    {
        return Err(Error::Usage(format!(
            "run `{}` recorded a working directory that is not absolute",
            m.run_id
        )));
    }
    let isolation = match opts.sandbox {
        Some(s) => Some(s),
        None => recorded_isolation(m)?,
    };
    if let Some(opts) = isolation {
        req.isolation = Box::new(Isolated::new(opts));
    }
    req.replay_of = Some(ReplayOf {
        run: m.run_id.clone(),
        archive: o.archive.as_ref().map(|(a, _)| std::path::absolute(a).unwrap_or_else(|_| a.clone())),
        from_quarantine: o.archive.as_ref().is_some_and(|(_, q)| *q),
        extra: Default::default(),
    });
    Ok(req)
}

/// The original's isolation, as its record says: a sandboxed run is
/// replayed in the same sandbox, an audited one under audit.
/// A run whose network went through a proxy is replayed under the policy
/// it recorded, read back as strictly as the command line.
fn recorded_isolation(m: &Manifest) -> Result<Option<sandbox::Options>, Error> {
    let Some(s) = m.sandbox.as_ref() else { return Ok(None) };
    let egress = match (s.net, &m.net) {
        (sandbox::Net::Allow, Some(rec)) => Some(crate::egress::from_record(rec).map_err(|e| {
            Error::Usage(format!("run `{}` recorded a network policy runws cannot use: {e}", m.run_id))
        })?),
        (sandbox::Net::Allow, None) => {
            return Err(Error::Usage(format!(
                "run `{}` ran behind a network policy it did not record",
                m.run_id
            )));
        }
        _ => None,
    };
    // `--rw`, `--ro` and `--hide` as given: a relative one was found from
    // where the original was started, and is found from there again.
    let from = Path::new(&m.invoked_from);
    let paths = |l: &[String]| {
        l.iter()
            .map(|p| match Path::new(p) {
                p if p.is_relative() && from.is_absolute() => from.join(p),
                p => p.to_path_buf(),
            })
            .collect::<Vec<_>>()
    };
    Ok(Some(match s.kind {
        Kind::Sandbox => sandbox::Options {
            kind: Kind::Sandbox,
            try_mode: s.mode == "try",
            net: s.net,
            egress: egress.clone(),
            rw: paths(&s.rw),
            ro: paths(&s.ro),
            hide: paths(&s.hide),
            caches: Vec::new(),
            json: false,
            allow_userns: s.nested_userns,
            // The backend the original asked for (`on` and `try` let runws
            // choose, here as there).
            backend: sandbox::mode(&s.mode).1,
        },
        Kind::Audit => sandbox::Options {
            kind: Kind::Audit,
            try_mode: false,
            net: if egress.is_some() { sandbox::Net::Allow } else { sandbox::Net::Host },
            egress,
            rw: Vec::new(),
            ro: Vec::new(),
            hide: Vec::new(),
            caches: Vec::new(),
            json: false,
            allow_userns: true,
            backend: sandbox::Choice::Namespaces,
        },
    }))
}

/// The original's input copies to give as `--input` (each top-level entry
/// of its `inputs/`), and its imports, copied apart with their producers.
fn split_inputs(o: &Original) -> Result<(Vec<PathBuf>, Vec<manifest::InputRecord>)> {
    let first = |r: &manifest::InputRecord| {
        let b = r.path.as_bytes();
        b.split(|c| *c == b'/').next().unwrap_or(b).to_vec()
    };
    let imports: Vec<_> = o.m.inputs.iter().filter(|r| r.from_run.is_some()).cloned().collect();
    let import_tops: BTreeSet<Vec<u8>> = imports.iter().map(first).collect();
    if let Some(mixed) = o.m.inputs.iter().find(|r| r.from_run.is_none() && import_tops.contains(&first(r))) {
        return Err(Error::Usage(format!(
            "run `{}` holds input `{}` beside its imports from the run of the same name: it cannot be replayed",
            o.m.run_id,
            mixed.path.shown()
        )));
    }
    let inputs = o.dir.join("inputs");
    let mut tops = Vec::new();
    if let Ok(dir) = Dir::open(&o.dir)?.sub("inputs") {
        let mut names = dir.entries_raw()?;
        names.sort();
        for (name, _) in names {
            if !import_tops.contains(name.as_bytes()) {
                tops.push(inputs.join(name));
            }
        }
    }
    Ok((tops, imports))
}

/// The `--pass` list of the replay: the caller's, and every name the
/// original was passed that the caller does not give otherwise. Refuses,
/// naming every one, when a variable the original was given is missing.
fn variables(m: &Manifest, opts: &Options) -> Result<Vec<String>> {
    let mut given: BTreeSet<String> = BTreeSet::new();
    for f in &opts.env_file {
        for g in envbuild::read_env_file(f)? {
            if let Grant::Value { key, .. } = g {
                given.insert(key);
            }
        }
    }
    for e in &opts.env {
        if let Grant::Value { key, .. } = envbuild::parse_env_arg(e)? {
            given.insert(key);
        }
    }
    let mut pass = opts.pass.clone();
    let passed = |name: &str| std::env::var_os(name).is_some();
    let names_given: BTreeSet<String> = opts.pass.iter().cloned().collect();
    let mut missing = Vec::new();
    for r in m.env.iter().filter(|r| r.granted) {
        let name = r.name.as_str();
        if given.contains(name) {
            continue;
        }
        if r.source == "pass" {
            if !names_given.contains(name) {
                pass.push(name.to_string());
            }
            if r.present && !envbuild::is_glob(name) && !passed(name) {
                missing.push(Missing { name: name.to_string(), how: "--pass, not set now" });
            }
        } else if r.present && !(names_given.contains(name) && passed(name)) {
            let how = if r.source == "env-file" { "--env-file" } else { "--env" };
            missing.push(Missing { name: name.to_string(), how });
        }
    }
    if !missing.is_empty() {
        let listed: Vec<String> =
            missing.iter().map(|x| format!("{} ({})", crate::shown::text(&x.name), x.how)).collect();
        return Err(Error::Usage(format!(
            "run `{}` was given variables whose values runws never records; give them again \
             (--env-file, --env or --pass): {}",
            m.run_id,
            listed.join(", ")
        )));
    }
    Ok(pass)
}
