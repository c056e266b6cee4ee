//! Guard calls from inside a sandbox, answered by runws outside it: the
//! server side of [`crate::guard::remote`].
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
//! with the same [`Local`] guard a plain run uses, so outputs, records and
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
//! The protocol is [`crate::guard::wire`]'s. A request line must arrive
//! within [`REQUEST_TIMEOUT`]; a payload to publish is read one at a time;
//! at most [`MAX_CONNECTIONS`] calls are served at once, the next ones wait;
//! a `get` is streamed from its verified copy, at most [`GET_IN_MEMORY`]
//! bytes of it in memory.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use serde::Serialize;

use crate::error::{Error, IoContext, Result};
use crate::fsx::Dir;
use crate::guard::calls::{Calls, Written};
use crate::guard::local::Local;
use crate::guard::wire::{self, MAX_PUBLISH, MAX_REQUEST, Reply, Request, SOCKET};
use crate::manifest::ClaimKind;
use crate::spool::Spool;
use crate::store::{self, PublishOutcome, Store};
use crate::workspace::{Root, RunDir};

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

/// The listening socket, bound before the command starts.
pub struct Server {
    listener: UnixListener,
    _dir: Dir,
}

impl Server {
    pub fn bind(run: &RunDir) -> Result<Server> {
        let dir = run.sub("run")?;
        let listener =
            UnixListener::bind(wire::socket_path(&dir)).ctx("cannot listen on", dir.join(SOCKET))?;
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
        root: Root,
        allow_import: Vec<String>,
        lease: Option<RunLease>,
        store: Option<String>,
    ) {
        let lease = lease.map(|grant| Leased { grant, store: Mutex::new(None) });
        let served = Arc::new(Served { run_dir, id, root, allow: allow_import, lease, store });
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
    root: Root,
    allow: Vec<String>,
    lease: Option<Leased>,
    /// The run's store, whose fleet view serves imports of other hosts' runs.
    store: Option<String>,
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
    let guard = Local::for_peer(run_dir, id, root, peer.pid())?;
    Ok(match req {
        Request::Put { name } => {
            // The output's bytes come at the command's pace.
            stream.set_read_timeout(None).ctx("cannot set a timeout on", SOCKET)?;
            let (new, rec) = match guard.put(name.as_os_str(), reader)? {
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
        Request::Has { name } => (serde_json::Value::Bool(guard.has(name.as_os_str())?), Body::Nothing),
        Request::Import { run, name } => {
            let fleet = served.store.as_deref();
            (json(&guard.import_within(&run, name.as_os_str(), Some(allow), fleet)?), Body::Nothing)
        }
        Request::Info => (json(&guard.manifest()?), Body::Nothing),
        Request::Claim { kind, value, repo } => {
            // Under namespaces its numbers mean nothing outside the PID
            // namespace, and every process of the run ends with it anyway;
            // under Landlock the numbers are the host's, and a group left
            // behind outlives the run: recorded for the reaper, as in a
            // plain run.
            let landlocked = || {
                guard.manifest().map(|m| {
                    m.sandbox.and_then(|s| s.backend) == Some(crate::manifest::sandbox::Backend::Landlock)
                })
            };
            if kind == ClaimKind::Pgid && !landlocked()? {
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
                    return Err(wire::too_big());
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

fn json<T: Serialize>(v: &T) -> serde_json::Value {
    serde_json::to_value(v).unwrap_or_default()
}
