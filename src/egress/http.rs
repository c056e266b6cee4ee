//! Plain HTTP through the proxy: which host a request names, and where its
//! body ends.
//!
//! Without TLS, a server picks the site it serves from the request alone
//! (its `Host` header or an absolute URL), not from the address it was
//! reached at: one address of a shared host or CDN serves thousands of
//! names. So a plain request is held to the name the policy allowed:
//!
//! * a plain request (an absolute `http://` URL) is sent on with the URL's
//!   host as its `Host` (RFC 9112 section 3.2.2: a proxy replaces the one
//!   it received), and it is the only request its connection carries: its
//!   body is passed on exactly as its framing says, nothing after it;
//! * a tunnel to a name on port 80 that does not carry TLS carries HTTP/1,
//!   every request of which must name that host; each body is passed on as
//!   its framing says, so that no request hides inside another.
//!
//! Where a framing could be read in two ways (`Content-Length` twice, or
//! with `Transfer-Encoding`, a transfer coding other than `chunked`, a
//! chunk line that is not strictly `HEX[;ext]CRLF`), the request is
//! refused: the proxy and the server must agree on where a request ends.
//! `Upgrade` is refused too: after a `101` the connection no longer carries
//! requests the proxy could read (a `wss://` URL goes through a TLS tunnel).

use std::io::{Read, Write};
use std::net::TcpStream;

use super::policy::{self, Destination, Host};

/// A request head (and a chunked body's trailers) is at most this long.
pub const MAX_HEAD: usize = 64 * 1024;
/// A chunk-size line is at most this long (extensions included).
const MAX_CHUNK_LINE: usize = 4096;

/// How a request's body ends (RFC 9112 section 6.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// No `Content-Length` and no `Transfer-Encoding`: no body.
    Empty,
    Length(u64),
    Chunked,
}

/// Why passing a request on stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stop {
    /// The client closed or failed (nothing to tell it).
    Ended,
    /// A request the proxy refuses, and why.
    Refused(String),
}

/// The framing of a request with these headers, or why it cannot be read
/// unambiguously.
pub fn framing(version: u8, headers: &[httparse::Header<'_>]) -> Result<Framing, String> {
    let mut length = None;
    let mut chunked = false;
    for h in headers {
        if h.name.eq_ignore_ascii_case("content-length") {
            let v = trim(h.value);
            let n = std::str::from_utf8(v)
                .ok()
                .filter(|v| !v.is_empty() && v.len() <= 18 && v.bytes().all(|b| b.is_ascii_digit()))
                .and_then(|v| v.parse::<u64>().ok())
                .ok_or("a Content-Length that is not a number")?;
            if length.replace(n).is_some() {
                return Err("Content-Length given twice".into());
            }
        } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
            if chunked || !trim(h.value).eq_ignore_ascii_case(b"chunked") {
                return Err("a Transfer-Encoding other than one `chunked`".into());
            }
            chunked = true;
        }
    }
    match (length, chunked) {
        (Some(_), true) => Err("both Content-Length and Transfer-Encoding".into()),
        (None, true) if version == 0 => Err("Transfer-Encoding in an HTTP/1.0 request".into()),
        (None, true) => Ok(Framing::Chunked),
        (Some(0), false) | (None, false) => Ok(Framing::Empty),
        (Some(n), false) => Ok(Framing::Length(n)),
    }
}

fn trim(v: &[u8]) -> &[u8] {
    let start = v.iter().position(|b| !matches!(b, b' ' | b'\t')).unwrap_or(v.len());
    let end = v.iter().rposition(|b| !matches!(b, b' ' | b'\t')).map_or(start, |e| e + 1);
    &v[start..end]
}

/// Whether `text` (a `Host` value or a URL's authority) names `d`: the same
/// name, and the same port (80 when none is written).
fn names(text: &[u8], d: &Destination) -> bool {
    let Ok(text) = std::str::from_utf8(text) else { return false };
    policy::authority(text, Some(80)).is_ok_and(|t| t.host == d.host && t.port == d.port)
}

/// What a request head sent in a tunnel to the name `d` (port 80, not
/// TLS) asks for: its framing when it names `d` alone, else the host it
/// names (as it may be shown, for the log) and why it is refused.
pub fn check_tunneled(head: &[u8], d: &Destination) -> Result<Framing, (String, String)> {
    let own = || d.host_text();
    let mut headers = [httparse::EMPTY_HEADER; 128];
    let mut req = httparse::Request::new(&mut headers);
    match req.parse(head) {
        Ok(httparse::Status::Complete(_)) => {}
        Ok(httparse::Status::Partial) => return Err((own(), "an incomplete request head".into())),
        Err(e) => return Err((own(), format!("an unreadable request in a tunnel ({e})"))),
    }
    let (Some(target), Some(version)) = (req.path, req.version) else {
        return Err((own(), "an unreadable request line".into()));
    };
    let hosts: Vec<&[u8]> =
        req.headers.iter().filter(|h| h.name.eq_ignore_ascii_case("host")).map(|h| h.value).collect();
    let [host] = hosts[..] else {
        return Err((own(), "a request in a tunnel must have one Host header".into()));
    };
    if !names(trim(host), d) {
        let shown = policy::shown(&String::from_utf8_lossy(trim(host)));
        let why = format!("the request names `{shown}`, not `{}`", own());
        return Err((shown, why));
    }
    let lower = target.get(..7).map(str::to_ascii_lowercase).unwrap_or_default();
    if lower == "http://" {
        let after = &target[7..];
        let authority = &after[..after.find(['/', '?', '#']).unwrap_or(after.len())];
        if authority.contains('@') || !names(authority.as_bytes(), d) {
            return Err((own(), format!("the request's URL names another host than `{}`", own())));
        }
    } else if !(target.starts_with('/') || target == "*") {
        return Err((own(), "a request target in a tunnel must be a path".into()));
    }
    if req.headers.iter().any(|h| h.name.eq_ignore_ascii_case("upgrade")) {
        return Err((own(), "an Upgrade over plain HTTP (use TLS: https://, wss://)".into()));
    }
    framing(version, req.headers).map_err(|why| (own(), why))
}

/// The bytes a client sent: what was read ahead, then its connection.
pub struct Feed<'a> {
    buf: Vec<u8>,
    at: usize,
    from: &'a TcpStream,
}

impl<'a> Feed<'a> {
    pub fn new(first: Vec<u8>, from: &'a TcpStream) -> Feed<'a> {
        Feed { buf: first, at: 0, from }
    }

    /// What was read past the last head or body taken: the first bytes of
    /// a tunnel.
    pub fn rest(self) -> Vec<u8> {
        self.buf[self.at..].to_vec()
    }

    fn pending(&self) -> &[u8] {
        &self.buf[self.at..]
    }

    /// Reads more from the client: false when it ended.
    fn more(&mut self) -> bool {
        if self.at > 0 && self.at == self.buf.len() {
            self.buf.clear();
            self.at = 0;
        }
        let mut chunk = [0u8; 16 * 1024];
        let mut from = self.from;
        loop {
            match from.read(&mut chunk) {
                Ok(0) => return false,
                Ok(n) => {
                    self.buf.extend_from_slice(&chunk[..n]);
                    return true;
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => return false,
            }
        }
    }

    /// The next request head, through its empty line: `None` when the
    /// client ended before sending a byte of it.
    pub fn head(&mut self) -> Result<Option<Vec<u8>>, Stop> {
        let mut from = 0;
        loop {
            let p = self.pending();
            if let Some(end) = p[from..].windows(4).position(|w| w == b"\r\n\r\n") {
                let end = from + end + 4;
                let head = p[..end].to_vec();
                self.at += end;
                return Ok(Some(head));
            }
            if p.len() > MAX_HEAD {
                return Err(Stop::Refused("a request head over 64 KiB".into()));
            }
            from = p.len().saturating_sub(3);
            let had = p.len();
            if !self.more() {
                return if had == 0 { Ok(None) } else { Err(Stop::Ended) };
            }
        }
    }

    /// Up to and without the next CRLF, at most `max` bytes; a CR or LF
    /// alone is refused (a server may read a line end there).
    fn line(&mut self, max: usize) -> Result<Vec<u8>, Stop> {
        loop {
            let p = self.pending();
            if let Some(i) = p.windows(2).position(|w| w == b"\r\n").filter(|i| *i <= max) {
                let line = p[..i].to_vec();
                if line.iter().any(|b| matches!(b, b'\r' | b'\n')) {
                    return Err(Stop::Refused("a bare CR or LF in a chunked body".into()));
                }
                self.at += i + 2;
                return Ok(line);
            }
            if p.len() > max + 1 {
                return Err(Stop::Refused("a chunked body's line too long".into()));
            }
            if p.contains(&b'\n') {
                return Err(Stop::Refused("a bare LF in a chunked body".into()));
            }
            if !self.more() {
                return Err(Stop::Ended);
            }
        }
    }

    /// Passes on `n` bytes as they come.
    fn pass(&mut self, mut n: u64, to: &TcpStream, counter: &dyn Fn(usize)) -> Result<(), Stop> {
        while n > 0 {
            if self.pending().is_empty() && !self.more() {
                return Err(Stop::Ended);
            }
            let p = self.pending();
            let k = p.len().min(usize::try_from(n).unwrap_or(usize::MAX));
            send(to, &p[..k], counter)?;
            self.at += k;
            n -= k as u64;
        }
        Ok(())
    }

    /// Passes on one request body framed as `f`, and nothing after it.
    pub fn body(&mut self, f: Framing, to: &TcpStream, counter: &dyn Fn(usize)) -> Result<(), Stop> {
        match f {
            Framing::Empty => Ok(()),
            Framing::Length(n) => self.pass(n, to, counter),
            Framing::Chunked => loop {
                let line = self.line(MAX_CHUNK_LINE)?;
                let size = chunk_size(&line)?;
                send(to, &[&line[..], b"\r\n"].concat(), counter)?;
                if size == 0 {
                    return self.trailers(to, counter);
                }
                self.pass(size, to, counter)?;
                while self.pending().len() < 2 {
                    if !self.more() {
                        return Err(Stop::Ended);
                    }
                }
                if &self.pending()[..2] != b"\r\n" {
                    return Err(Stop::Refused("a chunk longer than its size".into()));
                }
                self.at += 2;
                send(to, b"\r\n", counter)?;
            },
        }
    }

    /// A chunked body's trailer fields and its final empty line.
    fn trailers(&mut self, to: &TcpStream, counter: &dyn Fn(usize)) -> Result<(), Stop> {
        let mut total = 0;
        loop {
            let line = self.line(MAX_HEAD)?;
            total += line.len() + 2;
            if total > MAX_HEAD {
                return Err(Stop::Refused("a chunked body's trailers over 64 KiB".into()));
            }
            send(to, &[&line[..], b"\r\n"].concat(), counter)?;
            if line.is_empty() {
                return Ok(());
            }
        }
    }
}

/// A chunk-size line: hexadecimal digits, then optionally `;` and
/// extensions of visible characters, spaces and tabs.
fn chunk_size(line: &[u8]) -> Result<u64, Stop> {
    let digits = line.iter().take_while(|b| b.is_ascii_hexdigit()).count();
    let ext = &line[digits..];
    let ext_ok = ext.is_empty()
        || (ext[0] == b';' && ext.iter().all(|b| b.is_ascii_graphic() || matches!(b, b' ' | b'\t')));
    let size = std::str::from_utf8(&line[..digits])
        .ok()
        .filter(|d| !d.is_empty() && d.len() <= 15 && ext_ok)
        .and_then(|d| u64::from_str_radix(d, 16).ok());
    size.ok_or_else(|| Stop::Refused("a chunk-size line that is not HEX[;extension]".into()))
}

pub fn send(to: &TcpStream, bytes: &[u8], counter: &dyn Fn(usize)) -> Result<(), Stop> {
    let mut to = to;
    counter(bytes.len());
    to.write_all(bytes).map_err(|_| Stop::Ended)
}

/// Whether `d` is a destination whose plain-text tunnel carries checked
/// HTTP: a name on port 80 (a pattern without a port allows 80 for HTTP
/// and 443 for TLS).
pub fn checked(d: &Destination) -> bool {
    d.port == 80 && matches!(d.host, Host::Name(_))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(text: &str) -> Destination {
        policy::authority(text, Some(80)).unwrap()
    }

    #[test]
    fn a_tunneled_request_must_name_its_tunnels_host() {
        let web = d("web.test");
        let ok = |h: &str| check_tunneled(h.as_bytes(), &web);
        assert_eq!(ok("GET / HTTP/1.1\r\nHost: Web.Test\r\n\r\n"), Ok(Framing::Empty));
        assert_eq!(ok("GET / HTTP/1.1\r\nHost: web.test:80\r\n\r\n"), Ok(Framing::Empty));
        assert_eq!(ok("GET http://web.test/x HTTP/1.1\r\nHost: web.test\r\n\r\n"), Ok(Framing::Empty));
        assert_eq!(
            ok("POST /x HTTP/1.1\r\nHost: web.test\r\nContent-Length: 5\r\n\r\n"),
            Ok(Framing::Length(5))
        );
        assert_eq!(
            ok("POST /x HTTP/1.1\r\nHost: web.test\r\nTransfer-Encoding: Chunked\r\n\r\n"),
            Ok(Framing::Chunked)
        );
        for (head, why) in [
            ("GET / HTTP/1.1\r\nHost: evil.test\r\n\r\n", "names `evil.test`"),
            ("GET / HTTP/1.1\r\nHost: web.test:8080\r\n\r\n", "names `web.test:8080`"),
            ("GET / HTTP/1.1\r\nHost: evil\u{e9}.test\r\n\r\n", "names `evil?.test`"),
            ("GET / HTTP/1.1\r\n\r\n", "one Host header"),
            ("GET / HTTP/1.1\r\nHost: web.test\r\nHost: evil.test\r\n\r\n", "one Host header"),
            ("GET http://evil.test/ HTTP/1.1\r\nHost: web.test\r\n\r\n", "URL names another host"),
            ("GET http://web.test@evil.test/ HTTP/1.1\r\nHost: web.test\r\n\r\n", "URL names another host"),
            ("CONNECT evil.test:443 HTTP/1.1\r\nHost: web.test\r\n\r\n", "must be a path"),
            ("GET / HTTP/1.1\r\nHost: web.test\r\nUpgrade: h2c\r\n\r\n", "an Upgrade"),
            ("POST / HTTP/1.1\r\nHost: web.test\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\n", "twice"),
            ("POST / HTTP/1.1\r\nHost: web.test\r\nContent-Length: +1\r\n\r\n", "not a number"),
            (
                "POST / HTTP/1.1\r\nHost: web.test\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n",
                "both",
            ),
            ("POST / HTTP/1.1\r\nHost: web.test\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", "other than"),
            ("POST / HTTP/1.0\r\nHost: web.test\r\nTransfer-Encoding: chunked\r\n\r\n", "HTTP/1.0"),
        ] {
            let (_, e) = ok(head).unwrap_err();
            assert!(e.contains(why), "{head:?}: {e}");
        }
        let long = format!("GET / HTTP/1.1\r\nHost: {}.test\r\n\r\n", "a".repeat(60_000));
        let (named, _) = ok(&long).unwrap_err();
        assert_eq!(named.len(), 253);
    }

    #[test]
    fn chunk_lines_are_read_strictly() {
        assert_eq!(chunk_size(b"1a").ok(), Some(26));
        assert_eq!(chunk_size(b"0;name=\"v\"").ok(), Some(0));
        for bad in [&b""[..], b" 1", b"1 ", b"0x1", b"-1", b"1;\x01", b"1000000000000000", b"g"] {
            assert!(chunk_size(bad).is_err(), "{:?}", String::from_utf8_lossy(bad));
        }
    }
}
