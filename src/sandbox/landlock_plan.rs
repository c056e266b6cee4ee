//! The Landlock backend's preparation: what to hide, grant and make
//! writable for this run, checked for what Landlock cannot express, the
//! plan the command's process enforces (see [`super::landlock`]), and the
//! run's sandbox record.

use std::path::{Path, PathBuf};

use super::plan::{asked, caches, canonical, hand_to_init, homes, put_record};
use super::{Kind, Net, Options, Plan, Record, Setup, broker};
use super::{landlock, landlock_walk};
use crate::child::Spec;
use crate::error::{Error, IoContext, Result};
use crate::manifest::Manifest;
use crate::workspace::{EVIDENCE, RunDir, SCRATCH};

/// What a Landlock run hides: the homes, ROOT (resolved already), root's
/// secrets for a root command, and `--hide`.
fn hidden_paths(opts: &Options, uid: u32, root: &Path, base: &Path) -> Result<Vec<PathBuf>> {
    let mut hidden: Vec<PathBuf> = homes(uid);
    hidden.push(root.to_path_buf());
    if uid == 0 {
        hidden.extend(landlock::ROOT_SECRETS.iter().map(PathBuf::from).filter(|p| p.exists()));
    }
    for p in &opts.hide {
        hidden.push(canonical(p, "--hide", base)?);
    }
    Ok(hidden)
}

/// Every path resolved once (each resolution reads each of its links);
/// one that does not exist hides nothing.
fn resolved(paths: &[PathBuf]) -> Vec<PathBuf> {
    paths.iter().filter_map(|h| std::fs::canonicalize(h).ok()).collect()
}

/// Starts the walk of `/` around what a Landlock run of `opts` under ROOT
/// `root` hides, before the run exists (see [`landlock_walk::Walk`]); `None`
/// when that cannot be known yet (a path that does not resolve, which
/// [`prepare`] then reports).
pub fn early_walk(opts: &Options, root: &Path) -> Option<landlock_walk::Walk> {
    let uid = nix::unistd::getuid().as_raw();
    let root = std::fs::canonicalize(root).ok()?;
    let base = std::env::current_dir().ok()?;
    let hidden = hidden_paths(opts, uid, &root, &base).ok()?;
    landlock_walk::Walk::start(resolved(&hidden), opts.net == Net::None)
}

/// Where a Landlock run is prepared: its directory, ROOT, the runws binary;
/// why this backend, when runws chose it; the walk begun early, if any.
pub struct Where<'a> {
    pub run: &'a RunDir,
    pub root: &'a Path,
    pub exe: &'a Path,
    pub why: Option<String>,
    pub walk: Option<landlock_walk::Walk>,
}

/// Whether runws holds any capability (root does): its child must then
/// empty its bounding set, not merely try.
fn holds_capabilities() -> bool {
    rustix::thread::capabilities(None).map_or(true, |c| !c.permitted.is_empty())
}

/// The Landlock backend's side of [`super::prepare`]: no namespace, no mount; the
/// rules the command's process enforces on itself (see
/// [`super::landlock`]), and the run recorded as such. `why` says why the
/// backend was chosen when the user did not name it.
pub fn prepare(opts: &Options, spec: &mut Spec, at: Where<'_>, m: &mut Manifest) -> Result<Setup> {
    let Where { run, root, exe, why, walk } = at;
    let uid = nix::unistd::getuid().as_raw();
    let gid = nix::unistd::getgid().as_raw();
    let run_dir = std::fs::canonicalize(run.path()).ctx("cannot resolve", run.path())?;
    let root = std::fs::canonicalize(root).ctx("cannot resolve", root)?;
    let exe = std::fs::canonicalize(exe).ctx("cannot resolve", exe)?;
    let program = std::fs::canonicalize(&spec.program).unwrap_or_else(|_| spec.program.clone());
    let base = std::env::current_dir().ctx("cannot read the current directory", ".")?;
    let abi = landlock::abi();
    let (enforced, gaps) = landlock::protections(abi, opts.net == Net::None);
    let mut missing = Vec::new();
    for gap in gaps {
        if !opts.try_mode {
            return Err(Error::Sandbox(format!("{gap} (--sandbox=try runs without it)")));
        }
        missing.push(super::Missing { protection: gap.protection.to_string(), why: gap.why });
    }
    let mut hidden = hidden_paths(opts, uid, &root, &base)?;
    let mut named: Vec<(PathBuf, &str)> = Vec::new();
    for p in &opts.hide {
        named.push((canonical(p, "--hide", &base)?, "--hide"));
    }
    let mut granted = vec![run_dir.clone(), exe.clone(), program];
    for p in &opts.ro {
        let c = canonical(p, "--ro", &base)?;
        granted.push(c.clone());
        named.push((c, "--ro"));
    }
    let mut write: Vec<PathBuf> = EVIDENCE
        .iter()
        .chain(SCRATCH.iter())
        .map(|sub| run_dir.join(sub))
        .filter(|p| std::fs::symlink_metadata(p).is_ok_and(|m| m.is_dir()))
        .collect();
    for p in &opts.rw {
        let c = canonical(p, "--rw", &base)?;
        write.push(c.clone());
        named.push((c, "--rw"));
    }
    for c in caches(opts, &base)? {
        if c.target != c.dir {
            return Err(Error::Usage(format!(
                "--cache `{}:{}`: the Landlock backend cannot show a directory at another path \
                 (give --cache `{}`, or use --sandbox=ns)",
                c.dir.display(),
                c.target.display(),
                c.dir.display()
            )));
        }
        write.push(c.dir);
    }
    for (i, (a, flag)) in named.iter().enumerate() {
        if named[..i].iter().any(|(b, _)| b == a) {
            return Err(Error::Usage(format!(
                "`{}` is named by more than one of --rw, --ro and --hide",
                a.display()
            )));
        }
        // Landlock only adds access: what lies inside a writable path stays
        // writable, whatever a narrower flag says.
        if *flag != "--rw"
            && let Some(w) = write.iter().find(|w| a.starts_with(w) && *w != a)
        {
            return Err(Error::Usage(format!(
                "{flag} `{}` lies inside the writable `{}`: the Landlock backend cannot take access \
                 back below a granted path (use --sandbox=ns)",
                a.display(),
                w.display()
            )));
        }
    }
    let hidden_resolved = resolved(&hidden);
    // Nor can a writable directory keep a hidden path below it (a home,
    // ROOT with the other runs, root's secrets) out of reach.
    for w in &write {
        if let Some(h) = hidden_resolved.iter().find(|h| h.starts_with(w) && *h != w) {
            return Err(Error::Usage(format!(
                "`{}` is writable and holds the hidden `{}`: the Landlock backend cannot take access back \
                 below a granted path (use --sandbox=ns)",
                w.display(),
                h.display()
            )));
        }
    }
    let deny_tcp = opts.net == Net::None;
    let writable = landlock_walk::writable(&write);
    // The command's process confines itself with what runws prepares here
    // (the ruleset, filled on another thread while the run starts; the
    // filter compiled): no fork of runws, no init. `--sandbox=try` takes
    // the init, which can go without a protection the kernel refuses and
    // say so.
    let mut filling = None;
    let (status, original_program) = if opts.try_mode {
        let plan = Plan {
            kind: Kind::Sandbox,
            try_mode: opts.try_mode,
            net: opts.net,
            user_namespace: false,
            uid,
            gid,
            runws_pid: std::process::id() as i32,
            program: spec.program.clone(),
            cwd: spec.cwd.clone(),
            run_dir: run_dir.clone(),
            mounts: Vec::new(),
            allow_userns: opts.allow_userns,
            unprivileged: None,
            own_userns_fd: None,
            net_fd: None,
            report_fd: None,
            landlock: Some(landlock_walk::rules(&hidden_resolved, &granted, &write, deny_tcp)),
        };
        let (status_r, original) = hand_to_init(spec, &exe, &plan, true)?;
        (Some(status_r), original)
    } else {
        let filter = super::seccomp::compiled(super::seccomp::Filter {
            allow_userns: opts.allow_userns,
            unix_sockets_only: deny_tcp,
        })
        .map_err(|r| Error::Sandbox(r.to_string()))?;
        // The walk started before the run existed, when it was for these
        // hidden paths: its thread adds the run's own paths too, and runws
        // waits for it before the gate. Else (a hidden path that did not
        // resolve then, say) the whole ruleset is made here.
        let ruleset = match walk.filter(|w| w.serves(&hidden_resolved, deny_tcp)) {
            Some(w) => {
                let (ruleset, pending) = w.grant(granted.clone(), write.clone());
                filling = Some(pending);
                ruleset
            }
            None => landlock::ruleset(&landlock_walk::rules(&hidden_resolved, &granted, &write, deny_tcp))
                .map_err(|r| Error::Sandbox(r.to_string()))?,
        };
        spec.confine = Some(crate::child::Confinement {
            cloexec_from: 3 + spec.listen.len() as u32,
            bounding_required: holds_capabilities(),
            // Above the numbers the listening sockets are placed at.
            landlock: Some(crate::child::high_fd(ruleset)?),
            filter,
        });
        (None, spec.program.clone())
    };
    let shown = |v: &[PathBuf]| v.iter().map(|p| p.display().to_string()).collect::<Vec<_>>();
    hidden.sort();
    hidden.dedup();
    let record = Record {
        kind: Kind::Sandbox,
        backend: Some(super::Backend::Landlock),
        chosen_because: why,
        enforced: enforced.into_iter().map(|(protection, by)| super::Enforced { protection, by }).collect(),
        not_covered: landlock::not_covered(uid == 0),
        landlock: Some(super::LandlockRecord {
            abi: abi.unwrap_or(0),
            hidden: shown(&hidden),
            writable: shown(&writable),
        }),
        ..asked(opts)
    };
    put_record(m, record)?;
    let mut cache_locks = Vec::new();
    for c in caches(opts, &base)? {
        cache_locks.push(crate::cache::lock(&c.dir, false)?);
    }
    let broker = broker::Server::bind(run)?;
    Ok(Setup {
        _cache_locks: cache_locks,
        kind: Kind::Sandbox,
        status,
        report: None,
        reported: std::cell::Cell::new(None),
        broker: Some(broker),
        program: original_program,
        json: opts.json,
        missing,
        git_common: None,
        landlock: true,
        filling,
        proxy: None,
    })
}
