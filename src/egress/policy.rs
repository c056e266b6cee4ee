//! `--net allow=PATTERNS`: what a pattern is, how a destination matches
//! one, and `--resolve NAME=ADDR`.
//!
//! A pattern is a host, optionally followed by `:PORT`:
//!
//! | pattern | matches |
//! |---|---|
//! | `example.com` | the name `example.com` (any case, a trailing dot ignored), ports 443 and 80 |
//! | `*.example.com` | every name under `example.com` (`a.example.com`, `a.b.example.com`), not `example.com` itself |
//! | `example.com:8443` | that name on port 8443 only |
//! | `192.0.2.7`, `[2001:db8::1]:443` | that address, written as that literal; a name never matches it, nor it a name |
//!
//! `@FILE` in the list reads more patterns from FILE: one a line, `#`
//! starting a comment, blank lines ignored. The list is read and checked
//! before anything starts; every problem is one line naming the pattern.

use std::net::IpAddr;
use std::path::Path;

use serde::{Deserialize, Serialize};

/// The ports a pattern without `:PORT` allows.
pub const DEFAULT_PORTS: [u16; 2] = [443, 80];

/// At most this many patterns (after reading files): a policy is a list a
/// person writes, and each connection is checked against all of it.
pub const MAX_PATTERNS: usize = 10_000;

/// A policy file is read up to this size.
const MAX_FILE: u64 = 1 << 20;

/// The host part of a pattern or of a destination.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Host {
    /// A DNS name, lower case, without a trailing dot.
    Name(String),
    /// `*.DOMAIN`: names below DOMAIN (lower case).
    Below(String),
    /// An address written as a literal.
    Addr(IpAddr),
}

/// One `--net allow` pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pattern {
    pub host: Host,
    /// `None`: [`DEFAULT_PORTS`].
    pub port: Option<u16>,
}

/// What a connection may reach: the patterns, and the names `--resolve`
/// pins to an address.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Policy {
    pub patterns: Vec<Pattern>,
    /// `--resolve NAME=ADDR`.
    pub resolve: Vec<(String, IpAddr)>,
    /// `audit --net`: everything is allowed (and recorded).
    pub open: bool,
}

/// A destination a client asked for: CONNECT's authority, or the host and
/// port of a plain request's URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Destination {
    pub host: Host,
    pub port: u16,
}

impl Destination {
    /// The host as written in the record and in messages (`[::1]` for an
    /// IPv6 address).
    pub fn host_text(&self) -> String {
        match &self.host {
            Host::Name(n) | Host::Below(n) => n.clone(),
            Host::Addr(IpAddr::V6(a)) => format!("[{a}]"),
            Host::Addr(a) => a.to_string(),
        }
    }
}

impl std::fmt::Display for Pattern {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.host {
            Host::Name(n) => write!(f, "{n}")?,
            Host::Below(d) => write!(f, "*.{d}")?,
            Host::Addr(IpAddr::V6(a)) if self.port.is_some() => write!(f, "[{a}]")?,
            Host::Addr(a) => write!(f, "{a}")?,
        }
        match self.port {
            Some(p) => write!(f, ":{p}"),
            None => Ok(()),
        }
    }
}

/// A DNS name as runws accepts one: labels of letters, digits, `-` and
/// `_`, none empty, none over 63 bytes, none starting or ending with `-`;
/// at most 253 bytes. Lower-cased, a trailing dot dropped; `None` when it
/// is not a name.
pub fn name(text: &str) -> Option<String> {
    let t = text.strip_suffix('.').unwrap_or(text);
    if t.is_empty() || t.len() > 253 {
        return None;
    }
    let ok = t.split('.').all(|l| {
        !l.is_empty()
            && l.len() <= 63
            && !l.starts_with('-')
            && !l.ends_with('-')
            && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    });
    // All digits and dots is an address someone mistyped, not a name.
    let numeric = t.bytes().all(|b| b.is_ascii_digit() || b == b'.');
    (ok && !numeric).then(|| t.to_ascii_lowercase())
}

/// A name a client sent (a TLS server name, a `Host` header), as it may be
/// recorded and shown: printable ASCII, at most a name's length.
pub fn shown(text: &str) -> String {
    text.chars().take(253).map(|c| if c.is_ascii_graphic() { c } else { '?' }).collect()
}

/// `HOST[:PORT]` as a client writes it (CONNECT's authority, a URL's host):
/// a name, an IPv4 literal or a bracketed IPv6 literal. `default` is the
/// port when none is written (CONNECT requires one: `None`).
pub fn authority(text: &str, default: Option<u16>) -> Result<Destination, String> {
    let (host, port) = split_port(text)?;
    let port = match (port, default) {
        (Some(p), _) => p,
        (None, Some(d)) => d,
        (None, None) => return Err(format!("`{text}` names no port")),
    };
    let host = if let Some(inner) = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        Host::Addr(IpAddr::V6(inner.parse().map_err(|_| format!("`{host}` is not an IPv6 address"))?))
    } else if let Ok(a) = host.parse::<std::net::Ipv4Addr>() {
        Host::Addr(IpAddr::V4(a))
    } else {
        Host::Name(name(host).ok_or_else(|| format!("`{host}` is not a host name"))?)
    };
    Ok(Destination { host, port })
}

/// Splits `HOST[:PORT]`, minding IPv6 brackets; a port must be 1 to 65535.
fn split_port(text: &str) -> Result<(&str, Option<u16>), String> {
    let port_of = |p: &str| -> Result<u16, String> {
        Some(p)
            .filter(|p| !p.is_empty() && p.len() <= 5 && p.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|p| p.parse::<u16>().ok())
            .filter(|p| *p != 0)
            .ok_or_else(|| format!("`{p}` is not a port (1 to 65535)"))
    };
    if text.starts_with('[') {
        let end = text.find(']').ok_or_else(|| format!("`{text}`: `[` without `]`"))?;
        let (host, rest) = text.split_at(end + 1);
        return match rest.strip_prefix(':') {
            Some(p) => Ok((host, Some(port_of(p)?))),
            None if rest.is_empty() => Ok((host, None)),
            None => Err(format!("`{text}`: unexpected `{rest}` after the address")),
        };
    }
    match text.rsplit_once(':') {
        // A bare IPv6 address (several colons) has no port.
        Some((h, _)) if h.contains(':') => Ok((text, None)),
        Some((h, p)) => Ok((h, Some(port_of(p)?))),
        None => Ok((text, None)),
    }
}

/// One pattern of the command line or of a policy file.
pub fn pattern(text: &str) -> Result<Pattern, String> {
    let t = text.trim();
    let bad = |why: &str| format!("`{t}` is not a pattern: {why}");
    if t.is_empty() {
        return Err(bad("empty"));
    }
    if t.contains("://") {
        let host = t.split("://").nth(1).unwrap_or("").split('/').next().unwrap_or("");
        return Err(bad(&format!("a URL; write its host, as in `{host}`")));
    }
    if t.contains('/') {
        return Err(bad("a pattern names a host, not a path"));
    }
    let (host, port) = split_port(t).map_err(|why| bad(&why))?;
    if let Some(d) = host.strip_prefix("*.") {
        let d = name(d).ok_or_else(|| bad("what follows `*.` is not a domain name"))?;
        return Ok(Pattern { host: Host::Below(d), port });
    }
    if host.contains('*') {
        return Err(bad("`*` stands only as the first label, as in `*.example.com`"));
    }
    if let Some(inner) = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        return match inner.parse::<std::net::Ipv6Addr>() {
            Ok(a) => Ok(Pattern { host: Host::Addr(IpAddr::V6(a)), port }),
            Err(_) => Err(bad("not an IPv6 address")),
        };
    }
    if let Ok(a) = host.parse::<IpAddr>() {
        return Ok(Pattern { host: Host::Addr(a), port });
    }
    match name(host) {
        Some(n) => Ok(Pattern { host: Host::Name(n), port }),
        None => Err(bad("not a host name, `*.DOMAIN` or an address")),
    }
}

/// The patterns of `--net allow=LIST`: comma-separated patterns and
/// `@FILE`s. An empty list is refused (`--net none` says "nothing").
pub fn parse_list(list: &str) -> Result<Vec<Pattern>, String> {
    let mut out = Vec::new();
    for item in list.split(',') {
        let item = item.trim();
        if let Some(file) = item.strip_prefix('@') {
            out.extend(read_file(Path::new(file))?);
        } else if !item.is_empty() {
            out.push(pattern(item)?);
        }
    }
    if out.is_empty() {
        return Err("--net allow= names no pattern (use --net none for no network at all)".into());
    }
    if out.len() > MAX_PATTERNS {
        return Err(format!("--net allow= names {} patterns; at most {MAX_PATTERNS}", out.len()));
    }
    let mut seen = Vec::with_capacity(out.len());
    out.retain(|p| {
        let fresh = !seen.contains(p);
        seen.push(p.clone());
        fresh
    });
    Ok(out)
}

/// A policy file: one pattern a line, `#` comments, blank lines.
fn read_file(path: &Path) -> Result<Vec<Pattern>, String> {
    use std::io::Read;
    let shown = path.display();
    if path.as_os_str().is_empty() {
        return Err("`@` names no policy file".into());
    }
    let f = std::fs::File::open(path).map_err(|e| format!("cannot read the policy file `{shown}`: {e}"))?;
    let mut text = String::new();
    f.take(MAX_FILE + 1)
        .read_to_string(&mut text)
        .map_err(|e| format!("cannot read the policy file `{shown}`: {e}"))?;
    if text.len() as u64 > MAX_FILE {
        return Err(format!("the policy file `{shown}` is over {MAX_FILE} bytes"));
    }
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        out.push(pattern(line).map_err(|e| format!("{shown}:{}: {e}", i + 1))?);
    }
    if out.is_empty() {
        return Err(format!("the policy file `{shown}` names no pattern"));
    }
    Ok(out)
}

/// `--resolve NAME=ADDR`.
pub fn parse_resolve(text: &str) -> Result<(String, IpAddr), String> {
    let (n, a) = text.split_once('=').ok_or_else(|| format!("`{text}` is not NAME=ADDRESS"))?;
    let n = name(n.trim()).ok_or_else(|| format!("`{n}` is not a host name"))?;
    let a = a.trim();
    let a = a.strip_prefix('[').and_then(|a| a.strip_suffix(']')).unwrap_or(a);
    let a = a.parse::<IpAddr>().map_err(|_| format!("`{a}` is not an IP address"))?;
    Ok((n, a))
}

impl Pattern {
    /// Whether this pattern allows `d`.
    pub fn allows(&self, d: &Destination) -> bool {
        let port = match self.port {
            Some(p) => p == d.port,
            None => DEFAULT_PORTS.contains(&d.port),
        };
        port && match (&self.host, &d.host) {
            (Host::Name(p), Host::Name(n)) => p == n,
            (Host::Below(p), Host::Name(n)) => {
                n.len() > p.len() + 1
                    && n.ends_with(p.as_str())
                    && n.as_bytes()[n.len() - p.len() - 1] == b'.'
            }
            (Host::Addr(p), Host::Addr(a)) => p == a,
            _ => false,
        }
    }
}

impl Policy {
    /// Whether `d` may be reached.
    pub fn allows(&self, d: &Destination) -> bool {
        self.open || self.patterns.iter().any(|p| p.allows(d))
    }

    /// The patterns as written, for the record.
    pub fn shown(&self) -> Vec<String> {
        self.patterns.iter().map(|p| p.to_string()).collect()
    }

    /// The address `--resolve` pins `name` to.
    pub fn pinned(&self, name: &str) -> Option<IpAddr> {
        self.resolve.iter().find(|(n, _)| n == name).map(|(_, a)| *a)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(text: &str) -> Destination {
        authority(text, None).unwrap()
    }

    #[test]
    fn names_match_exactly_and_wildcards_only_below() {
        let p = parse_list("Example.COM.,*.githubusercontent.com,api.test:8443").unwrap();
        let pol = Policy { patterns: p, ..Default::default() };
        assert!(pol.allows(&d("example.com:443")));
        assert!(pol.allows(&d("EXAMPLE.com.:80")));
        assert!(!pol.allows(&d("example.com:22")));
        assert!(!pol.allows(&d("www.example.com:443")));
        assert!(!pol.allows(&d("notexample.com:443")));
        assert!(pol.allows(&d("raw.githubusercontent.com:443")));
        assert!(pol.allows(&d("a.b.githubusercontent.com:443")));
        assert!(!pol.allows(&d("githubusercontent.com:443")));
        assert!(!pol.allows(&d("evilgithubusercontent.com:443")));
        assert!(pol.allows(&d("api.test:8443")));
        assert!(!pol.allows(&d("api.test:443")));
    }

    #[test]
    fn addresses_match_only_as_literals() {
        let pol = Policy {
            patterns: parse_list("192.0.2.7,[2001:db8::1]:8443,::1").unwrap(),
            ..Default::default()
        };
        assert!(pol.allows(&d("192.0.2.7:443")));
        assert!(!pol.allows(&d("192.0.2.8:443")));
        assert!(pol.allows(&d("[2001:db8::1]:8443")));
        assert!(!pol.allows(&d("[2001:db8::1]:443")));
        assert!(pol.allows(&d("[::1]:80")));
        let names = Policy { patterns: parse_list("localhost").unwrap(), ..Default::default() };
        assert!(!names.allows(&d("127.0.0.1:443")));
    }

    #[test]
    fn bad_patterns_are_refused_with_a_reason() {
        for (bad, why) in [
            ("https://example.com/x", "a URL; write its host, as in `example.com`"),
            ("exa mple.com", "not a host name"),
            ("*", "`*` stands only"),
            ("a.*.com", "`*` stands only"),
            ("*.", "not a domain name"),
            ("example.com:0", "not a port"),
            ("example.com:65536", "not a port"),
            ("example.com:+1", "not a port"),
            ("[::1", "without `]`"),
            ("[nope]:1", "not an IPv6 address"),
            ("-a.com", "not a host name"),
            ("1.2.3.999", "not a host name"),
        ] {
            let e = parse_list(bad).unwrap_err();
            assert!(e.contains(why), "{bad}: {e}");
        }
        assert!(parse_list("").unwrap_err().contains("names no pattern"));
        assert!(parse_list(" , ,").unwrap_err().contains("names no pattern"));
    }

    #[test]
    fn a_policy_file_has_one_pattern_a_line_and_comments() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("policy.txt");
        std::fs::write(&f, "# registries\npypi.org\n\n  *.npmjs.org   # npm\nexample.com:8080\n").unwrap();
        let p = parse_list(&format!("github.com,@{}", f.display())).unwrap();
        let shown: Vec<String> = p.iter().map(|p| p.to_string()).collect();
        assert_eq!(shown, ["github.com", "pypi.org", "*.npmjs.org", "example.com:8080"]);
        std::fs::write(&f, "ok.com\nbad pattern\n").unwrap();
        let e = parse_list(&format!("@{}", f.display())).unwrap_err();
        assert!(e.contains("policy.txt:2:"), "{e}");
        std::fs::write(&f, "# nothing\n").unwrap();
        assert!(parse_list(&format!("@{}", f.display())).unwrap_err().contains("names no pattern"));
        let e = parse_list(&format!("@{}", dir.path().join("missing").display())).unwrap_err();
        assert!(e.contains("cannot read the policy file"), "{e}");
    }

    #[test]
    fn authorities_and_pins_parse_strictly() {
        assert_eq!(d("[::1]:443").host_text(), "[::1]");
        assert!(authority("example.com", None).is_err());
        assert_eq!(authority("example.com", Some(80)).unwrap().port, 80);
        assert!(authority("ex ample.com:1", None).is_err());
        assert!(authority("example.com:99999", None).is_err());
        assert_eq!(
            parse_resolve("API.test=127.0.0.1").unwrap(),
            ("api.test".into(), "127.0.0.1".parse().unwrap())
        );
        assert!(parse_resolve("api.test").is_err());
        assert!(parse_resolve("api.test=nowhere").is_err());
    }
}
