//! The defaults of a run's [`super::Request`] and of the `run`, `lease` and
//! `lane` options, each defined once: a request starts from the values, clap
//! shows and applies them (as the `*_SHOWN` strings, which a test holds to
//! the values), and the fast path of `run` starts from the values too.
//! Defaults another library type applies live beside it: the seal's in
//! `seal`, the reaper's in `reap`.

use std::time::Duration;

/// PATH after the run's own bin/ (`--path`).
pub const PATH: &str = "/usr/local/bin:/usr/bin:/bin";
/// Kernel-assigned ports to reserve (`--ports`).
pub const PORTS: u16 = 1;
/// The address ports are bound on (`--port-host`).
pub const PORT_HOST: &str = "127.0.0.1";
/// The commit a run's worktree branch starts from (`--base`).
pub const BASE: &str = "HEAD";
/// How long a lease lasts (`run --lease-ttl`, `lease acquire/renew --ttl`).
pub const LEASE_TTL: Duration = Duration::from_secs(60);
/// [`LEASE_TTL`] as `--help` shows it.
pub const LEASE_TTL_SHOWN: &str = "60s";
/// How long to wait for a held lease (`run --wait`, `lease acquire --wait`).
pub const LEASE_WAIT: Duration = Duration::ZERO;
/// [`LEASE_WAIT`] as `--help` shows it.
pub const LEASE_WAIT_SHOWN: &str = "0s";
/// How long one attempt of a `--ping` may take (`--ping-timeout`).
pub const PING_TIMEOUT: Duration = Duration::from_secs(5);
/// [`PING_TIMEOUT`] as `--help` shows it.
pub const PING_TIMEOUT_SHOWN: &str = "5s";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::duration;

    #[test]
    fn each_shown_default_is_the_default() {
        assert_eq!(duration::parse(LEASE_TTL_SHOWN), Ok(LEASE_TTL));
        assert_eq!(duration::parse(LEASE_WAIT_SHOWN), Ok(LEASE_WAIT));
        assert_eq!(duration::parse(PING_TIMEOUT_SHOWN), Ok(PING_TIMEOUT));
        assert_eq!(duration::parse(crate::reap::DEFAULT_GRACE_SHOWN), Ok(crate::reap::DEFAULT_GRACE));
        assert_eq!(duration::parse(crate::seal::DEFAULT_DEADLINE_SHOWN), Ok(crate::seal::DEFAULT_DEADLINE));
        assert_eq!(
            crate::seal::archive::Format::named(crate::seal::DEFAULT_FORMAT_SHOWN),
            Some(crate::seal::DEFAULT_FORMAT)
        );
    }
}
