//! The lease a run holds while its command runs (`run --lease KEY`): taken
//! before anything of the run exists, renewed from the watch loop, released
//! however the run ends.

use std::time::SystemTime;

use crate::error::Error;
use crate::manifest;
use crate::procinfo;
use crate::store::{self, Store};
use crate::workspace::Root;

/// A lease held for the length of a run: renewed from the watch loop,
/// released at the end.
pub struct RunLease {
    pub store: Box<dyn Store>,
    pub url: String,
    pub key: String,
    pub holder: String,
    pub token: u64,
    pub ttl: std::time::Duration,
    lost: bool,
}

impl RunLease {
    /// Takes the lease before the command starts.
    pub fn acquire(
        root: &Root,
        store: Option<&str>,
        key: &str,
        run_id: &str,
        ttl: std::time::Duration,
        wait: std::time::Duration,
    ) -> Result<RunLease, Error> {
        let url = match store {
            Some(u) if !u.is_empty() => u.to_string(),
            _ => store::default_url(root),
        };
        let mut s = store::open(&url)?;
        let holder = format!("{}:{run_id}", procinfo::hostname());
        let lease = s.acquire(key, &holder, ttl, wait)?;
        Ok(RunLease { store: s, url, key: key.to_string(), holder, token: lease.token, ttl, lost: false })
    }

    /// Renews; says once on stderr when the lease was lost (the sink's fence
    /// then refuses this run's late writes).
    pub fn renew(&mut self) -> Option<String> {
        if self.lost {
            return None;
        }
        match self.store.renew(&self.key, &self.holder, self.ttl) {
            Ok(_) => None,
            Err(e) => {
                self.lost = true;
                eprintln!("runws: warning: lost the lease `{}`: {e}", self.key);
                Some(manifest::format_time(SystemTime::now()))
            }
        }
    }
}

impl Drop for RunLease {
    /// Released however the run ends, so the next run need not wait out the ttl.
    fn drop(&mut self) {
        if let Err(e) = self.store.release(&self.key, &self.holder)
            && !self.lost
        {
            eprintln!("runws: warning: cannot release the lease `{}`: {e}", self.key);
        }
    }
}

impl RunLease {
    /// The manifest's `lease` record of the run that holds it.
    pub fn record(&self) -> manifest::LeaseRecord {
        manifest::LeaseRecord {
            holder: self.holder.clone(),
            key: self.key.clone(),
            lost_at: None,
            store: store::redact_url(&self.url),
            token: self.token,
            extra: Default::default(),
        }
    }
}
