//! The sandbox and the audit as a run's [`Isolation`]: where each step of
//! [`crate::run`] hands over to this module.

use std::path::{Component, Path, PathBuf};

use super::{Backend, Choice, Kind, Options, Setup};
use crate::child::{Ended, Outcome, Spec};
use crate::error::{Error, IoContext, Result};
use crate::manifest::Manifest;
use crate::run::{Isolation, Note, Opened, Preparing};
use crate::workspace::RunDir;

/// A sandboxed or audited run: its options, then its setup once prepared.
pub struct Isolated {
    opts: Options,
    /// Not as root: the user namespace made by [`Isolation::early`], which
    /// the init enters, and with `--net none` the network namespace.
    own: Option<super::ns::Own>,
    /// Why the user namespace of [`Isolation::early`] could not be made.
    own_failed: Option<String>,
    setup: Option<Setup>,
    /// `--net allow`: the proxy, serving from the moment the run opens.
    serving: Option<crate::egress::Serving>,
    /// The Landlock backend: its walk of `/`, started by
    /// [`Isolation::early`].
    walk: Option<super::landlock_walk::Walk>,
}

impl Isolated {
    pub fn new(opts: Options) -> Isolated {
        Isolated { opts, own: None, own_failed: None, setup: None, serving: None, walk: None }
    }

    /// The backend of a sandbox: the one named, or namespaces unless
    /// something says they cannot work here and Landlock can (with why).
    fn backend(&self) -> (Backend, Option<String>) {
        match self.opts.backend {
            Choice::Namespaces => (Backend::Namespaces, None),
            Choice::Landlock => (Backend::Landlock, None),
            Choice::Auto => {
                let uid = nix::unistd::getuid().as_raw();
                let why = super::ns::blocked(uid).or_else(|| self.own_failed.clone());
                match why {
                    Some(why) if super::landlock::abi().is_some() => (Backend::Landlock, Some(why)),
                    _ => (Backend::Namespaces, None),
                }
            }
        }
    }
}

impl Isolation for Isolated {
    fn shows_store(&self) -> bool {
        false
    }

    /// Not as root, a sandbox's user namespace is made now, while runws may
    /// still write its maps: the init then runs in the child runws forks,
    /// like root's, instead of a fresh `runws __sandbox-init` (an exec, and
    /// the loading and start of runws, on the command's path). Only the
    /// namespace and its two one-line maps exist yet: nothing of the run.
    fn early(&mut self, root: &crate::workspace::Root) {
        let uid = nix::unistd::getuid().as_raw();
        let wanted = self.opts.kind == Kind::Sandbox || self.opts.net == super::Net::Allow;
        if wanted && uid != 0 && self.opts.backend != Choice::Landlock {
            let gid = nix::unistd::getgid().as_raw();
            match super::ns::own_user_namespace(uid, gid, self.opts.net.isolated()) {
                Ok(own) => self.own = Some(own),
                Err(e) => self.own_failed = Some(e.to_string()),
            }
        }
        // A Landlock sandbox's walk of `/` needs only what the run hides:
        // it starts now, while the run is made (see `landlock_walk::Walk`).
        if self.opts.kind == Kind::Sandbox
            && !self.opts.try_mode
            && self.opts.net != super::Net::Allow
            && self.backend().0 == Backend::Landlock
        {
            self.walk = super::landlock_plan::early_walk(&self.opts, root.path());
        }
    }

    /// The child executes the sandbox's init, which runs the command.
    fn prepare(&mut self, at: &Preparing<'_>, spec: &mut Spec, m: &mut Manifest) -> Result<()> {
        let mut opts = self.opts.clone();
        if opts.kind == Kind::Sandbox
            && let (Backend::Landlock, why) = self.backend()
        {
            if opts.net == super::Net::Allow {
                let because = why.as_deref().map(|w| format!(" ({w})")).unwrap_or_default();
                return Err(Error::Sandbox(format!(
                    "--net allow needs the namespace sandbox{because}: under Landlock a command could reach any host on the proxy's port, so the policy could not be enforced"
                )));
            }
            if let Some(why) = &why {
                eprintln!("runws: sandbox: namespaces cannot be used here ({why}); using Landlock");
            }
            if at.worktree.is_some() {
                return Err(Error::Usage(
                    "--worktree with the Landlock sandbox is not supported yet (it needs the namespace backend)"
                        .into(),
                ));
            }
            self.own = None;
            let walk = self.walk.take();
            let place = super::landlock_plan::Where { run: at.run, root: at.root, exe: at.exe, why, walk };
            let setup = super::landlock_plan::prepare(&opts, spec, place, m)?;
            if let Some(rec) = m.sandbox.as_mut() {
                rec.allow_import = Some(at.allow_import.to_vec());
            }
            self.setup = Some(setup);
            return Ok(());
        }
        let sandboxed_worktree = at.worktree.filter(|_| opts.kind == Kind::Sandbox);
        // A sandboxed run's worktree commits into the repository's shared
        // object store, refs and logs: those stay writable.
        if let Some(w) = sandboxed_worktree {
            let (rw, ro) = git_writable(&w.common_dir, &at.run.path().join("repo"), &opts)?;
            opts.rw.extend(rw);
            opts.ro.extend(ro);
        }
        let mut setup = super::prepare(&opts, spec, at.run, at.root, at.exe, self.own.take(), m)?;
        setup.git_common = sandboxed_worktree.map(|w| w.common_dir.clone());
        if let Some(rec) = m.sandbox.as_mut() {
            rec.allow_import = Some(at.allow_import.to_vec());
        }
        self.setup = Some(setup);
        Ok(())
    }

    /// A Landlock ruleset is whole before the command may enforce it.
    fn before_gate(&mut self) -> Result<()> {
        match self.setup.as_mut().and_then(|s| s.filling.take()) {
            Some(filling) => filling.finish().map_err(|r| Error::Sandbox(r.to_string())),
            None => Ok(()),
        }
    }

    /// Guard calls from inside reach runws over the run's socket (listening
    /// already: a call made before this thread runs waits for it).
    fn opened(&mut self, at: &Opened<'_>) {
        // The proxy serves before anything else: the command may connect
        // at once (it waits in the backlog until then).
        if let Some(pending) = self.setup.as_mut().and_then(|s| s.proxy.take()) {
            let dir = crate::fsx::Dir::open(at.run.path()).ok();
            self.serving = Some(pending.serve(dir));
        }
        let Some(broker) = self.setup.as_mut().and_then(|s| s.broker.take()) else { return };
        // The run's lease as runws took it: all a sandboxed command's
        // `publish` and `lease` calls can reach.
        let leased = at.lease.map(|l| super::broker::RunLease {
            url: l.url.clone(),
            key: l.key.clone(),
            holder: l.holder.clone(),
            token: l.token,
            ttl: l.ttl,
        });
        broker.serve(
            at.run.path().to_path_buf(),
            at.run.id.clone(),
            at.root.clone(),
            at.allow_import.to_vec(),
            leased,
            at.store.map(str::to_string),
        );
    }

    /// The init reports a refused setup, or each protection `--sandbox=try`
    /// went without, before the command runs.
    fn started(&mut self) -> Result<Option<Note>> {
        let Some(setup) = self.setup.as_mut() else { return Ok(None) };
        let missing = setup.wait_started()?;
        if missing.is_empty() {
            return Ok(None);
        }
        Ok(Some(Box::new(move |m: &mut Manifest| super::note_missing(m, &missing))))
    }

    fn end_report(&self) -> Option<Ended<'_>> {
        self.setup.as_ref()?.ended()
    }

    fn ended(&mut self, run: &RunDir, outcome: &mut Outcome) -> Option<Note> {
        // Nothing of the run is alive: no connection is asked for any more.
        let net = self.serving.take().map(crate::egress::Serving::finish);
        if let Some(n) = &net
            && self.opts.kind == Kind::Audit
            && !self.opts.json
        {
            eprint!("{}", crate::egress::log::audit_report(n, &run.id));
        }
        let note: Option<Note> = net.map(|n| -> Note { Box::new(move |m: &mut Manifest| m.net = Some(n)) });
        let Some(setup) = self.setup.as_mut() else { return note };
        // A child that was the sandbox's PID 1 reports the command's status.
        if let Some(raw) = setup.command_status() {
            *outcome = Outcome::from_wait_status(raw, outcome.timed_out);
        }
        if setup.landlock {
            super::restore_top_modes(run.path());
        }
        // Nothing of the run is alive any more; what it left in the parts of
        // REPO's `.git` it could write, for a later git to follow, goes.
        if let Some(common) = &setup.git_common {
            for p in crate::git::remove_planted(common) {
                eprintln!("runws: warning: removed `{}`: run `{}` left it there", p.display(), run.id);
            }
        }
        // Record and show what an audit found; the command's end is
        // recorded all the same.
        if let Err(e) = setup.finish(run) {
            eprintln!("runws: warning: cannot record the audit of run `{}`: {e}", run.id);
        }
        note
    }
}

/// What of REPO a sandboxed worktree run may write: what a commit on its
/// own branch writes (the shared `objects/`, `refs/` and `logs/`, and the
/// worktree's own directory under `worktrees/`) and the worktree itself;
/// every other part of the shared `.git` stays read-only (and visible, even
/// under a hidden home). Git reads programs to run from many files there
/// (`config`, `config.worktree`, `hooks/`, `info/attributes`, the same under
/// `modules/` for each submodule and under `worktrees/` for every other
/// worktree), and the worktree's own `commondir`, `gitdir` and
/// `config.worktree` stay read-only too: a run could otherwise plant one for
/// the user's next git, or runws's. Returns the paths for `--rw` and `--ro`; one the user named
/// with `--rw`, `--ro` or `--hide` is left to that flag. A symlink among
/// them is refused: it could be replaced from inside, the mount staying on
/// its target.
fn git_writable(
    common: &Path,
    worktree: &Path,
    opts: &Options,
) -> Result<(Vec<PathBuf>, Vec<PathBuf>), Error> {
    let named: Vec<PathBuf> = opts
        .rw
        .iter()
        .chain(&opts.ro)
        .chain(&opts.hide)
        .filter_map(|p| std::fs::canonicalize(p).ok())
        .collect();
    let plain_dir = |p: &Path| -> Result<PathBuf, Error> {
        if std::fs::symlink_metadata(p).is_err() {
            std::fs::create_dir(p).ctx("cannot create", p)?;
        }
        if !std::fs::symlink_metadata(p).ctx("cannot read", p)?.is_dir() {
            return Err(Error::Usage(format!(
                "`{}` is not a plain directory (a symlink could be replaced from inside a sandboxed worktree run)",
                p.display()
            )));
        }
        std::fs::canonicalize(p).ctx("cannot resolve", p)
    };
    // The worktree's own directory, as its `.git` file names it (runws just
    // made it with `git worktree add`): it must lie in `common/worktrees/`.
    let link = std::fs::read_to_string(worktree.join(".git")).ctx("cannot read", worktree.join(".git"))?;
    let admin = link
        .strip_prefix("gitdir: ")
        .map(|p| PathBuf::from(p.trim_end()))
        .filter(|p| {
            p.parent() == Some(common.join("worktrees").as_path())
                && matches!(p.components().next_back(), Some(Component::Normal(_)))
        })
        .ok_or_else(|| {
            Error::Other(format!(
                "`{}` does not name a directory under `{}/worktrees`",
                worktree.display(),
                common.display()
            ))
        })?;
    let mut rw = vec![worktree.to_path_buf()];
    for p in [common.join("objects"), common.join("refs"), common.join("logs"), admin.clone()] {
        rw.push(plain_dir(&p)?);
    }
    let mut ro = vec![plain_dir(common)?];
    // In the worktree's own directory, what tells git where the repository
    // is (`commondir`, `gitdir`) and the worktree's own configuration: a
    // run that rewrote them would choose the configuration, and so the
    // programs, of every later git in its worktree. `config.worktree` is
    // made empty where missing, so it cannot be created from inside.
    for name in ["commondir", "gitdir", "config.worktree"] {
        let p = admin.join(name);
        if name == "config.worktree" && std::fs::symlink_metadata(&p).is_err() {
            std::fs::write(&p, "").ctx("cannot create", &p)?;
        }
        if !std::fs::symlink_metadata(&p).ctx("cannot read", &p)?.is_file() {
            return Err(Error::Usage(format!("`{}` is not a plain file", p.display())));
        }
        ro.push(p);
    }
    let keep = |v: Vec<PathBuf>| v.into_iter().filter(|p| !named.contains(p)).collect();
    Ok((keep(rw), keep(ro)))
}
