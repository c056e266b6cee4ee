//! The guard inside a sandbox: each call goes over the run's socket to the
//! runws serving the run, which checks the caller from outside and performs
//! the call with [`super::Local`] (see `sandbox::broker`).
//!
//! Inside a sandbox the runws process is invisible (another PID namespace),
//! so the caller cannot prove it descends from it, and `manifest.json` is
//! read-only, so the caller cannot record an output: both are runws's to do.
//! The same socket carries the run's `publish` and `lease renew/show`,
//! whose store the command cannot reach.

use std::ffi::OsStr;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::calls::{Calls, Written};
use super::wire::{self, MAX_PUBLISH, Reply, Request, SOCKET};
use crate::error::{Error, IoContext, Result};
use crate::fsx::{self, Dir};
use crate::manifest::{Claim, ClaimKind, InputRecord, Manifest, OutputRecord};
use crate::store::{LeaseInfo, PublishOutcome};
use crate::workspace::{self, RunDir};

/// A sandboxed run, reached through the socket in its `run/` directory.
#[derive(Debug)]
pub struct Remote {
    id: String,
    dir: PathBuf,
}

impl Remote {
    pub(crate) fn new(run: &RunDir) -> Remote {
        Remote { id: run.id.clone(), dir: run.path().to_path_buf() }
    }

    /// Run `id` in `dir`, found without opening ROOT (see
    /// `local::locate_sandboxed`).
    pub(crate) fn at(id: String, dir: PathBuf) -> Remote {
        Remote { id, dir }
    }

    /// Sends `req` (and `body`, for `put` and `publish`) to runws.
    fn call(&self, req: &Request, body: Option<&mut dyn Read>) -> Result<(serde_json::Value, Vec<u8>)> {
        let dir = Dir::open(self.dir.join("run"))?;
        let path = wire::socket_path(&dir);
        let not_live = |e: std::io::Error| Error::NotInRun {
            why: format!("cannot reach runws at `{}`: {e}", dir.join(SOCKET).display()),
        };
        let mut stream = UnixStream::connect(&path).map_err(not_live)?;
        let mut line = serde_json::to_vec(req).map_err(|e| Error::Other(e.to_string()))?;
        line.push(b'\n');
        stream.write_all(&line).ctx("cannot send a request to", dir.join(SOCKET))?;
        // runws may refuse before it reads the bytes, and stop reading: its
        // reply, already sent, says why better than the broken pipe.
        let mut sent = Ok(());
        if let Some(body) = body {
            sent = std::io::copy(body, &mut stream).map(drop).ctx("cannot send bytes to", dir.join(SOCKET));
        }
        if sent.is_ok() {
            sent =
                stream.shutdown(std::net::Shutdown::Write).ctx("cannot send a request to", dir.join(SOCKET));
        }
        let mut reader = BufReader::new(stream);
        let mut reply = String::new();
        let read = reader.read_line(&mut reply).ctx("cannot read the reply on", dir.join(SOCKET));
        if let Err(e) = read {
            sent?;
            return Err(e);
        }
        let reply: Reply = match serde_json::from_str(&reply) {
            Ok(r) => r,
            Err(e) => {
                sent?;
                return Err(Error::NotInRun { why: format!("no valid reply from runws: {e}") });
            }
        };
        if !reply.ok {
            return Err(Error::Remote { code: reply.code, message: reply.error.unwrap_or_default() });
        }
        let mut body = Vec::with_capacity(reply.bytes as usize);
        reader.take(reply.bytes).read_to_end(&mut body).ctx("cannot read the reply on", dir.join(SOCKET))?;
        Ok((reply.value, body))
    }

    /// Publishes `payload` under the run's own lease `key` with `fence`.
    pub fn publish(&self, key: &str, fence: u64, payload: &[u8]) -> Result<PublishOutcome> {
        if payload.len() > MAX_PUBLISH {
            return Err(wire::too_big());
        }
        let req = Request::Publish { key: key.into(), fence };
        let (v, _) = self.call(&req, Some(&mut std::io::Cursor::new(payload)))?;
        Ok(if v == serde_json::Value::Bool(true) {
            PublishOutcome::Written
        } else {
            PublishOutcome::Unchanged
        })
    }

    /// Renews the run's own lease `key`; its token.
    pub fn lease_renew(&self, key: &str, holder: Option<&str>, ttl: Duration) -> Result<u64> {
        let ttl_ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX);
        let req = Request::LeaseRenew { key: key.into(), holder: holder.map(String::from), ttl_ms };
        decode(self.call(&req, None)?.0)
    }

    /// What the store records for the run's own lease `key`.
    pub fn lease_show(&self, key: &str) -> Result<LeaseInfo> {
        decode(self.call(&Request::LeaseShow { key: key.into() }, None)?.0)
    }
}

fn decode<T: serde::de::DeserializeOwned>(v: serde_json::Value) -> Result<T> {
    serde_json::from_value(v).map_err(|e| Error::Other(format!("unexpected reply from runws: {e}")))
}

impl Calls for Remote {
    fn run_id(&self) -> &str {
        &self.id
    }

    fn dir(&self) -> &Path {
        &self.dir
    }

    fn manifest(&self) -> Result<Manifest> {
        decode(self.call(&Request::Info, None)?.0)
    }

    fn put(&self, name: &OsStr, reader: &mut (dyn Read + Send)) -> Result<Written> {
        fsx::check_name(name)?;
        let (v, _) = self.call(&Request::Put { name: name.into() }, Some(reader))?;
        let rec: OutputRecord = decode(v["record"].clone())?;
        Ok(if v["new"] == serde_json::Value::Bool(true) {
            Written::New(rec)
        } else {
            Written::Unchanged(rec)
        })
    }

    fn get(&self, name: &OsStr, from: Option<&str>, out: &mut dyn Write) -> Result<u64> {
        fsx::check_name(name)?;
        let req = Request::Get { name: name.into(), from: from.map(String::from) };
        let (_, body) = self.call(&req, None)?;
        out.write_all(&body).ctx("cannot write", "stdout")?;
        Ok(body.len() as u64)
    }

    fn has(&self, name: &OsStr) -> Result<bool> {
        fsx::check_name(name)?;
        decode(self.call(&Request::Has { name: name.into() }, None)?.0)
    }

    fn import(&self, run: &str, name: &OsStr) -> Result<InputRecord> {
        fsx::check_name(name)?;
        workspace::check_run_id(run)?;
        decode(self.call(&Request::Import { run: run.into(), name: name.into() }, None)?.0)
    }

    /// A `pgid` claim is accepted but not recorded: its numbers mean nothing
    /// outside the PID namespace, and every process of a sandboxed run ends
    /// with the run anyway.
    fn claim(&self, kind: &ClaimKind, value: &str, repo: Option<&Path>) -> Result<Claim> {
        // Relative paths mean the caller's directory, which runws cannot see.
        let cwd = std::env::current_dir().ctx("cannot read the current directory", ".")?;
        let value = match kind {
            ClaimKind::Path | ClaimKind::Worktree => cwd.join(value).display().to_string(),
            _ => value.to_string(),
        };
        let repo = match kind {
            ClaimKind::Branch | ClaimKind::Worktree => Some(cwd.join(repo.unwrap_or(Path::new(".")))),
            _ => None,
        };
        let req = Request::Claim { kind: kind.clone(), value: value.clone(), repo: repo.clone() };
        let (v, _) = self.call(&req, None)?;
        if !v.is_null() {
            return decode(v);
        }
        Ok(Claim {
            kind: kind.clone(),
            value,
            repo: repo.map(|r| r.display().to_string()),
            start_time: None,
            claimed_at: crate::manifest::format_time(std::time::SystemTime::now()),
            made_by_runws: false,
        })
    }
}
