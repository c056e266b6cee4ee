//! `--ping URL`: the protocol of healthchecks.io and its self-hosted peers,
//! over plain HTTP.
//!
//! One `POST` per event: `URL/start` when the command starts, `URL` when it
//! succeeded, `URL/<exit code>` when it failed (the protocol's "exit status"
//! endpoint, which a server records as a failure for anything but 0). Each
//! carries `?rid=<run id>` when the run id is a UUID, as the protocol wants.
//!
//! A ping never delays the command nor changes how the run ends: each
//! attempt is bounded by its time-out (connect, send and the response's
//! status line together), a failed attempt is tried again a few times, and
//! the caller waits for the whole ping at most [`Ping::budget`], resolving
//! the host included. Only `http://` is spoken: there is no TLS in runws, so
//! an `https://` URL is refused before the run is made.

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::error::Error;

/// How many times one ping is tried.
pub const ATTEMPTS: u32 = 3;

/// The pause before the second and the third attempt.
const BACKOFF: [Duration; 2] = [Duration::from_millis(200), Duration::from_millis(800)];

/// At most this many bytes of a response are read: its status line is all
/// that counts.
const MAX_RESPONSE: usize = 1024;

/// A ping URL, parsed: `http://HOST[:PORT][/PATH][?QUERY]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// As the `Host` header names it (an IPv6 address in brackets).
    host: String,
    port: u16,
    /// Without a trailing `/`; empty for the server's root.
    path: String,
    /// Without the `?`; empty when there is none.
    query: String,
}

/// What a ping reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    Start,
    Success,
    /// The run failed with this exit code.
    Fail(u8),
}

impl Event {
    /// The word the manifest records.
    pub fn as_str(self) -> &'static str {
        match self {
            Event::Start => "start",
            Event::Success => "success",
            Event::Fail(_) => "fail",
        }
    }
}

/// How one ping went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    pub attempts: u32,
    /// The HTTP status of the last response, when there was one.
    pub status: Option<u16>,
    /// Why the last attempt failed, when the ping did not get a 2xx.
    pub error: Option<String>,
}

impl Outcome {
    pub fn ok(&self) -> bool {
        self.error.is_none()
    }
}

/// Parses a ping URL; refuses what runws does not speak or could not send
/// as written (https, credentials, a fragment, spaces or control bytes).
pub fn parse(url: &str) -> Result<Target, Error> {
    let bad = |why: &str| Error::Usage(format!("--ping `{}`: {why}", url.escape_debug()));
    if url.bytes().any(|b| b <= b' ' || b >= 0x7f) {
        return Err(bad("holds a space, a control byte or a non-ASCII byte"));
    }
    let scheme_end = url.find("://").ok_or_else(|| bad("not an http:// URL"))?;
    match url[..scheme_end].to_ascii_lowercase().as_str() {
        "http" => {}
        "https" => {
            return Err(bad("runws speaks plain http:// only (no TLS); use an http:// URL or a local relay"));
        }
        _ => return Err(bad("not an http:// URL")),
    }
    let rest = &url[scheme_end + 3..];
    if rest.contains('#') {
        return Err(bad("holds a fragment (`#`)"));
    }
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, rest) = rest.split_at(end);
    if authority.contains('@') {
        return Err(bad("holds credentials (`user@`)"));
    }
    let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
        let (addr, after) = v6.split_once(']').ok_or_else(|| bad("an IPv6 address without its `]`"))?;
        (format!("[{addr}]"), after)
    } else {
        let colon = authority.find(':').unwrap_or(authority.len());
        (authority[..colon].to_string(), &authority[colon..])
    };
    if host.is_empty() || host == "[]" {
        return Err(bad("no host"));
    }
    let port = match port.strip_prefix(':') {
        None if port.is_empty() => 80,
        Some(p) if !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) => {
            p.parse::<u16>().ok().filter(|p| *p != 0).ok_or_else(|| bad("not a port"))?
        }
        _ => return Err(bad("not a port")),
    };
    let (path, query) = rest.split_once('?').unwrap_or((rest, ""));
    Ok(Target { host, port, path: path.trim_end_matches('/').to_string(), query: query.to_string() })
}

impl Target {
    /// The request target of `event`: path and query.
    fn request_target(&self, event: Event, rid: Option<&str>) -> String {
        let mut path = self.path.clone();
        match event {
            Event::Start => path.push_str("/start"),
            Event::Success => {}
            Event::Fail(code) => path.push_str(&format!("/{code}")),
        }
        if path.is_empty() {
            path.push('/');
        }
        let mut query = self.query.clone();
        if let Some(rid) = rid {
            if !query.is_empty() {
                query.push('&');
            }
            query.push_str("rid=");
            query.push_str(rid);
        }
        if query.is_empty() { path } else { format!("{path}?{query}") }
    }
}

/// One ping to send: where, what, the body, each attempt's time-out.
pub struct Ping {
    pub target: Target,
    pub event: Event,
    /// The run id, sent only when it is a UUID.
    pub rid: Option<String>,
    pub body: Vec<u8>,
    pub timeout: Duration,
}

/// A ping on its own thread.
pub struct Pending {
    rx: mpsc::Receiver<Outcome>,
    deadline: Instant,
}

impl Ping {
    /// The longest the whole ping takes: every attempt and every pause, and
    /// a moment more.
    pub fn budget(&self) -> Duration {
        self.timeout * ATTEMPTS + BACKOFF.iter().sum::<Duration>() + Duration::from_millis(200)
    }

    /// Sends the ping on a thread of its own; [`Pending::wait`] takes its
    /// outcome.
    pub fn spawn(self) -> Pending {
        let deadline = Instant::now() + self.budget();
        let (tx, rx) = mpsc::channel();
        let spawned = std::thread::Builder::new().name("runws-ping".into()).spawn(move || {
            let _ = tx.send(self.send());
        });
        if let Err(e) = spawned {
            let (tx, rx2) = mpsc::channel();
            let _ = tx.send(Outcome {
                attempts: 0,
                status: None,
                error: Some(format!("cannot start a thread: {e}")),
            });
            return Pending { rx: rx2, deadline };
        }
        Pending { rx, deadline }
    }

    /// Tries the ping up to [`ATTEMPTS`] times; a 4xx is not tried again.
    fn send(&self) -> Outcome {
        let mut last = Outcome { attempts: 0, status: None, error: None };
        for attempt in 0..ATTEMPTS {
            if let Some(pause) = attempt.checked_sub(1).and_then(|i| BACKOFF.get(i as usize)) {
                std::thread::sleep(*pause);
            }
            last.attempts = attempt + 1;
            match self.attempt() {
                Ok(status) if (200..300).contains(&status) => {
                    return Outcome { attempts: last.attempts, status: Some(status), error: None };
                }
                Ok(status) => {
                    last.status = Some(status);
                    last.error = Some(format!("the server answered {status}"));
                    if (400..500).contains(&status) && status != 408 && status != 429 {
                        break;
                    }
                }
                Err(e) => {
                    last.status = None;
                    last.error = Some(e);
                }
            }
        }
        last
    }

    /// One attempt: the response's status code, or why there is none.
    fn attempt(&self) -> Result<u16, String> {
        let deadline = Instant::now() + self.timeout;
        let left = || deadline.saturating_duration_since(Instant::now()).max(Duration::from_millis(1));
        let host = self.target.host.trim_start_matches('[').trim_end_matches(']');
        let addrs: Vec<_> = (host, self.target.port)
            .to_socket_addrs()
            .map_err(|e| format!("cannot resolve `{}`: {e}", self.target.host))?
            .collect();
        let mut stream = None;
        let mut why = format!("`{}` has no address", self.target.host);
        for addr in addrs {
            if Instant::now() >= deadline {
                why = "timed out connecting".into();
                break;
            }
            match TcpStream::connect_timeout(&addr, left()) {
                Ok(s) => {
                    stream = Some(s);
                    break;
                }
                Err(e) => why = format!("cannot connect to {addr}: {e}"),
            }
        }
        let mut stream = stream.ok_or(why)?;
        let timed = |e: std::io::Error, what: &str| match e.kind() {
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => format!("timed out {what}"),
            _ => format!("cannot {what}: {e}"),
        };
        let host_header = match self.target.port {
            80 => self.target.host.clone(),
            p => format!("{}:{p}", self.target.host),
        };
        let mut request = format!(
            "POST {} HTTP/1.1\r\nHost: {host_header}\r\nUser-Agent: runws/{}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            self.target.request_target(self.event, self.rid.as_deref()),
            env!("CARGO_PKG_VERSION"),
            self.body.len()
        )
        .into_bytes();
        request.extend_from_slice(&self.body);
        stream.set_write_timeout(Some(left())).map_err(|e| timed(e, "sending"))?;
        stream.write_all(&request).map_err(|e| timed(e, "sending"))?;
        let mut response = Vec::new();
        let mut buf = [0u8; 256];
        while !response.windows(2).any(|w| w == b"\r\n") && response.len() < MAX_RESPONSE {
            if Instant::now() >= deadline {
                return Err("timed out waiting for the response".into());
            }
            stream.set_read_timeout(Some(left())).map_err(|e| timed(e, "reading the response"))?;
            match stream.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => response.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(timed(e, "waiting for the response")),
            }
        }
        status_code(&response).ok_or_else(|| "the response is not HTTP".to_string())
    }
}

/// The status code of `HTTP/1.x NNN ...`.
fn status_code(response: &[u8]) -> Option<u16> {
    let line = response.split(|b| *b == b'\n').next()?;
    let line = std::str::from_utf8(line).ok()?;
    let mut words = line.split_ascii_whitespace();
    if !words.next()?.starts_with("HTTP/1.") {
        return None;
    }
    let code = words.next()?;
    (code.len() == 3).then(|| code.parse().ok()).flatten()
}

impl Pending {
    /// The ping's outcome, waiting at most until its budget runs out.
    pub fn wait(self) -> Outcome {
        let left = self.deadline.saturating_duration_since(Instant::now());
        self.rx.recv_timeout(left).unwrap_or_else(|_| Outcome {
            attempts: ATTEMPTS,
            status: None,
            error: Some("gave up waiting for the server".into()),
        })
    }
}

/// The run id as `?rid=` carries it: only a UUID.
pub fn rid(run_id: &str) -> Option<String> {
    uuid::Uuid::try_parse(run_id).ok().map(|u| u.hyphenated().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_parse_or_are_refused() {
        let t = parse("http://hc.local:8000/ping/abc/").unwrap();
        assert_eq!((t.host.as_str(), t.port, t.path.as_str()), ("hc.local", 8000, "/ping/abc"));
        assert_eq!(t.request_target(Event::Start, Some("r")), "/ping/abc/start?rid=r");
        assert_eq!(t.request_target(Event::Fail(3), None), "/ping/abc/3");
        assert_eq!(t.request_target(Event::Success, None), "/ping/abc");
        let t = parse("HTTP://[::1]/x?k=v").unwrap();
        assert_eq!((t.host.as_str(), t.port), ("[::1]", 80));
        assert_eq!(t.request_target(Event::Success, Some("r")), "/x?k=v&rid=r");
        assert_eq!(parse("http://h").unwrap().request_target(Event::Success, None), "/");
        for bad in [
            "https://hc-ping.com/x",
            "ftp://h/x",
            "hc-ping.com/x",
            "http://u:p@h/x",
            "http://h:0/x",
            "http://h:99999/x",
            "http://h:/x",
            "http:///x",
            "http://h/x y",
            "http://h/x\r\nX: y",
            "http://h/x#f",
        ] {
            assert!(parse(bad).is_err(), "took {bad}");
        }
    }

    #[test]
    fn status_lines() {
        assert_eq!(status_code(b"HTTP/1.1 200 OK\r\n"), Some(200));
        assert_eq!(status_code(b"HTTP/1.0 404\r\n"), Some(404));
        assert_eq!(status_code(b"SSH-2.0\r\n"), None);
        assert_eq!(rid("not-a-uuid"), None);
        assert!(rid("0190b6b2-0000-7000-8000-000000000000").is_some());
    }
}
