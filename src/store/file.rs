//! The embedded store: leases on the local file system, for every process
//! of one machine.
//!
//! Each key has a directory `DIR/leases/<encoded key>/` holding
//! `lease.json`. Every decision takes an exclusive `flock` on that directory,
//! reads the state, and writes the new state atomically and durably (temp
//! file, fsync, rename, directory fsync) before it answers. The lock dies
//! with its process, so a process killed mid-acquire leaves either the old
//! state or the new one; a token is returned only after it is on disk, and
//! the next grant starts from what is on disk, so no token is ever issued
//! twice. Expiry is read from the local clock, which all the store's users
//! share. Published payloads live in the directory sink `DIR/sink/`; a
//! publish, to that sink or to another directory, holds the key's lock from
//! the check of its fence against `lease.json` to the end of its write, so
//! no grant comes in between.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};

use super::sink::to_json;
use super::{
    Attempt, Lease, LeaseInfo, PublishOutcome, Store, acquire_with_wait, check_holder, check_issued,
    check_key, check_request, encode_key, not_holder, open_dir_durable, read_record, subdir_durable,
};
use crate::error::{Error, Result};
use crate::fsx::Dir;
use crate::manifest::{format_time, parse_time};

const LEASES: &str = "leases";
const SINK: &str = "sink";
const STATE: &str = "lease.json";

/// One key's state, as `lease.json` holds it.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct State {
    key: String,
    /// The highest token ever issued; kept through release and expiry.
    token: u64,
    holder: Option<String>,
    /// RFC 3339, UTC, milliseconds.
    expires_at: Option<String>,
}

pub struct FileStore {
    root: PathBuf,
    leases: Dir,
}

impl FileStore {
    /// Opens the store in `root`, creating it if needed.
    pub fn open(root: &Path) -> Result<FileStore> {
        let dir = open_dir_durable(root)?;
        let leases = subdir_durable(&dir, LEASES)?;
        Ok(FileStore { root: root.to_path_buf(), leases })
    }

    /// Runs `decide` on the key's state under the key's lock, and makes the
    /// state it returns durable before returning its answer.
    fn with_key<T>(
        &self,
        key: &str,
        decide: impl FnOnce(State, SystemTime) -> Result<(T, Option<State>)>,
    ) -> Result<T> {
        let name = encode_key(key);
        let dir = subdir_durable(&self.leases, &name)?;
        let _lock = dir.lock()?;
        let state = read_state(&dir, key)?.unwrap_or(State {
            key: key.to_string(),
            token: 0,
            holder: None,
            expires_at: None,
        });
        // Read the clock only once the lock is held, so the decision uses the
        // time it is made at.
        let (answer, new) = decide(state, SystemTime::now())?;
        if let Some(new) = new {
            dir.write_atomic(STATE, &to_json(&new), 0o644, true)?;
        }
        Ok(answer)
    }

    fn try_acquire(&self, key: &str, holder: &str, ttl: Duration) -> Result<Attempt> {
        self.with_key(key, |state, now| {
            if let (Some(current), Some(until)) = (&state.holder, expiry(&state, &self.root)?)
                && until > now
            {
                let expires_in = until.duration_since(now).unwrap_or_default();
                let held = Attempt::Held { holder: current.clone(), token: state.token, expires_in };
                return Ok((held, None));
            }
            let token = state.token.checked_add(1).ok_or_else(|| Error::StoreCorrupt {
                path: self.state_path(key),
                why: "the token counter is exhausted".into(),
            })?;
            let expires_at = format_time(now + ttl);
            let lease = Lease {
                key: key.to_string(),
                holder: holder.to_string(),
                token,
                expires_at: parsed(&expires_at)?,
            };
            let new = State {
                key: key.to_string(),
                token,
                holder: Some(holder.to_string()),
                expires_at: Some(expires_at),
            };
            Ok((Attempt::Granted(lease), Some(new)))
        })
    }

    /// Runs `write` when `fence` is the highest token issued for `key`,
    /// holding the key's lock throughout, so no grant on `key` comes between
    /// the check and the write. A key never granted has no directory, and
    /// none is made for it: a refused publish leaves nothing behind.
    fn under_fence<T>(&self, key: &str, fence: u64, write: impl FnOnce() -> Result<T>) -> Result<T> {
        check_key(key)?;
        let name = encode_key(key);
        if self.leases.lstat(&name)?.is_none() {
            check_issued(key, fence, 0)?;
        }
        let dir = self.leases.sub(&name)?;
        let _lock = dir.lock()?;
        let issued = read_state(&dir, key)?.map_or(0, |s| s.token);
        check_issued(key, fence, issued)?;
        write()
    }

    fn state_path(&self, key: &str) -> PathBuf {
        self.leases.join(encode_key(key)).join(STATE)
    }

    fn sink(&self) -> PathBuf {
        self.root.join(SINK)
    }
}

impl Store for FileStore {
    fn acquire(&mut self, key: &str, holder: &str, ttl: Duration, wait: Duration) -> Result<Lease> {
        check_request(key, holder, ttl)?;
        acquire_with_wait(key, wait, || self.try_acquire(key, holder, ttl))
    }

    fn renew(&mut self, key: &str, holder: &str, ttl: Duration) -> Result<Lease> {
        check_request(key, holder, ttl)?;
        self.with_key(key, |state, now| {
            // Still the recorded holder means nobody took the lease since,
            // even if it ran out: the token is still the highest, so renewing
            // is safe.
            if state.holder.as_deref() != Some(holder) {
                return Err(not_holder(holder, &info(&state, now, &self.root)?));
            }
            let expires_at = format_time(now + ttl);
            let lease = Lease {
                key: key.to_string(),
                holder: holder.to_string(),
                token: state.token,
                expires_at: parsed(&expires_at)?,
            };
            Ok((lease, Some(State { expires_at: Some(expires_at), ..state })))
        })
    }

    fn release(&mut self, key: &str, holder: &str) -> Result<()> {
        check_key(key)?;
        check_holder(holder)?;
        self.with_key(key, |state, now| {
            if state.holder.as_deref() != Some(holder) {
                return Err(not_holder(holder, &info(&state, now, &self.root)?));
            }
            Ok(((), Some(State { holder: None, expires_at: None, ..state })))
        })
    }

    fn show(&mut self, key: &str) -> Result<LeaseInfo> {
        check_key(key)?;
        let name = encode_key(key);
        // A reader needs no lock: the state file is only ever replaced whole.
        let state = match self.leases.lstat(&name)? {
            Some(_) => read_state(&self.leases.sub(&name)?, key)?,
            None => None,
        };
        match state {
            Some(state) => info(&state, SystemTime::now(), &self.root),
            None => Ok(LeaseInfo::never_held(key)),
        }
    }

    fn publish(&mut self, key: &str, fence: u64, payload: &[u8]) -> Result<PublishOutcome> {
        let sink = self.sink();
        self.under_fence(key, fence, || super::publish_to_dir(&sink, key, fence, payload))
    }

    fn publish_to(&mut self, dir: &Path, key: &str, fence: u64, payload: &[u8]) -> Result<PublishOutcome> {
        self.under_fence(key, fence, || super::publish_to_dir(dir, key, fence, payload))
    }

    fn read_published(&mut self, key: &str) -> Result<Option<(u64, Vec<u8>)>> {
        super::read_from_dir(&self.sink(), key)
    }
}

fn read_state(dir: &Dir, key: &str) -> Result<Option<State>> {
    read_record(dir, STATE, key, |s: &State| &s.key)
}

fn parsed(time: &str) -> Result<SystemTime> {
    parse_time(time).ok_or_else(|| Error::Other(format!("cannot read back the time `{time}`")))
}

fn expiry(state: &State, root: &Path) -> Result<Option<SystemTime>> {
    match &state.expires_at {
        None => Ok(None),
        Some(t) => parse_time(t).map(Some).ok_or_else(|| Error::StoreCorrupt {
            path: root.join(LEASES).join(encode_key(&state.key)).join(STATE),
            why: format!("`{t}` is not a time"),
        }),
    }
}

fn info(state: &State, now: SystemTime, root: &Path) -> Result<LeaseInfo> {
    let expires_at = expiry(state, root)?;
    Ok(LeaseInfo {
        key: state.key.clone(),
        holder: state.holder.clone(),
        token: state.token,
        expires_at,
        expired: state.holder.is_some() && expires_at.is_some_and(|t| t <= now),
    })
}
