//! The proxy: runs in runws, outside the run's network namespace, and
//! accepts on a socket listening on the namespace's loopback, the run's
//! only way out. A client asks with HTTP: `CONNECT host:port` for a tunnel
//! (TLS and any protocol that proxies), or a plain request with an
//! absolute `http://` URL. Each destination is checked against the policy
//! before runws resolves its name and connects; a refusal is a `403` with a
//! one-line reason (and RFC 9209's `Proxy-Status`). In a tunnel, a TLS
//! ClientHello must name the host of the CONNECT line (on port 443 the
//! tunnel must be TLS); its bytes are read, never changed, and the rest is
//! moved with `splice` ([`super::pump`]). Plain HTTP is held
//! to the allowed name too ([`http`]): a plain request goes out with its
//! URL's host as `Host` and alone on its connection, and a tunnel to a name
//! on port 80 without TLS carries only requests naming that host. A name is
//! never let lead to this host's own addresses through DNS (`--resolve`
//! does that on purpose). One thread per connection, a second for the way
//! back; at most [`MAX_CLIENTS`] at once.

use std::io::{Read, Write};
use std::net::{IpAddr, Shutdown, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use super::http::{self, Framing};
use super::log::{Bytes, Log};
use super::policy::{self, Destination, Host, Policy};
use super::pump::{Way, count, pump, start_back};
use super::tls::{self, Hello};
use crate::manifest::net::NetRecord;

/// Connections served at once; more are answered `503`.
pub const MAX_CLIENTS: usize = 1024;
/// A request head is read within this time and size.
const HEAD_TIMEOUT: Duration = Duration::from_secs(30);
/// Connecting to a destination, every address it resolves to, within this.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// A TLS alert, fatal, `access_denied`: what a refused tunnel's client reads.
const ACCESS_DENIED: [u8; 7] = [0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x31];
/// A running proxy.
pub struct Proxy {
    log: Arc<Log>,
    writer: Option<std::thread::JoinHandle<()>>,
    listener: Arc<TcpListener>,
    stopping: Arc<AtomicBool>,
}

/// What the connections share.
struct Shared {
    policy: Policy,
    log: Arc<Log>,
    active: AtomicUsize,
}

impl Proxy {
    /// Serves `listener` under `policy`, logging into `log`, until
    /// [`Proxy::finish`].
    pub fn start(listener: TcpListener, policy: Policy, log: Arc<Log>) -> Proxy {
        room_for_clients();
        let listener = Arc::new(listener);
        let stopping = Arc::new(AtomicBool::new(false));
        let writer = Some(log.keep_written());
        let shared = Arc::new(Shared { policy, log: log.clone(), active: AtomicUsize::new(0) });
        let (l, stop) = (listener.clone(), stopping.clone());
        std::thread::spawn(move || accept_loop(&l, &stop, &shared));
        Proxy { log, writer, listener, stopping }
    }

    /// Stops accepting and returns the complete log (tunnels still open
    /// are counted as far as they went).
    pub fn finish(mut self) -> NetRecord {
        self.stopping.store(true, Ordering::SeqCst);
        // Wakes the accept call (EINVAL on a listening socket shut down).
        let _ = nix::sys::socket::shutdown(
            std::os::fd::AsRawFd::as_raw_fd(&*self.listener),
            nix::sys::socket::Shutdown::Read,
        );
        self.log.finish(self.writer.take())
    }
}

/// Descriptors one connection may hold: the client, the destination, a
/// second handle on each for the way back, and a pipe each way.
const FDS_PER_CLIENT: u64 = 8;

/// Raises runws's soft limit on open descriptors (often 1024) towards its
/// hard limit, so that [`MAX_CLIENTS`] connections fit with room to spare
/// for the rest of the run's recording. The command was started already
/// and keeps the limit it had.
fn room_for_clients() {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let want = MAX_CLIENTS as u64 * FDS_PER_CLIENT + 1024;
    let mut limit = getrlimit(Resource::Nofile);
    let raised = match (limit.current, limit.maximum) {
        (None, _) => return,
        (Some(cur), _) if cur >= want => return,
        (Some(_), None) => want,
        (Some(_), Some(max)) => want.min(max),
    };
    limit.current = Some(raised);
    let _ = setrlimit(Resource::Nofile, limit);
}

fn accept_loop(listener: &TcpListener, stopping: &AtomicBool, shared: &Arc<Shared>) {
    loop {
        let accepted = listener.accept();
        if stopping.load(Ordering::SeqCst) {
            return;
        }
        let client = match accepted {
            Ok((c, _)) => c,
            Err(e) if e.raw_os_error() == Some(nix::libc::EINVAL) => return,
            Err(_) => {
                // Out of descriptors or memory: the backlog waits a moment.
                std::thread::sleep(Duration::from_millis(10));
                continue;
            }
        };
        if shared.active.fetch_add(1, Ordering::SeqCst) >= MAX_CLIENTS {
            shared.active.fetch_sub(1, Ordering::SeqCst);
            let _ = refuse(
                &client,
                503,
                "Service Unavailable",
                "proxy_internal_error",
                "too many connections at once",
            );
            continue;
        }
        let s = shared.clone();
        let spawned = std::thread::Builder::new().stack_size(256 * 1024).spawn(move || {
            serve(client, &s);
            s.active.fetch_sub(1, Ordering::SeqCst);
        });
        if spawned.is_err() {
            shared.active.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

/// What a request head asks for.
enum Ask {
    Connect(Destination),
    /// A plain request: the destination, the head to send it, and how its
    /// body ends.
    Forward(Destination, Vec<u8>, Framing),
}

/// A refusal before anything was connected: status, RFC 9209 error type,
/// and the one-line reason.
struct Refusal {
    status: u16,
    phrase: &'static str,
    error: &'static str,
    why: String,
}

fn bad(why: impl Into<String>) -> Refusal {
    Refusal { status: 400, phrase: "Bad Request", error: "http_request_error", why: why.into() }
}

/// Serves one client connection to its end.
fn serve(client: TcpStream, shared: &Shared) {
    let _ = client.set_read_timeout(Some(HEAD_TIMEOUT));
    let _ = client.set_nodelay(true);
    let mut feed = http::Feed::new(Vec::new(), &client);
    let head = match feed.head() {
        Ok(Some(h)) => h,
        Ok(None) | Err(http::Stop::Ended) => return,
        Err(http::Stop::Refused(why)) => {
            let r = bad(why);
            let _ = refuse(&client, r.status, r.phrase, r.error, &r.why);
            return;
        }
    };
    let ask = match parse_head(&head) {
        Ok(a) => a,
        Err(r) => {
            let _ = refuse(&client, r.status, r.phrase, r.error, &r.why);
            return;
        }
    };
    let dest = match &ask {
        Ask::Connect(d) | Ask::Forward(d, _, _) => d.clone(),
    };
    let host = dest.host_text();
    if !shared.policy.allows(&dest) {
        let why = denial(&dest);
        shared.log.note(&host, dest.port, false, Some("not in the policy".into()));
        let _ = refuse(&client, 403, "Forbidden", "http_request_denied", &why);
        return;
    }
    let upstream = match connect(&dest, &shared.policy) {
        Ok(u) => u,
        Err(r) => {
            shared.log.note(&host, dest.port, r.status != 403, Some(r.why.clone()));
            let _ = refuse(&client, r.status, r.phrase, r.error, &r.why);
            return;
        }
    };
    let bytes = shared.log.note(&host, dest.port, true, None);
    let _ = upstream.set_nodelay(true);
    let _ = client.set_read_timeout(None);
    match ask {
        Ask::Forward(_, head, framing) => {
            let back = start_back(&client, &upstream, bytes.clone(), shared.log.clone());
            let counter = |n: usize| count(&bytes, &shared.log, n as u64, 0);
            // The one request this connection carries: its head and its
            // body, nothing the client sends after them.
            counter(head.len());
            let sent =
                (&upstream).write_all(&head).is_ok_and(|()| feed.body(framing, &upstream, &counter).is_ok());
            if !sent {
                let _ = client.shutdown(Shutdown::Both);
                let _ = upstream.shutdown(Shutdown::Both);
            }
            if let Some(b) = back {
                let _ = b.join();
            }
        }
        Ask::Connect(_) => {
            let first = feed.rest();
            if (&client).write_all(b"HTTP/1.1 200 Connection established\r\n\r\n").is_err() {
                return;
            }
            tunnel(client, upstream, first, &dest, bytes, shared);
        }
    }
}

/// The message of a destination the policy does not allow.
fn denial(d: &Destination) -> String {
    let host = d.host_text();
    let add =
        if policy::DEFAULT_PORTS.contains(&d.port) { host.clone() } else { format!("{host}:{}", d.port) };
    format!("`{host}:{}` is not allowed by --net allow (add `{add}` to allow it)", d.port)
}

/// Reads a request head with `httparse`.
fn parse_head(head: &[u8]) -> Result<Ask, Refusal> {
    let mut headers = [httparse::EMPTY_HEADER; 128];
    let mut req = httparse::Request::new(&mut headers);
    match req.parse(head) {
        Ok(httparse::Status::Complete(_)) => {}
        Ok(httparse::Status::Partial) => return Err(bad("an incomplete request head")),
        Err(e) => return Err(bad(format!("an unreadable request ({e})"))),
    }
    let (Some(method), Some(target), Some(version)) = (req.method, req.path, req.version) else {
        return Err(bad("an unreadable request line"));
    };
    if method == "CONNECT" {
        return policy::authority(target, None).map(Ask::Connect).map_err(bad);
    }
    let lower = target.get(..8).map(str::to_ascii_lowercase).unwrap_or_default();
    if lower.starts_with("https://") {
        return Err(bad("an https:// URL is asked for with CONNECT, not as a plain request"));
    }
    let Some(after) = lower.starts_with("http://").then(|| &target[7..]) else {
        return Err(bad(format!("`{target}` is not an absolute http:// URL (this is a proxy)")));
    };
    let split = after.find(['/', '?', '#']).unwrap_or(after.len());
    let (authority, path) = after.split_at(split);
    if authority.contains('@') {
        return Err(bad("a URL with credentials in it"));
    }
    let dest = policy::authority(authority, Some(80)).map_err(bad)?;
    let path = match path {
        "" => "/".to_string(),
        p if p.starts_with('/') => p.to_string(),
        p => format!("/{p}"),
    };
    // An offer of HTTP/2 in the clear (libcurl's, so cargo's and git's) is
    // optional: it is dropped, and the server answers in HTTP/1.1. Any
    // other upgrade would leave the connection carrying what the proxy
    // cannot read.
    let h2c_only =
        |v: &[u8]| String::from_utf8_lossy(v).split(',').all(|t| t.trim().eq_ignore_ascii_case("h2c"));
    if req.headers.iter().any(|h| h.name.eq_ignore_ascii_case("upgrade") && !h2c_only(h.value)) {
        return Err(bad("an Upgrade over plain HTTP (use TLS: https://, wss://)"));
    }
    let framing = http::framing(version, req.headers).map_err(bad)?;
    let mut out = format!("{method} {path} HTTP/1.{version}\r\n").into_bytes();
    // The server is told the URL's host, whatever `Host` the client wrote
    // (RFC 9112 section 3.2.2): that is the name the policy allowed.
    let host = match dest.port {
        80 => dest.host_text(),
        p => format!("{}:{p}", dest.host_text()),
    };
    out.extend_from_slice(format!("Host: {host}\r\n").as_bytes());
    for h in req.headers.iter() {
        let name = h.name.to_ascii_lowercase();
        let hop = matches!(
            name.as_str(),
            "host"
                | "connection"
                | "proxy-connection"
                | "proxy-authorization"
                | "proxy-authenticate"
                | "keep-alive"
                | "te"
                | "upgrade"
                | "http2-settings"
        );
        if hop {
            continue;
        }
        out.extend_from_slice(h.name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(h.value);
        out.extend_from_slice(b"\r\n");
    }
    // One request per connection: the next may name another host.
    out.extend_from_slice(b"Connection: close\r\n\r\n");
    Ok(Ask::Forward(dest, out, framing))
}

/// Answers a refusal and closes.
fn refuse(client: &TcpStream, status: u16, phrase: &str, error: &str, why: &str) -> std::io::Result<()> {
    let mut client = client;
    let line = format!("runws: {why}\n");
    let details = why.replace(['"', '\\'], "'");
    let reply = format!(
        "HTTP/1.1 {status} {phrase}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\
         Proxy-Status: runws; error={error}; details=\"{details}\"\r\nConnection: close\r\n\r\n{line}",
        line.len()
    );
    client.write_all(reply.as_bytes())?;
    let _ = client.shutdown(Shutdown::Write);
    Ok(())
}

/// Resolves (a `--resolve` pin first) and connects to `d`.
fn connect(d: &Destination, policy: &Policy) -> Result<TcpStream, Refusal> {
    let host = d.host_text();
    let addrs: Vec<SocketAddr> = match &d.host {
        Host::Addr(a) => vec![SocketAddr::new(*a, d.port)],
        Host::Name(n) | Host::Below(n) => match policy.pinned(n) {
            Some(a) => vec![SocketAddr::new(a, d.port)],
            None => match (n.as_str(), d.port).to_socket_addrs() {
                Ok(a) if policy.open => a.collect(),
                Ok(a) => {
                    // An answer from DNS is its owner's to choose: it does
                    // not lead to this host itself.
                    let found: Vec<SocketAddr> = a.collect();
                    let own = own_addresses();
                    let (local, far): (Vec<SocketAddr>, Vec<SocketAddr>) =
                        found.into_iter().partition(|a| host_local(a.ip(), own));
                    if let (Some(first), true) = (local.first(), far.is_empty()) {
                        return Err(Refusal {
                            status: 403,
                            phrase: "Forbidden",
                            error: "destination_ip_prohibited",
                            why: format!(
                                "`{host}` resolves to {}, an address of this host or of no host; \
                                 --resolve {host}={} reaches it",
                                first.ip(),
                                first.ip()
                            ),
                        });
                    }
                    far
                }
                Err(e) => {
                    return Err(Refusal {
                        status: 502,
                        phrase: "Bad Gateway",
                        error: "dns_error",
                        why: format!("`{host}` does not resolve: {e}"),
                    });
                }
            },
        },
    };
    let started = Instant::now();
    let mut last = None;
    for a in &addrs {
        let left = CONNECT_TIMEOUT.saturating_sub(started.elapsed());
        if left.is_zero() {
            break;
        }
        match TcpStream::connect_timeout(a, left) {
            Ok(s) => return Ok(s),
            Err(e) => last = Some(e),
        }
    }
    let (status, phrase, error, what) = match &last {
        Some(e) if e.kind() == std::io::ErrorKind::TimedOut => (
            504,
            "Gateway Timeout",
            "connection_timeout",
            format!("did not answer within {CONNECT_TIMEOUT:?}"),
        ),
        Some(e) => (502, "Bad Gateway", "connection_refused", format!("cannot be reached: {e}")),
        None => (502, "Bad Gateway", "dns_error", "resolves to no address".to_string()),
    };
    Err(Refusal { status, phrase, error, why: format!("`{host}:{}` {what}", d.port) })
}

/// Whether `a` leads to this host or nowhere: loopback, unspecified,
/// "this network", link-local (where cloud metadata services answer),
/// multicast, broadcast, or an address of one of this host's interfaces.
fn host_local(a: IpAddr, own: &[IpAddr]) -> bool {
    let a = match a {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(a, IpAddr::V4),
        v4 => v4,
    };
    own.contains(&a)
        || match a {
            IpAddr::V4(v4) => {
                v4.is_loopback()
                    || v4.is_unspecified()
                    || v4.is_link_local()
                    || v4.is_multicast()
                    || v4.is_broadcast()
                    || v4.octets()[0] == 0
            }
            IpAddr::V6(v6) => {
                v6.is_loopback()
                    || v6.is_unspecified()
                    || v6.is_multicast()
                    || (v6.segments()[0] & 0xffc0) == 0xfe80
                    || v6.to_ipv4().is_some_and(|v4| v4.is_loopback() || v4.is_unspecified())
            }
        }
}

/// The addresses of this host's interfaces (in runws's network namespace),
/// read once per run (a dump of every interface costs more than the rest
/// of a connection's set-up).
fn own_addresses() -> &'static [IpAddr] {
    static OWN: std::sync::OnceLock<Vec<IpAddr>> = std::sync::OnceLock::new();
    OWN.get_or_init(read_own_addresses)
}

fn read_own_addresses() -> Vec<IpAddr> {
    let Ok(ifs) = nix::ifaddrs::getifaddrs() else { return Vec::new() };
    ifs.filter_map(|i| {
        let a = i.address?;
        if let Some(v4) = a.as_sockaddr_in() {
            Some(IpAddr::V4(v4.ip()))
        } else {
            a.as_sockaddr_in6().map(|v6| IpAddr::V6(v6.ip()))
        }
    })
    .collect()
}

/// A CONNECT tunnel: the way back starts at once; the way out first reads
/// what a TLS client says its server is.
fn tunnel(
    client: TcpStream,
    upstream: TcpStream,
    mut first: Vec<u8>,
    d: &Destination,
    bytes: Option<Arc<Bytes>>,
    shared: &Shared,
) {
    let back = start_back(&client, &upstream, bytes.clone(), shared.log.clone());
    let _ = client.set_read_timeout(Some(HEAD_TIMEOUT));
    let gated = http::checked(d) && !shared.policy.open;
    let verdict = loop {
        let hello = tls::client_hello(&first);
        match hello {
            // A hello a plain HTTP server would skip as a bad request line,
            // and then read the request after it.
            _ if gated && first.first() == Some(&22) => {
                break Err("port 80 carries plain HTTP only (TLS goes to port 443)".to_string());
            }
            Hello::Partial if first.len() <= tls::MAX_HELLO + 1024 => {}
            Hello::Partial => break Err("a TLS hello too large to read".to_string()),
            Hello::NotTls if d.port == 443 => break Err("port 443 carries TLS only".to_string()),
            // Plain HTTP on port 80 of a name: every request must name it.
            Hello::NotTls => break Ok(gated),
            Hello::Malformed(why) => break Err(format!("an unreadable TLS hello: {why}")),
            Hello::NoName => match d.host {
                Host::Addr(_) => break Ok(false),
                _ => {
                    break Err(format!(
                        "the TLS hello names no server (the tunnel is to `{}`)",
                        d.host_text()
                    ));
                }
            },
            Hello::Name(n) => {
                let same = matches!((&d.host, policy::name(&n)), (Host::Name(h), Some(s)) if *h == s);
                if same {
                    break Ok(false);
                }
                break Err(format!("the TLS hello names `{}`, not `{}`", policy::shown(&n), d.host_text()));
            }
        }
        let mut chunk = [0u8; 4096];
        match (&client).read(&mut chunk) {
            Ok(0) | Err(_) if first.is_empty() => break Err(String::new()),
            Ok(0) => break Err("the client ended inside its TLS hello".into()),
            Ok(n) => first.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => break Err("the client sent no complete TLS hello in time".into()),
        }
    };
    match verdict {
        Err(why) => {
            if !why.is_empty() {
                if let Hello::Name(n) = tls::client_hello(&first) {
                    shared.log.note(&policy::shown(&n), d.port, false, Some(why.clone()));
                } else {
                    shared.log.note(&d.host_text(), d.port, false, Some(why.clone()));
                }
                let _ = (&client).write_all(&ACCESS_DENIED);
            }
            let _ = client.shutdown(Shutdown::Both);
            let _ = upstream.shutdown(Shutdown::Both);
        }
        Ok(true) => {
            let _ = client.set_read_timeout(None);
            gate(&client, &upstream, first, d, &bytes, shared);
        }
        Ok(false) => {
            let _ = client.set_read_timeout(None);
            count(&bytes, &shared.log, first.len() as u64, 0);
            if (&upstream).write_all(&first).is_ok() {
                pump(&client, &upstream, Way::Out, &bytes, &shared.log);
            } else {
                let _ = client.shutdown(Shutdown::Both);
            }
        }
    }
    if let Some(b) = back {
        let _ = b.join();
    }
}

/// The way out of a plain-text tunnel to a name on port 80: request by
/// request, each naming the tunnel's host (see [`http`]), each body passed
/// on as its framing says.
fn gate(
    client: &TcpStream,
    upstream: &TcpStream,
    first: Vec<u8>,
    d: &Destination,
    bytes: &Option<Arc<Bytes>>,
    shared: &Shared,
) {
    let counter = |n: usize| count(bytes, &shared.log, n as u64, 0);
    let mut feed = http::Feed::new(first, client);
    let refused = loop {
        let head = match feed.head() {
            Ok(Some(h)) => h,
            Ok(None) => {
                // The client is done: the server may still answer.
                let _ = upstream.shutdown(Shutdown::Write);
                return;
            }
            Err(http::Stop::Ended) => break None,
            Err(http::Stop::Refused(why)) => break Some((d.host_text(), why)),
        };
        let framing = match http::check_tunneled(&head, d) {
            Ok(f) => f,
            Err(named) => break Some(named),
        };
        if http::send(upstream, &head, &counter).is_err() {
            break None;
        }
        match feed.body(framing, upstream, &counter) {
            Ok(()) => {}
            Err(http::Stop::Ended) => break None,
            Err(http::Stop::Refused(why)) => break Some((d.host_text(), why)),
        }
    };
    if let Some((host, why)) = refused {
        shared.log.note(&host, d.port, false, Some(why));
    }
    let _ = client.shutdown(Shutdown::Both);
    let _ = upstream.shutdown(Shutdown::Both);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn forward(head: &str) -> Result<(Destination, String), String> {
        match parse_head(head.as_bytes()) {
            Ok(Ask::Forward(d, h, _)) => Ok((d, String::from_utf8(h).unwrap())),
            Ok(Ask::Connect(_)) => Err("connect".into()),
            Err(r) => Err(r.why),
        }
    }

    #[test]
    fn a_plain_request_is_rewritten_for_its_server() {
        let (d, h) = forward(
            "GET http://Pkgs.test:8080/simple/x/?a=1 HTTP/1.1\r\nHost: pkgs.test:8080\r\n\
             Proxy-Connection: keep-alive\r\nProxy-Authorization: Basic eA==\r\nConnection: keep-alive\r\n\
             Accept: */*\r\n\r\n",
        )
        .unwrap();
        assert_eq!((d.host_text(), d.port), ("pkgs.test".to_string(), 8080));
        assert_eq!(
            h,
            "GET /simple/x/?a=1 HTTP/1.1\r\nHost: pkgs.test:8080\r\nAccept: */*\r\nConnection: close\r\n\r\n"
        );
        let (d, h) = forward("GET http://a.test HTTP/1.0\r\n\r\n").unwrap();
        assert_eq!(d.port, 80);
        assert_eq!(h, "GET / HTTP/1.0\r\nHost: a.test\r\nConnection: close\r\n\r\n");
        let (_, h) = forward("GET http://a.test?q HTTP/1.1\r\nHost: a.test\r\n\r\n").unwrap();
        assert!(h.starts_with("GET /?q HTTP/1.1\r\n"), "{h}");
        // libcurl's offer of HTTP/2 in the clear (cargo sends it) is dropped;
        // a WebSocket upgrade is refused.
        let (_, h) = forward(
            "GET http://a.test/ HTTP/1.1\r\nHost: a.test\r\nConnection: Upgrade, HTTP2-Settings\r\n\
             Upgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQAoAAAAAIAAAAA\r\n\r\n",
        )
        .unwrap();
        assert_eq!(h, "GET / HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n\r\n");
        let e = forward("GET http://a.test/ HTTP/1.1\r\nUpgrade: websocket\r\n\r\n").unwrap_err();
        assert!(e.contains("an Upgrade over plain HTTP"), "{e}");
    }

    #[test]
    fn what_is_not_a_proxy_request_is_refused() {
        for (head, why) in [
            ("GET / HTTP/1.1\r\nHost: x\r\n\r\n", "not an absolute http:// URL"),
            ("GET https://a.test/ HTTP/1.1\r\n\r\n", "with CONNECT"),
            ("GET http://u:p@a.test/ HTTP/1.1\r\n\r\n", "credentials"),
            ("GET http://a b/ HTTP/1.1\r\n\r\n", "unreadable"),
            ("CONNECT a.test HTTP/1.1\r\n\r\n", "names no port"),
            ("CONNECT -x-:443 HTTP/1.1\r\n\r\n", "not a host name"),
            ("GET http://a.test:0/ HTTP/1.1\r\n\r\n", "not a port"),
        ] {
            let e = forward(head).unwrap_err();
            assert!(e.contains(why), "{head:?}: {e}");
        }
        assert!(matches!(parse_head(b"CONNECT a.test:443 HTTP/1.1\r\n\r\n"), Ok(Ask::Connect(_))));
    }

    /// An echo server on the loopback: each read written back at once.
    fn echo() -> u16 {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        std::thread::spawn(move || {
            for c in l.incoming() {
                let Ok(mut c) = c else { continue };
                let _ = c.set_nodelay(true);
                std::thread::spawn(move || {
                    let mut buf = [0u8; 4096];
                    while let Ok(n) = c.read(&mut buf) {
                        if n == 0 || c.write_all(&buf[..n]).is_err() {
                            break;
                        }
                    }
                });
            }
        });
        port
    }

    /// A tunnel moves each small write on as it comes, both ways: a TLS
    /// handshake or an HTTP/1.1 request on a kept connection waits for
    /// each answer. (Spliced with `SPLICE_F_MORE`, the kernel held every
    /// such write back for about 200 ms: 0.6 s for each HTTPS request of
    /// curl, pip, npm or cargo through the proxy, 0.05 s without it.)
    #[test]
    fn a_tunnel_passes_each_small_write_on_at_once() {
        let port = echo();
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let at = listener.local_addr().unwrap();
        let egress = super::super::Egress {
            policy: Policy {
                patterns: vec![policy::pattern(&format!("127.0.0.1:{port}")).unwrap()],
                ..Default::default()
            },
        };
        let proxy = Proxy::start(listener, egress.policy.clone(), Log::new(egress.record(at.port()), None));
        let mut c = TcpStream::connect(at).unwrap();
        c.set_nodelay(true).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        c.write_all(format!("CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\n").as_bytes()).unwrap();
        let mut reply = Vec::new();
        while !reply.ends_with(b"\r\n\r\n") {
            let mut b = [0u8; 1];
            c.read_exact(&mut b).unwrap();
            reply.push(b[0]);
        }
        assert!(reply.starts_with(b"HTTP/1.1 200 "), "{}", String::from_utf8_lossy(&reply));
        // A held write waits about 200 ms every time; a busy machine delays
        // some round trips but not all: the fastest of ten says which.
        let mut took = Vec::new();
        for i in 0..10u8 {
            let started = Instant::now();
            c.write_all(&[b'a' + i; 5]).unwrap();
            let mut back = [0u8; 5];
            c.read_exact(&mut back).unwrap();
            assert_eq!(back, [b'a' + i; 5]);
            took.push(started.elapsed());
        }
        let fastest = *took.iter().min().unwrap();
        assert!(fastest < Duration::from_millis(100), "each round trip through a tunnel was held: {took:?}");
        drop(c);
        let rec = proxy.finish();
        assert_eq!(rec.connections.len(), 1);
    }

    #[test]
    fn addresses_of_this_host_or_of_none_are_host_local() {
        let ip = |a: &str| a.parse::<IpAddr>().unwrap();
        for a in [
            "127.0.0.1",
            "127.9.9.9",
            "0.0.0.0",
            "0.1.2.3",
            "169.254.169.254",
            "224.0.0.1",
            "255.255.255.255",
            "::1",
            "::",
            "fe80::1",
            "ff02::1",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
        ] {
            assert!(host_local(ip(a), &[]), "{a}");
        }
        for a in ["192.0.2.7", "10.0.0.1", "2001:db8::1", "::ffff:192.0.2.7"] {
            assert!(!host_local(ip(a), &[]), "{a}");
        }
        assert!(host_local(ip("::ffff:192.0.2.7"), &[ip("192.0.2.7")]));
    }

    #[test]
    fn a_denial_names_what_would_allow_it() {
        let d = policy::authority("evil.test:443", None).unwrap();
        assert_eq!(denial(&d), "`evil.test:443` is not allowed by --net allow (add `evil.test` to allow it)");
        let d = policy::authority("evil.test:8443", None).unwrap();
        assert!(denial(&d).contains("add `evil.test:8443`"));
    }
}
