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
//! The same socket carries a sandboxed command's `runws publish` and `runws
//! lease renew/show`: the store is out of its reach (under the hidden ROOT,
//! or behind a URL whose password it must not see), so runws performs them
//! with its own connection, and only for the lease runws itself took for the
//! run (`run --lease`), held in runws's memory: another key is refused
//! (exit 3), a fence other than the one runws was granted is refused (exit
//! 76), and a renewal lasts at most the run's `--lease-ttl`.
//!
//! The protocol is one JSON line each way (a name that is not UTF-8 travels
//! as the manifest writes it, `{"hex": ...}`: see [`crate::osname`]); `put` and `publish` stream their
//! bytes after the request line, `get` streams them after its reply line. A
//! request line is at most [`MAX_REQUEST`] bytes and must arrive within
//! [`REQUEST_TIMEOUT`]; a payload to publish is at most [`MAX_PUBLISH`]
//! bytes, read one at a time; at most [`MAX_CONNECTIONS`] calls are served at
//! once, the next ones wait; a `get` is streamed from its verified copy,
//! at most [`GET_IN_MEMORY`] bytes of it in memory. The socket is reached through
//! `/proc/self/fd/N/`, so a run directory whose path exceeds the 108 bytes of
//! a socket address still works.

use std::ffi::OsStr;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::{Error, IoContext, Result};
use crate::fsx::Dir;
use crate::guard::{Guard, Written};
use crate::manifest::{Claim, InputRecord, Manifest, OutputRecord};
use crate::osname::OsName;
use crate::spool::Spool;
use crate::store::{self, LeaseInfo, PublishOutcome, Store};
use crate::workspace::RunDir;

pub const SOCKET: &str = "guard.sock";

/// The longest request line, in bytes.
pub const MAX_REQUEST: u64 = 64 * 1024;
/// The largest payload a sandboxed command publishes, in bytes.
pub const MAX_PUBLISH: usize = 16 << 20;
/// Calls served at once; a further connection waits for one to end.
pub const MAX_CONNECTIONS: usize = 64;
/// The most bytes of one output a `get` holds in runws's memory; the rest
/// of its verified copy waits in an unlinked temp file.
pub const GET_IN_MEMORY: usize = 1 << 20;
/// How long a caller may pause while it sends its request line or a
/// payload to publish (a `put` streams its bytes at the command's pace).
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// The lease runws took for a sandboxed run, as runws holds it: the only
/// lease the command reaches through the socket, whatever it asks for.
pub struct RunLease {
    /// The store's URL, password included: it never leaves runws.
    pub url: String,
    pub key: String,
    pub holder: String,
    pub token: u64,
    pub ttl: Duration,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Request {
    Put {
        name: OsName,
    },
    Get {
        name: OsName,
        from: Option<String>,
    },
    Has {
        name: OsName,
    },
    Import {
        run: String,
        name: OsName,
    },
    Info,
    Claim {
        kind: String,
        value: String,
        repo: Option<PathBuf>,
    },
    /// The payload follows the request line, up to the end of the stream.
    Publish {
        key: String,
        fence: u64,
    },
    LeaseRenew {
        key: String,
        holder: Option<String>,
        ttl_ms: u64,
    },
    LeaseShow {
        key: String,
    },
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
    /// slow `put` does not hold up the others, at most [`MAX_CONNECTIONS`]
    /// at once). `import` reaches only the runs `allow_import` names
    /// (runws's own copy of `--allow-import`); `publish` and `lease` reach
    /// only `lease`, the run's own.
    pub fn serve(
        self,
        run_dir: PathBuf,
        id: String,
        root: PathBuf,
        allow_import: Vec<String>,
        lease: Option<RunLease>,
    ) {
        let lease = lease.map(|grant| Leased { grant, store: Mutex::new(None) });
        let served = Arc::new(Served { run_dir, id, root, allow: allow_import, lease });
        let slots = Arc::new(Slots::default());
        std::thread::spawn(move || {
            let _keep = self._dir;
            for stream in self.listener.incoming().flatten() {
                let slot = Slots::take(&slots);
                let served = served.clone();
                std::thread::spawn(move || {
                    handle(stream, &served);
                    drop(slot);
                });
            }
        });
    }
}

/// What runws knows of the run it serves: its own records, never the
/// command's.
struct Served {
    run_dir: PathBuf,
    id: String,
    root: PathBuf,
    allow: Vec<String>,
    lease: Option<Leased>,
}

struct Leased {
    grant: RunLease,
    /// Opened at the first call; the lock also makes the calls take turns,
    /// so one payload at a time is held in memory.
    store: Mutex<Option<Box<dyn Store>>>,
}

impl Leased {
    fn with_store<T>(&self, call: impl FnOnce(&mut dyn Store) -> Result<T>) -> Result<T> {
        let mut slot = self.store.lock().unwrap_or_else(|e| e.into_inner());
        let store = match slot.take() {
            Some(s) => s,
            None => store::open(&self.grant.url)?,
        };
        let store = slot.insert(store);
        call(store.as_mut())
    }
}

/// Counts the connections being served.
#[derive(Default)]
struct Slots {
    used: Mutex<usize>,
    freed: Condvar,
}

/// One connection's place; gives it back when dropped.
struct Slot(Arc<Slots>);

impl Slots {
    /// Waits until fewer than [`MAX_CONNECTIONS`] are served.
    fn take(slots: &Arc<Slots>) -> Slot {
        let mut used = slots.used.lock().unwrap_or_else(|e| e.into_inner());
        while *used >= MAX_CONNECTIONS {
            used = slots.freed.wait(used).unwrap_or_else(|e| e.into_inner());
        }
        *used += 1;
        Slot(slots.clone())
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut used = self.0.used.lock().unwrap_or_else(|e| e.into_inner());
        *used -= 1;
        self.0.freed.notify_one();
    }
}

/// What follows a reply line: nothing, or the verified copy of an output
/// a `get` asked for (with its length), streamed from the copy.
enum Body {
    Nothing,
    Copy(Spool, u64),
}

fn handle(stream: UnixStream, served: &Served) {
    let mut reader = BufReader::new(&stream);
    let reply = answer(&mut reader, &stream, served);
    let (reply, body) = match reply {
        Ok((value, body)) => {
            let bytes = match &body {
                Body::Nothing => 0,
                Body::Copy(_, n) => *n,
            };
            (Reply { ok: true, value, bytes, ..Reply::default() }, body)
        }
        Err(e) => (
            Reply { ok: false, code: e.exit_code(), error: Some(e.to_string()), ..Reply::default() },
            Body::Nothing,
        ),
    };
    let mut w = &stream;
    if let Ok(mut line) = serde_json::to_vec(&reply) {
        line.push(b'\n');
        let _ = w.write_all(&line).and_then(|()| match body {
            Body::Nothing => Ok(()),
            Body::Copy(copy, _) => copy.copy_to(&mut w).map(drop),
        });
    }
}

fn answer(
    reader: &mut BufReader<&UnixStream>,
    stream: &UnixStream,
    served: &Served,
) -> Result<(serde_json::Value, Body)> {
    use nix::sys::socket::{getsockopt, sockopt::PeerCredentials};
    let peer = getsockopt(stream, PeerCredentials).ctx("cannot identify the caller on", SOCKET)?;
    stream.set_read_timeout(Some(REQUEST_TIMEOUT)).ctx("cannot set a timeout on", SOCKET)?;
    let mut line = Vec::new();
    reader.by_ref().take(MAX_REQUEST).read_until(b'\n', &mut line).ctx("cannot read a request on", SOCKET)?;
    if line.last() != Some(&b'\n') && line.len() as u64 >= MAX_REQUEST {
        return Err(Error::Usage(format!("malformed guard request: longer than {MAX_REQUEST} bytes")));
    }
    let req: Request = serde_json::from_slice(&line).map_err(|e| {
        // The message can quote the request: shown escaped, on one line.
        Error::Usage(format!("malformed guard request: {}", crate::shown::text(&e.to_string())))
    })?;
    let (run_dir, id, root, allow) = (&served.run_dir, &served.id, &served.root, &served.allow);
    let guard = Guard::open_for_peer(run_dir, id, Some(root), peer.pid())?;
    Ok(match req {
        Request::Put { name } => {
            // The output's bytes come at the command's pace.
            stream.set_read_timeout(None).ctx("cannot set a timeout on", SOCKET)?;
            let (new, rec) = match guard.put(&name, reader)? {
                Written::New(r) => (true, r),
                Written::Unchanged(r) => (false, r),
            };
            (serde_json::json!({ "new": new, "record": rec }), Body::Nothing)
        }
        Request::Get { name, from } => {
            crate::fsx::check_name(&name)?;
            // Streamed from a copy of which at most GET_IN_MEMORY bytes are
            // in memory: many large gets at once cost runws little memory.
            let (copy, bytes, _) = match guard.verified_copy(name.as_os_str(), from.as_deref(), GET_IN_MEMORY)
            {
                // Recorded like a refused import: the sandbox's other way out.
                Err(e @ Error::CrossRunRead { .. }) => {
                    return Err(guard.record_refusal(
                        "get",
                        from.as_deref().unwrap_or_default(),
                        name.as_os_str(),
                        e,
                    ));
                }
                r => r?,
            };
            (serde_json::Value::Null, Body::Copy(copy, bytes))
        }
        Request::Has { name } => (serde_json::Value::Bool(guard.has(&name)?), Body::Nothing),
        Request::Import { run, name } => {
            (json(&guard.import_within(&run, &name, Some(allow))?), Body::Nothing)
        }
        Request::Info => (json(&guard.manifest()?), Body::Nothing),
        Request::Claim { kind, value, repo } => {
            if kind == "pgid" {
                // Its numbers mean nothing outside the PID namespace, and
                // every process of a sandboxed run ends with it anyway.
                (serde_json::Value::Null, Body::Nothing)
            } else {
                (json(&guard.claim(&kind, &value, repo.as_deref())?), Body::Nothing)
            }
        }
        Request::Publish { key, fence } => {
            let leased = own_lease(served, &key)?;
            let token = leased.grant.token;
            if fence != token {
                return Err(Error::UnissuedFence {
                    key,
                    offered: fence,
                    why: format!("it is not this run's fence ({token})"),
                });
            }
            let outcome = leased.with_store(|s| {
                let mut payload = Vec::new();
                reader
                    .take(MAX_PUBLISH as u64 + 1)
                    .read_to_end(&mut payload)
                    .ctx("cannot read the payload on", SOCKET)?;
                if payload.len() > MAX_PUBLISH {
                    return Err(too_big());
                }
                s.publish(&key, token, &payload)
            })?;
            (serde_json::Value::Bool(outcome == PublishOutcome::Written), Body::Nothing)
        }
        Request::LeaseRenew { key, holder, ttl_ms } => {
            let leased = own_lease(served, &key)?;
            let own = &leased.grant.holder;
            if let Some(h) = holder
                && &h != own
            {
                return Err(Error::NotLeaseHolder {
                    key,
                    holder: h,
                    why: format!("this run's holder is `{own}`"),
                });
            }
            // Never longer than runws itself renews it for.
            let ttl = Duration::from_millis(ttl_ms).min(leased.grant.ttl);
            let lease = leased.with_store(|s| s.renew(&key, own, ttl))?;
            (serde_json::Value::from(lease.token), Body::Nothing)
        }
        Request::LeaseShow { key } => {
            (json(&own_lease(served, &key)?.with_store(|s| s.show(&key))?), Body::Nothing)
        }
    })
}

/// The run's lease when `key` names it; a refusal otherwise.
fn own_lease<'a>(served: &'a Served, key: &str) -> Result<&'a Leased> {
    let why = match &served.lease {
        Some(l) if l.grant.key == key => return Ok(l),
        Some(l) => format!("its lease is `{}`", l.grant.key),
        None => "it holds no lease (`runws run --lease KEY`)".into(),
    };
    Err(Error::ForeignLease { key: crate::shown::text(key), why })
}

fn too_big() -> Error {
    Error::Usage(format!("a payload published from a sandbox is at most {MAX_PUBLISH} bytes"))
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
    // runws may refuse before it reads the bytes, and stop reading: its
    // reply, already sent, says why better than the broken pipe.
    let mut sent = Ok(());
    if let Some(body) = body {
        sent = std::io::copy(body, &mut stream).map(drop).ctx("cannot send bytes to", dir.join(SOCKET));
    }
    if sent.is_ok() {
        sent = stream.shutdown(std::net::Shutdown::Write).ctx("cannot send a request to", dir.join(SOCKET));
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

fn decode<T: serde::de::DeserializeOwned>(v: serde_json::Value) -> Result<T> {
    serde_json::from_value(v).map_err(|e| Error::Other(format!("unexpected reply from runws: {e}")))
}

/// The client side, used by [`Guard`] when the run is sandboxed.
pub mod client {
    use super::*;

    pub fn put(run_dir: &Path, name: &OsStr, reader: &mut dyn Read) -> Result<Written> {
        let (v, _) = call(run_dir, &Request::Put { name: name.into() }, Some(reader))?;
        let rec: OutputRecord = decode(v["record"].clone())?;
        Ok(if v["new"] == serde_json::Value::Bool(true) {
            Written::New(rec)
        } else {
            Written::Unchanged(rec)
        })
    }

    pub fn get(run_dir: &Path, name: &OsStr, from: Option<&str>, out: &mut dyn Write) -> Result<u64> {
        let req = Request::Get { name: name.into(), from: from.map(String::from) };
        let (_, body) = call(run_dir, &req, None)?;
        out.write_all(&body).ctx("cannot write", "stdout")?;
        Ok(body.len() as u64)
    }

    pub fn has(run_dir: &Path, name: &OsStr) -> Result<bool> {
        decode(call(run_dir, &Request::Has { name: name.into() }, None)?.0)
    }

    pub fn import(run_dir: &Path, run: &str, name: &OsStr) -> Result<InputRecord> {
        decode(call(run_dir, &Request::Import { run: run.into(), name: name.into() }, None)?.0)
    }

    pub fn manifest(run_dir: &Path) -> Result<Manifest> {
        decode(call(run_dir, &Request::Info, None)?.0)
    }

    /// Publishes `payload` under the run's own lease `key` with `fence`.
    pub fn publish(run_dir: &Path, key: &str, fence: u64, payload: &[u8]) -> Result<PublishOutcome> {
        if payload.len() > MAX_PUBLISH {
            return Err(too_big());
        }
        let req = Request::Publish { key: key.into(), fence };
        let (v, _) = call(run_dir, &req, Some(&mut std::io::Cursor::new(payload)))?;
        Ok(if v == serde_json::Value::Bool(true) {
            PublishOutcome::Written
        } else {
            PublishOutcome::Unchanged
        })
    }

    /// Renews the run's own lease `key`; its token.
    pub fn lease_renew(run_dir: &Path, key: &str, holder: Option<&str>, ttl: Duration) -> Result<u64> {
        let ttl_ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX);
        let req = Request::LeaseRenew { key: key.into(), holder: holder.map(String::from), ttl_ms };
        decode(call(run_dir, &req, None)?.0)
    }

    /// What the store records for the run's own lease `key`.
    pub fn lease_show(run_dir: &Path, key: &str) -> Result<LeaseInfo> {
        decode(call(run_dir, &Request::LeaseShow { key: key.into() }, None)?.0)
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
