//! Egress by name: `run --sandbox --net allow=PATTERNS` and `audit --net`.
//!
//! The command runs in a network namespace of its own, as with `--net
//! none`: only loopback, no route, no DNS server. Its one way out is a
//! socket listening on that loopback (`127.0.0.1:PORT`, the port the
//! kernel chose) that runws made in the namespace before the command
//! started and serves from outside it: runws's [`proxy`] checks each
//! destination against the [`policy`], resolves the name itself, connects,
//! and records every destination in the run's connection [`log`]. Nothing
//! else leaves: a raw TCP connect to any address, UDP, or a program that
//! ignores the proxy variables reaches only the namespace's own loopback.
//!
//! ```text
//! command ──127.0.0.1:PORT (its namespace)──> runws (outside) ──policy, resolve, connect──> destination
//! ```
//!
//! The environment names the proxy for the tools that read it ([`vars`]).

pub mod http;
pub mod log;
pub mod policy;
pub mod proxy;
mod pump;
pub mod tls;

use std::net::TcpListener;

pub use policy::Policy;

use crate::manifest::net::NetRecord;

/// What `--net allow=` or `audit --net` asked for, checked, before the run
/// exists.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Egress {
    pub policy: Policy,
}

impl Egress {
    /// The record the run starts with: the policy, the proxy, no
    /// connections yet.
    pub fn record(&self, port: u16) -> NetRecord {
        NetRecord {
            policy: if self.policy.open { vec!["*".into()] } else { self.policy.shown() },
            resolve: self.policy.resolve.iter().map(|(n, a)| format!("{n}={a}")).collect(),
            proxy: proxy_url(port),
            connections: Vec::new(),
            more: 0,
            complete: false,
        }
    }
}

/// The proxy as the command reaches it.
pub fn proxy_url(port: u16) -> String {
    format!("http://127.0.0.1:{port}")
}

/// What the command's environment gets: the variables curl, git, pip,
/// npm, cargo, Node (24 and later) and most HTTP libraries read. Hosts in
/// `NO_PROXY` are the namespace's own loopback.
pub fn vars(port: u16) -> Vec<(&'static str, String)> {
    let url = proxy_url(port);
    let mut out = Vec::new();
    for name in ["HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"] {
        out.push((name, url.clone()));
    }
    for name in ["NO_PROXY", "no_proxy"] {
        out.push((name, "localhost,127.0.0.1,::1".to_string()));
    }
    // npm reads its own settings before the variables above; cargo reads
    // `http.proxy`; Node's own fetch and http modules need to be told.
    out.push(("npm_config_proxy", url.clone()));
    out.push(("npm_config_https_proxy", url.clone()));
    out.push(("CARGO_HTTP_PROXY", url));
    out.push(("NODE_USE_ENV_PROXY", "1".into()));
    out
}

/// The names [`vars`] sets, which a user may not set or pass themselves
/// when the run has a proxy.
pub fn var_names() -> Vec<&'static str> {
    vars(0).into_iter().map(|(n, _)| n).collect()
}

/// A proxy made, not yet serving: the socket listening in the run's
/// namespace, and what it enforces.
pub struct Pending {
    pub listener: TcpListener,
    pub port: u16,
    pub egress: Egress,
}

/// A serving proxy and its log.
pub struct Serving {
    proxy: proxy::Proxy,
}

impl Pending {
    /// Starts serving, logging into the run directory `dir`.
    pub fn serve(self, dir: Option<crate::fsx::Dir>) -> Serving {
        let log = log::Log::new(self.egress.record(self.port), dir);
        Serving { proxy: proxy::Proxy::start(self.listener, self.egress.policy, log) }
    }
}

impl Serving {
    /// Stops and returns the complete record.
    pub fn finish(self) -> NetRecord {
        self.proxy.finish()
    }
}

/// `--net VALUE` and `--resolve` as given to `run` (`audit` false) or
/// `runws audit` (`audit` true, where `--net` alone reports every
/// destination): the network, and the proxy's policy when it has one.
pub fn choose(
    net: Option<&str>,
    resolve: &[String],
    audit: bool,
) -> Result<(crate::manifest::sandbox::Net, Option<Egress>), String> {
    use crate::manifest::sandbox::Net;
    let pins = resolve
        .iter()
        .map(|r| policy::parse_resolve(r).map_err(|e| format!("--resolve: {e}")))
        .collect::<Result<Vec<_>, _>>()?;
    let chosen = match (net, audit) {
        (None, _) => (Net::Host, None),
        (Some(""), true) => (Net::Allow, Some(Policy { open: true, ..Default::default() })),
        (Some(v), true) => {
            return Err(format!(
                "runws audit takes --net alone (every destination let through and reported), not `--net {v}`"
            ));
        }
        (Some(""), false) => return Err("--net needs a value: none, host or allow=PATTERNS".into()),
        (Some("none"), false) => (Net::None, None),
        (Some("host"), false) => (Net::Host, None),
        (Some(v), false) => match v.strip_prefix("allow=") {
            Some(list) => {
                let patterns = policy::parse_list(list)?;
                (Net::Allow, Some(Policy { patterns, ..Default::default() }))
            }
            None => return Err(format!("`{v}` is not a --net value: none, host or allow=PATTERNS")),
        },
    };
    let (net, policy) = chosen;
    match policy {
        Some(mut p) => {
            p.resolve = pins;
            Ok((net, Some(Egress { policy: p })))
        }
        None if !pins.is_empty() => Err("--resolve needs --net allow=... (or `runws audit --net`)".into()),
        None => Ok((net, None)),
    }
}

/// The policy a run recorded, for its replay: read back from disk, so
/// every pattern and pin is checked as on the command line.
pub fn from_record(rec: &NetRecord) -> Result<Egress, String> {
    if rec.policy == ["*"] {
        return Ok(Egress { policy: Policy { open: true, ..Default::default() } });
    }
    let patterns = rec.policy.iter().map(|p| policy::pattern(p)).collect::<Result<Vec<_>, _>>()?;
    if patterns.is_empty() || patterns.len() > policy::MAX_PATTERNS {
        return Err("the recorded policy names no pattern, or too many".into());
    }
    let resolve = rec.resolve.iter().map(|r| policy::parse_resolve(r)).collect::<Result<Vec<_>, _>>()?;
    Ok(Egress { policy: Policy { patterns, resolve, open: false } })
}
