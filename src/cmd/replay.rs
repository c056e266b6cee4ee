//! `runws replay`: the original found and checked, the replay run through
//! the run pipeline, and the comparison recorded and reported.

use std::path::{Path, PathBuf};

use crate::cli::{Expect, ReplayArgs};
use crate::error::Error;
use crate::exit;
use crate::manifest;
use crate::replay::{self, Original};
use crate::sandbox::{self, Kind, Net};
use crate::workspace;

pub fn replay(args: ReplayArgs, root: Option<&Path>, store: Option<&str>) -> anyhow::Result<u8> {
    let resolved = workspace::resolve_root(root)?;
    let mut original = find(&resolved, &args)?;
    let (net, egress) = match &args.sandbox {
        Some(_) => crate::egress::choose(args.net.as_deref(), &args.resolve, false).map_err(Error::Usage)?,
        None => (Net::Host, None),
    };
    let opts = replay::Options {
        env: args.env.clone(),
        env_file: args.env_file.clone(),
        pass: args.pass.clone(),
        path: args.path.clone(),
        limits_try: args.limits.as_deref().map(|m| m == "try"),
        sandbox: args.sandbox.as_deref().map(sandbox::mode).map(|(try_mode, backend)| sandbox::Options {
            kind: Kind::Sandbox,
            try_mode,
            backend,
            net,
            egress: egress.clone(),
            rw: args.rw.clone(),
            ro: args.ro.clone(),
            hide: args.hide.clone(),
            caches: args.cache.clone(),
            json: false,
            allow_userns: args.allow_userns,
        }),
    };
    let req = replay::request(&original, opts, root.map(Path::to_path_buf), store.map(str::to_string))?;
    let of = original.m.run_id.clone();
    // Not its command line, which may hold what should not be printed
    // (`show` prints it for whoever asks).
    eprintln!("runws: replaying run {of} (job {})", crate::shown::text(&original.m.job));
    // What of this environment reaches the command, by name: a record a
    // process of the original rewrote after its runws exited could name
    // more than the original was given.
    if !req.pass.is_empty() {
        let names: Vec<String> = req.pass.iter().map(|n| crate::shown::text(n)).collect();
        eprintln!("runws: passing from this environment: {}", names.join(", "));
    }
    let guarded =
        original.m.sandbox.is_some() || original.m.resources.as_ref().is_some_and(|r| r.group.is_some());
    if !guarded {
        eprintln!(
            "runws: note: run {of} had neither a sandbox nor a control group; a process it left behind \
             could have changed its record after it ended (`runws show {of}` prints what is replayed)"
        );
    }
    let finished = crate::run::run(req)?;
    let replayed = manifest::read(&finished.run.dir)?;
    let comparison = replay::compare(&original.m, &replayed);
    let recorded = {
        let c = comparison.clone();
        manifest::update(&finished.run.dir, true, move |m| {
            m.replay = Some(c);
            Ok(())
        })
    };
    for line in replay::render(&of, &comparison) {
        eprintln!("runws: {line}");
    }
    if let Err(e) = recorded {
        eprintln!("runws: warning: cannot record the comparison in run {}: {e}", finished.run.id);
    }
    let kept = if args.keep { original.keep()? } else { None };
    if let Some(k) = &kept {
        eprintln!("runws: the restored archive is kept at {}", crate::shown::path(k));
    }
    drop(original);
    if args.json {
        super::print_json(serde_json::json!({
            "run_id": finished.run.id,
            "replay_of": replayed.replay_of,
            "exit_code": finished.code,
            "kept": kept,
            "comparison": comparison,
        }))?;
    }
    Ok(match args.expect {
        Expect::Any => finished.code,
        Expect::Same if comparison.same => exit::OK,
        Expect::Different if !comparison.same => exit::OK,
        Expect::Same | Expect::Different => exit::NOT_AS_EXPECTED,
    })
}

/// The original `args.target` names: an archive (a file), or a run.
fn find(root: &workspace::Root, args: &ReplayArgs) -> anyhow::Result<Original> {
    let target = &args.target;
    if target.starts_with("s3://") {
        return Err(Error::Usage(
            "this runws cannot read archives from s3:// yet: download the archive and its .sha256, \
             and replay the file"
                .into(),
        )
        .into());
    }
    let path = PathBuf::from(target);
    if std::fs::symlink_metadata(&path).is_ok_and(|m| !m.is_dir()) {
        return Ok(replay::from_archive(root, &path, args.from_quarantine)?);
    }
    if args.from_quarantine || args.keep {
        return Err(Error::Usage(format!(
            "--from-quarantine and --keep are for an archive; `{}` is not a file",
            crate::shown::text(target)
        ))
        .into());
    }
    root.must_exist()?;
    let id = super::ls::resolve_run(root, target, None)?;
    Ok(replay::from_run(root, &id)?)
}
