//! Guard calls from inside a sandbox, answered by runws outside it.
//!
//! Inside a sandbox two things the guard relies on are gone, on purpose:
//! the runws process is invisible (another PID namespace), so the caller
//! cannot prove it descends from it, and `manifest.json` is read-only, so
//! the caller cannot record an output. runws therefore listens on
//! `run/guard.sock` in the run directory while the command runs, and
//! `runws put/get/has/import/info/claim` inside a sandboxed run (the
//! manifest has a `sandbox` record) send their request there instead.
//!
//! runws checks each connection with the kernel's word, not the caller's:
//! `SO_PEERCRED` gives the caller's pid as runws sees it, and that process
//! must descend from runws (or sit in the command's process group), exactly
//! the check a plain run makes, made from outside the namespace where the
//! whole ancestry is visible. A process outside the run that finds the
//! socket is refused like any other stranger. runws then performs the call
//! with the same [`Guard`] code a plain run uses, so outputs, records and
//! refusals are identical, except that `import` is held to runws's own copy
//! of `--allow-import` (empty unless given), and a refused `import` or
//! `get --from` is recorded in the manifest.
//!
//! The protocol is one JSON line each way; `put` streams the output's bytes
//! after its request line, `get` streams them after its reply line. The
//! socket is reached through `/proc/self/fd/N/`, so a run directory whose
//! path exceeds the 108 bytes of a socket address still works.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{Error, IoContext, Result};
use crate::fsx::Dir;
use crate::guard::{Guard, Written};
use crate::manifest::{Claim, InputRecord, Manifest, OutputRecord};
use crate::workspace::RunDir;

pub const SOCKET: &str = "guard.sock";

#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Request {
    Put { name: String },
    Get { name: String, from: Option<String> },
    Has { name: String },
    Import { run: String, name: String },
    Info,
    Claim { kind: String, value: String, repo: Option<PathBuf> },
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct Reply {
    ok: bool,
    #[serde(default)]
    code: u8,
    #[serde(default)]
    error: Option<String>,
    #[serde(default)]
    value: serde_json::Value,
    /// For `get`: how many bytes follow the reply line.
    #[serde(default)]
    bytes: u64,
}

/// The listening socket, bound before the command starts.
pub struct Server {
    listener: UnixListener,
    _dir: Dir,
}

fn socket_path(dir: &Dir) -> String {
    format!("/proc/self/fd/{}/{SOCKET}", dir.raw_fd())
}

impl Server {
    pub fn bind(run: &RunDir) -> Result<Server> {
        let dir = run.sub("run")?;
        let listener = UnixListener::bind(socket_path(&dir)).ctx("cannot listen on", dir.join(SOCKET))?;
        Ok(Server { listener, _dir: dir })
    }

    /// Serves guard calls until runws exits (one thread per connection, so a
    /// slow `put` does not hold up the others). `import` reaches only the
    /// runs `allow_import` names (runws's own copy of `--allow-import`).
    pub fn serve(self, run_dir: PathBuf, id: String, root: PathBuf, allow_import: Vec<String>) {
        let allow = std::sync::Arc::new(allow_import);
        std::thread::spawn(move || {
            let _keep = self._dir;
            for stream in self.listener.incoming().flatten() {
                let (run_dir, id, root, allow) = (run_dir.clone(), id.clone(), root.clone(), allow.clone());
                std::thread::spawn(move || handle(stream, &run_dir, &id, &root, &allow));
            }
        });
    }
}

fn handle(stream: UnixStream, run_dir: &Path, id: &str, root: &Path, allow: &[String]) {
    let mut reader = BufReader::new(&stream);
    let reply = answer(&mut reader, &stream, run_dir, id, root, allow);
    let (reply, body) = match reply {
        Ok((value, body)) => (Reply { ok: true, value, bytes: body.len() as u64, ..Reply::default() }, body),
        Err(e) => (
            Reply { ok: false, code: e.exit_code(), error: Some(e.to_string()), ..Reply::default() },
            Vec::new(),
        ),
    };
    let mut w = &stream;
    if let Ok(mut line) = serde_json::to_vec(&reply) {
        line.push(b'\n');
        let _ = w.write_all(&line).and_then(|()| w.write_all(&body));
    }
}

fn answer(
    reader: &mut BufReader<&UnixStream>,
    stream: &UnixStream,
    run_dir: &Path,
    id: &str,
    root: &Path,
    allow: &[String],
) -> Result<(serde_json::Value, Vec<u8>)> {
    use nix::sys::socket::{getsockopt, sockopt::PeerCredentials};
    let peer = getsockopt(stream, PeerCredentials).ctx("cannot identify the caller on", SOCKET)?;
    let mut line = String::new();
    reader.read_line(&mut line).ctx("cannot read a request on", SOCKET)?;
    let req: Request =
        serde_json::from_str(&line).map_err(|e| Error::Usage(format!("malformed guard request: {e}")))?;
    let guard = Guard::open_for_peer(run_dir, id, Some(root), peer.pid())?;
    Ok(match req {
        Request::Put { name } => {
            let (new, rec) = match guard.put(&name, reader)? {
                Written::New(r) => (true, r),
                Written::Unchanged(r) => (false, r),
            };
            (serde_json::json!({ "new": new, "record": rec }), Vec::new())
        }
        Request::Get { name, from } => {
            let mut body = Vec::new();
            match guard.get(&name, from.as_deref(), &mut body) {
                // Recorded like a refused import: the sandbox's other way out.
                Err(e @ Error::CrossRunRead { .. }) => {
                    return Err(guard.record_refusal("get", from.as_deref().unwrap_or_default(), &name, e));
                }
                r => r?,
            };
            (serde_json::Value::Null, body)
        }
        Request::Has { name } => (serde_json::Value::Bool(guard.has(&name)?), Vec::new()),
        Request::Import { run, name } => (json(&guard.import_within(&run, &name, Some(allow))?), Vec::new()),
        Request::Info => (json(&guard.manifest()?), Vec::new()),
        Request::Claim { kind, value, repo } => {
            if kind == "pgid" {
                // Its numbers mean nothing outside the PID namespace, and
                // every process of a sandboxed run ends with it anyway.
                (serde_json::Value::Null, Vec::new())
            } else {
                (json(&guard.claim(&kind, &value, repo.as_deref())?), Vec::new())
            }
        }
    })
}

fn json<T: Serialize>(v: &T) -> serde_json::Value {
    serde_json::to_value(v).unwrap_or_default()
}

/// Sends `req` (and `body`, for `put`) to the runws serving `run_dir`.
fn call(run_dir: &Path, req: &Request, body: Option<&mut dyn Read>) -> Result<(serde_json::Value, Vec<u8>)> {
    let dir = Dir::open(run_dir.join("run"))?;
    let path = socket_path(&dir);
    let not_live = |e: std::io::Error| Error::NotInRun {
        why: format!("cannot reach runws at `{}`: {e}", dir.join(SOCKET).display()),
    };
    let mut stream = UnixStream::connect(&path).map_err(not_live)?;
    let mut line = serde_json::to_vec(req).map_err(|e| Error::Other(e.to_string()))?;
    line.push(b'\n');
    stream.write_all(&line).ctx("cannot send a request to", dir.join(SOCKET))?;
    if let Some(body) = body {
        std::io::copy(body, &mut stream).ctx("cannot send output bytes to", dir.join(SOCKET))?;
    }
    stream.shutdown(std::net::Shutdown::Write).ctx("cannot send a request to", dir.join(SOCKET))?;
    let mut reader = BufReader::new(stream);
    let mut reply = String::new();
    reader.read_line(&mut reply).ctx("cannot read the reply on", dir.join(SOCKET))?;
    let reply: Reply = serde_json::from_str(&reply)
        .map_err(|e| Error::NotInRun { why: format!("no valid reply from runws: {e}") })?;
    if !reply.ok {
        return Err(Error::Remote { code: reply.code, message: reply.error.unwrap_or_default() });
    }
    let mut body = Vec::with_capacity(reply.bytes as usize);
    reader.take(reply.bytes).read_to_end(&mut body).ctx("cannot read the reply on", dir.join(SOCKET))?;
    Ok((reply.value, body))
}

fn decode<T: serde::de::DeserializeOwned>(v: serde_json::Value) -> Result<T> {
    serde_json::from_value(v).map_err(|e| Error::Other(format!("unexpected reply from runws: {e}")))
}

/// The client side, used by [`Guard`] when the run is sandboxed.
pub mod client {
    use super::*;

    pub fn put(run_dir: &Path, name: &str, reader: &mut dyn Read) -> Result<Written> {
        let (v, _) = call(run_dir, &Request::Put { name: name.into() }, Some(reader))?;
        let rec: OutputRecord = decode(v["record"].clone())?;
        Ok(if v["new"] == serde_json::Value::Bool(true) {
            Written::New(rec)
        } else {
            Written::Unchanged(rec)
        })
    }

    pub fn get(run_dir: &Path, name: &str, from: Option<&str>, out: &mut dyn Write) -> Result<u64> {
        let req = Request::Get { name: name.into(), from: from.map(String::from) };
        let (_, body) = call(run_dir, &req, None)?;
        out.write_all(&body).ctx("cannot write", "stdout")?;
        Ok(body.len() as u64)
    }

    pub fn has(run_dir: &Path, name: &str) -> Result<bool> {
        decode(call(run_dir, &Request::Has { name: name.into() }, None)?.0)
    }

    pub fn import(run_dir: &Path, run: &str, name: &str) -> Result<InputRecord> {
        decode(call(run_dir, &Request::Import { run: run.into(), name: name.into() }, None)?.0)
    }

    pub fn manifest(run_dir: &Path) -> Result<Manifest> {
        decode(call(run_dir, &Request::Info, None)?.0)
    }

    pub fn claim(run_dir: &Path, kind: &str, value: &str, repo: Option<&Path>) -> Result<Claim> {
        // Relative paths mean the caller's directory, which runws cannot see.
        let cwd = std::env::current_dir().ctx("cannot read the current directory", ".")?;
        let value = match kind {
            "path" | "worktree" => cwd.join(value).display().to_string(),
            _ => value.to_string(),
        };
        let repo = match kind {
            "branch" | "worktree" => Some(cwd.join(repo.unwrap_or(Path::new(".")))),
            _ => None,
        };
        let req = Request::Claim { kind: kind.into(), value: value.clone(), repo: repo.clone() };
        let (v, _) = call(run_dir, &req, None)?;
        if !v.is_null() {
            return decode(v);
        }
        Ok(Claim {
            kind: kind.into(),
            value,
            repo: repo.map(|r| r.display().to_string()),
            start_time: None,
            claimed_at: crate::manifest::format_time(std::time::SystemTime::now()),
            made_by_runws: false,
        })
    }
}
