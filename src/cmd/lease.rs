//! `runws lease ...` and `runws publish`: leases with fencing tokens, and the
//! sink that checks them.

use std::io::{Read, Write};
use std::path::Path;

use anyhow::Context;

use crate::cli::LeaseCommand;
use crate::error::Error;
use crate::exit;
use crate::guard::Guard;
use crate::guard::remote::Remote;
use crate::manifest;
use crate::procinfo;
use crate::shown;
use crate::store::{self, LeaseInfo, PublishOutcome, Store};
use crate::workspace;

/// The store URL: `--store`/`RUNWS_STORE`, else `file:ROOT/store`.
pub fn store_url(root: Option<&Path>, store: Option<&str>) -> anyhow::Result<String> {
    match store {
        Some(url) if !url.is_empty() => Ok(url.to_string()),
        _ => Ok(store::default_url(&workspace::resolve_root(root)?)),
    }
}

pub fn open(root: Option<&Path>, store: Option<&str>) -> anyhow::Result<Box<dyn Store>> {
    let url = store_url(root, store)?;
    Ok(store::open(&url)?)
}

/// The default holder of a lease taken, renewed or released from the
/// command line: the calling process (the shell script), on this host, so
/// that one script's `acquire` and `release` name the same holder.
fn default_holder() -> String {
    format!("{}:{}", procinfo::hostname(), nix::unistd::getppid())
}

/// The socket of the sandboxed run this process belongs to, when no store
/// is named: its store is out of reach (hidden, or behind a password it is
/// not given), and runws serves its lease calls over the run's socket.
fn sandboxed_run(store: Option<&str>) -> Option<Remote> {
    if store.is_some_and(|s| !s.is_empty()) {
        return None;
    }
    Guard::from_env().ok()?.into_remote()
}

/// The holder `run --lease` gave this run, when `key` is its lease.
fn run_holder(key: &str) -> Option<String> {
    let run_key = std::env::var("RUNWS_LEASE_KEY").ok()?;
    let run_id = std::env::var("RUNWS_RUN_ID").ok()?;
    (run_key == key && !run_id.is_empty()).then(|| format!("{}:{run_id}", procinfo::hostname()))
}

pub fn lease(root: Option<&Path>, store: Option<&str>, cmd: LeaseCommand) -> anyhow::Result<u8> {
    if let Some(remote) = sandboxed_run(store) {
        return sandboxed_lease(&remote, cmd);
    }
    let mut s = open(root, store)?;
    match cmd {
        LeaseCommand::Acquire { key, holder, ttl, wait, json } => {
            let holder = holder.unwrap_or_else(default_holder);
            let lease = s.acquire(&key, &holder, ttl, wait)?;
            if json {
                super::print_json(serde_json::json!({
                    "key": lease.key,
                    "holder": lease.holder,
                    "token": lease.token,
                    "expires_at": manifest::format_time(lease.expires_at),
                }))?;
            } else {
                // stdout stays the token alone, for `TOKEN=$(runws lease acquire KEY)`.
                eprintln!("runws: took `{}` as holder `{}`", shown::text(&key), shown::text(&holder));
                println!("{}", lease.token);
            }
        }
        LeaseCommand::Renew { key, holder, ttl } => {
            let holder = holder.or_else(|| run_holder(&key)).unwrap_or_else(default_holder);
            let lease = s.renew(&key, &holder, ttl)?;
            println!("{}", lease.token);
        }
        LeaseCommand::Release { key, holder } => {
            let holder = holder.or_else(|| run_holder(&key)).unwrap_or_else(default_holder);
            s.release(&key, &holder)?
        }
        LeaseCommand::Show { key, json } => show(&s.show(&key)?, json)?,
    }
    Ok(exit::OK)
}

/// `lease renew` and `lease show` of the run's own lease, performed by runws
/// for a sandboxed command; the command cannot take or give up a lease.
fn sandboxed_lease(remote: &Remote, cmd: LeaseCommand) -> anyhow::Result<u8> {
    match cmd {
        LeaseCommand::Renew { key, holder, ttl } => {
            println!("{}", remote.lease_renew(&key, holder.as_deref(), ttl)?);
        }
        LeaseCommand::Show { key, json } => show(&remote.lease_show(&key)?, json)?,
        LeaseCommand::Acquire { .. } | LeaseCommand::Release { .. } => {
            return Err(Error::Usage(
                "inside a sandbox only `lease renew` and `lease show` of the run's own lease reach runws; \
                 runws takes and releases it (`run --lease`)"
                    .into(),
            )
            .into());
        }
    }
    Ok(exit::OK)
}

fn show(info: &LeaseInfo, json: bool) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    let expires = info.expires_at.map(manifest::format_time);
    if json {
        let v = serde_json::json!({
            "key": info.key,
            "holder": info.holder,
            "token": info.token,
            "expires_at": expires,
            "expired": info.expired,
        });
        serde_json::to_writer_pretty(&mut out, &v)?;
        writeln!(out)?;
    } else {
        writeln!(out, "key:      {}", info.key)?;
        let state = match (&info.holder, info.expired) {
            (None, _) => "free".to_string(),
            (Some(h), false) => format!("held by {h}"),
            (Some(h), true) => format!("expired (last held by {h})"),
        };
        writeln!(out, "state:    {state}")?;
        writeln!(out, "token:    {} (highest issued)", info.token)?;
        if let Some(e) = expires {
            writeln!(out, "expires:  {e}")?;
        }
    }
    Ok(())
}

/// What `publish` says about the write: a line on stderr (`-v`), one JSON
/// object on stdout (`--json`).
#[derive(Debug, Clone, Copy)]
pub struct Say {
    pub verbose: bool,
    pub json: bool,
}

pub fn publish(
    root: Option<&Path>,
    store: Option<&str>,
    key: &str,
    file: Option<&Path>,
    fence: Option<u64>,
    to: Option<&Path>,
    Say { verbose, json }: Say,
) -> anyhow::Result<u8> {
    let fence = match fence {
        Some(f) => f,
        None => std::env::var("RUNWS_FENCE").ok().and_then(|v| v.parse().ok()).ok_or_else(|| {
            Error::Usage("publish needs --fence N (or RUNWS_FENCE, set by `runws run --lease`)".into())
        })?,
    };
    let mut payload = Vec::new();
    match file {
        None => std::io::stdin().read_to_end(&mut payload).context("cannot read standard input")?,
        Some(p) if p.as_os_str() == "-" => {
            std::io::stdin().read_to_end(&mut payload).context("cannot read standard input")?
        }
        Some(p) => std::fs::File::open(p)
            .and_then(|mut f| f.read_to_end(&mut payload))
            .with_context(|| format!("cannot read `{}`", p.display()))?,
    };
    let outcome = match to {
        Some(dir) => publish_to_dir(root, store, dir, key, fence, &payload)?,
        None => match sandboxed_run(store) {
            Some(remote) => remote.publish(key, fence, &payload)?,
            None => open(root, store)?.publish(key, fence, &payload)?,
        },
    };
    if json {
        super::print_json(serde_json::json!({
            "key": key,
            "fence": fence,
            "bytes": payload.len(),
            "outcome": match outcome {
                PublishOutcome::Written => "written",
                PublishOutcome::Unchanged => "unchanged",
            },
            "to": to.map(|d| d.to_string_lossy().into_owned()),
        }))?;
    }
    if verbose {
        let what = match outcome {
            PublishOutcome::Written => "published",
            PublishOutcome::Unchanged => "unchanged (the same bytes at the same fence)",
        };
        eprintln!("runws: {what}: `{key}` at fence {fence} ({} bytes)", payload.len());
    }
    Ok(exit::OK)
}

/// `publish --to DIR`: the fence checked against the store when it can be
/// reached, as in the store's own sink; else, with a warning, only against
/// the highest fence published in DIR.
fn publish_to_dir(
    root: Option<&Path>,
    store: Option<&str>,
    dir: &Path,
    key: &str,
    fence: u64,
    payload: &[u8],
) -> anyhow::Result<PublishOutcome> {
    let url = store_url(root, store)?;
    match store::reach(&url) {
        Ok(mut s) => Ok(s.publish_to(dir, key, fence, payload)?),
        Err(e @ Error::StoreUnreachable { .. }) => {
            eprintln!(
                "runws: warning: {e}; fence {fence} is checked only against the fences published in `{}`",
                dir.display()
            );
            Ok(store::publish_to_dir(dir, key, fence, payload)?)
        }
        Err(e) => Err(e.into()),
    }
}
