//! The command inside `--net allow` attacks runws's proxy: every way it
//! tries to reach what the policy does not allow, through requests the
//! proxy reads one way and a server another. Each destination is a server
//! of the test's own on the host's loopback.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::egress::{entry, net_of, through};
use crate::harness::*;
use crate::sandbox::{everyone, skip};

/// A lenient HTTP/1.1 server, as many are: it keeps every connection
/// alive, answers each request head it reads (skipping a body of a
/// `Content-Length`), and keeps every byte it was sent.
struct Lenient {
    port: u16,
    got: Arc<Mutex<Vec<u8>>>,
    /// Connections accepted, and those of them whose client has ended.
    conns: Arc<(AtomicUsize, AtomicUsize)>,
}

impl Lenient {
    fn start() -> Lenient {
        Lenient::on(Ipv4Addr::LOCALHOST, 0).unwrap()
    }

    fn on(addr: Ipv4Addr, port: u16) -> std::io::Result<Lenient> {
        let l = TcpListener::bind((addr, port))?;
        let port = l.local_addr()?.port();
        let got = Arc::new(Mutex::new(Vec::new()));
        let conns = Arc::new((AtomicUsize::new(0), AtomicUsize::new(0)));
        let (g, n) = (got.clone(), conns.clone());
        std::thread::spawn(move || {
            for c in l.incoming() {
                let Ok(c) = c else { continue };
                n.0.fetch_add(1, Ordering::SeqCst);
                let (g, n) = (g.clone(), n.clone());
                std::thread::spawn(move || {
                    lenient_one(c, &g);
                    n.1.fetch_add(1, Ordering::SeqCst);
                });
            }
        });
        Ok(Lenient { port, got, conns })
    }

    fn got(&self) -> String {
        String::from_utf8_lossy(&self.got.lock().unwrap()).to_string()
    }

    /// Connections accepted so far.
    fn accepted(&self) -> usize {
        self.conns.0.load(Ordering::SeqCst)
    }

    /// Waits (15s at most) until `n` connections in all were accepted and
    /// each of them has ended: all the proxy sent on them is in `got` then.
    /// (runws may return before the server has read what the proxy wrote
    /// last: the proxy cuts the client off as soon as it has written.)
    #[track_caller]
    fn settled(&self, n: usize) {
        let (accepted, ended) = (&self.conns.0, &self.conns.1);
        let done = wait_until(Duration::from_secs(15), || {
            let a = accepted.load(Ordering::SeqCst);
            a >= n && ended.load(Ordering::SeqCst) == a
        });
        assert!(
            done,
            "the server never saw all {n} connections end: {} accepted, {} ended",
            accepted.load(Ordering::SeqCst),
            ended.load(Ordering::SeqCst)
        );
    }
}

fn lenient_one(mut c: TcpStream, got: &Mutex<Vec<u8>>) {
    let _ = c.set_read_timeout(Some(Duration::from_secs(20)));
    let mut buf: Vec<u8> = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        while let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
            let len: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0);
            if buf.len() < end + 4 + len {
                break;
            }
            buf.drain(..end + 4 + len);
            if c.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nok\n").is_err() {
                return;
            }
        }
        match c.read(&mut chunk) {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                got.lock().unwrap().extend_from_slice(&chunk[..n]);
                buf.extend_from_slice(&chunk[..n]);
            }
        }
    }
}

/// A Python script that sends each of `sends` (name, bytes as a Python
/// literal) on a connection of its own to the proxy and prints what came
/// back, up to `\n===`: all until the proxy ends the connection, or, for a
/// name in `answers`, until that many of [`Lenient`]'s answers came (the
/// server keeps a connection open; the 20s timeout only guards a hang).
fn raw_script(sends: &[(&str, String)], answers: &[(&str, usize)]) -> String {
    let answers: Vec<String> = answers.iter().map(|(l, n)| format!("{l:?}: {n}")).collect();
    let mut s = format!(
        r#"python3 - <<'EOF'
import os, socket, time
p = int(os.environ["HTTP_PROXY"].rsplit(":", 1)[1])
ANSWERS = {{{}}}
"#,
        answers.join(", ")
    );
    s.push_str(
        r#"def go(label, data):
    s = socket.create_connection(("127.0.0.1", p), timeout=20)
    try:
        s.sendall(data)
    except OSError as e:
        print(label, "send failed", e)
    out = b""
    want = ANSWERS.get(label, 0)
    try:
        while not want or out.count(b"\r\n\r\nok\n") < want:
            d = s.recv(65536)
            if not d:
                break
            out += d
    except OSError as e:
        out += (" <%s>" % type(e).__name__).encode()
    s.close()
    print(label, repr(out[:400]))
    print("===")
"#,
    );
    for (label, data) in sends {
        s.push_str(&format!("go({label:?}, {data})\n"));
    }
    s.push_str("EOF\n");
    s
}

/// `hello(name, pad)` in Python: a TLS ClientHello naming `name`, its last
/// extension a padding of the bytes `pad`, in one record.
const HELLO_PY: &str = r#"
import struct
def hello(name, pad):
    sni = struct.pack("!HB H", len(name) + 3, 0, len(name)) + name
    exts = struct.pack("!HH", 0, len(sni)) + sni
    exts += struct.pack("!HH", 0x2b, 3) + b"\x02\x03\x04"
    exts += struct.pack("!HH", 21, len(pad)) + pad
    body = b"\x03\x03" + b"\x07" * 32 + b"\x00" + b"\x00\x02\x13\x01" + b"\x01\x00"
    body += struct.pack("!H", len(exts)) + exts
    msg = b"\x01" + struct.pack("!I", len(body))[1:] + body
    return b"\x16\x03\x01" + struct.pack("!H", len(msg)) + msg
"#;

/// A plain request is the only request of its connection, sent with the
/// URL's host as its `Host`: a `Host` header naming another site, a second
/// request pipelined after the first (after no body, after a
/// `Content-Length` body, after a chunked one), an `Upgrade` that would
/// keep the connection open, and a request whose framing a server could
/// read two ways never bring a request for another name to the allowed
/// server (a shared host or CDN serves whatever name `Host` says).
#[test]
fn a_plain_request_reaches_only_the_host_its_url_names() {
    for who in everyone() {
        if skip(who, "plain_host") {
            continue;
        }
        let env = Env::new();
        let web = Lenient::start();
        let p = web.port;
        let url = format!("http://web.test:{p}");
        let sends = vec![
            ("host", format!(r#"b"GET {url}/a HTTP/1.1\r\nHost: evil1.test\r\n\r\n""#)),
            (
                "pipelined",
                format!(
                    r#"b"GET {url}/b HTTP/1.1\r\nHost: web.test\r\n\r\nGET /b2 HTTP/1.1\r\nHost: evil2.test\r\n\r\n""#
                ),
            ),
            (
                "upgrade",
                format!(
                    r#"b"GET {url}/c HTTP/1.1\r\nConnection: keep-alive, Upgrade\r\nUpgrade: x\r\n\r\nGET /c2 HTTP/1.1\r\nHost: evil3.test\r\n\r\n""#
                ),
            ),
            (
                "after-length",
                format!(
                    r#"b"POST {url}/d HTTP/1.1\r\nContent-Length: 4\r\n\r\nbodyGET /d2 HTTP/1.1\r\nHost: evil4.test\r\n\r\n""#
                ),
            ),
            (
                "after-chunked",
                format!(
                    r#"b"POST {url}/e HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nbody\r\n0\r\n\r\nGET /e2 HTTP/1.1\r\nHost: evil5.test\r\n\r\n""#
                ),
            ),
            (
                "smuggled",
                format!(
                    r#"b"POST {url}/f HTTP/1.1\r\nContent-Length: 44\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /f2 HTTP/1.1\r\nHost: evil6.test\r\n\r\n""#
                ),
            ),
            (
                "absolute-second",
                format!(r#"b"GET {url}/g HTTP/1.1\r\n\r\nGET http://evil7.test/g2 HTTP/1.1\r\n\r\n""#),
            ),
        ];
        // Each request the proxy forwards is answered once; the server
        // keeps the connection open after it.
        let answers =
            ["host", "pipelined", "after-length", "after-chunked", "absolute-second"].map(|l| (l, 1));
        let out =
            through(&env, who, &format!("web.test:{p}"), &["web.test"], &[], &raw_script(&sends, &answers));
        out.ok();
        let got = web.got();
        assert!(!got.contains("evil"), "{who:?}: a request for another name reached the server:\n{got}");
        for path in ["/a", "/b", "/d", "/e", "/g"] {
            let line = format!("GET {path} HTTP/1.1\r\nHost: web.test:{p}\r\n");
            let post = format!("POST {path} HTTP/1.1\r\nHost: web.test:{p}\r\n");
            assert!(got.contains(&line) || got.contains(&post), "{who:?}: {path} missing:\n{got}");
        }
        // Each allowed request was answered; the refused ones say why.
        let text = out.stdout.clone();
        assert!(text.contains("host b'HTTP/1.1 200 OK"), "{text}");
        assert!(text.contains("an Upgrade over plain HTTP"), "{text}");
        assert!(text.contains("both Content-Length and Transfer-Encoding"), "{text}");
    }
}

/// A tunnel to an allowed name on port 80 that does not carry TLS carries
/// requests for that name only: a request naming another (its `Host`, its
/// URL) cuts the tunnel before it reaches the server, and is recorded as
/// denied under the name it gave; requests naming the tunnel's host go
/// through, one after another, bodies included.
#[test]
fn a_plain_text_tunnel_to_port_80_carries_requests_for_its_host_only() {
    // Port 80 of an address of its own on loopback (root only).
    let addr = Ipv4Addr::new(127, 0, 80, 1 + (std::process::id() % 200) as u8);
    let web = match Lenient::on(addr, 80) {
        Ok(w) => w,
        Err(e) => {
            eprintln!("skipped the port-80 tunnel test: cannot listen on {addr}:80: {e}");
            return;
        }
    };
    for who in everyone() {
        if skip(who, "tunnel_80") {
            continue;
        }
        web.got.lock().unwrap().clear();
        let before = web.accepted();
        let env = Env::new();
        let connect = r#"b"CONNECT web.test:80 HTTP/1.1\r\nHost: web.test:80\r\n\r\n""#;
        let sends = vec![
            (
                "good",
                format!(
                    r#"{connect} + b"GET /one HTTP/1.1\r\nHost: web.test\r\n\r\nPOST /two HTTP/1.1\r\nHost: WEB.test:80\r\nContent-Length: 3\r\n\r\nabcGET /three HTTP/1.1\r\nHost: web.test\r\nConnection: close\r\n\r\n""#
                ),
            ),
            ("host", format!(r#"{connect} + b"GET /x HTTP/1.1\r\nHost: evil1.test\r\n\r\n""#)),
            (
                "second",
                format!(
                    r#"{connect} + b"GET /y HTTP/1.1\r\nHost: web.test\r\n\r\nGET /y2 HTTP/1.1\r\nHost: evil2.test\r\n\r\n""#
                ),
            ),
            (
                "in-body",
                format!(
                    r#"{connect} + b"POST /z HTTP/1.1\r\nHost: web.test\r\nContent-Length: 2\r\n\r\nokGET /z2 HTTP/1.1\r\nHost: evil3.test\r\n\r\n""#
                ),
            ),
            ("url", format!(r#"{connect} + b"GET http://evil4.test/ HTTP/1.1\r\nHost: web.test\r\n\r\n""#)),
            ("nohost", format!(r#"{connect} + b"GET /evil5 HTTP/1.0\r\n\r\n""#)),
            // A TLS hello naming the tunnel's host, ending (in a padding
            // extension) as a request head does: a server skips it as a
            // bad request and reads the one after it.
            (
                "tls",
                format!(
                    r#"{connect} + hello(b"web.test", b"\r\n\r\n") + b"GET /x HTTP/1.1\r\nHost: evil6.test\r\n\r\n""#
                ),
            ),
        ];
        let resolve = format!("web.test={addr}");
        let script =
            raw_script(&sends, &[("good", 3)]).replacen("def go(", &format!("{HELLO_PY}\ndef go("), 1);
        let out = through(&env, who, "web.test", &[], &["--resolve", &resolve], &script);
        out.ok();
        // Every tunnel the proxy opened to the server has ended there: what
        // the server got is all it will get.
        let net = net_of(&env);
        let opened = entry(&net, "web.test", 80, true).unwrap_or_else(|| panic!("{net}"))["count"].as_u64();
        web.settled(before + opened.unwrap() as usize);
        let got = web.got();
        assert!(!got.contains("evil"), "{who:?}: a request for another name reached the server:\n{got}");
        for line in ["GET /one HTTP/1.1", "POST /two HTTP/1.1", "GET /three HTTP/1.1", "GET /y ", "POST /z "]
        {
            assert!(got.contains(line), "{who:?}: `{line}` missing:\n{got}");
        }
        let text = out.stdout.clone();
        assert!(
            text.contains("good b'HTTP/1.1 200 Connection established\\r\\n\\r\\nHTTP/1.1 200 OK"),
            "{text}"
        );
        let good = text.lines().find(|l| l.starts_with("good ")).unwrap_or_default();
        assert_eq!(good.matches("200 OK").count(), 3, "{text}");
        let denied = entry(&net, "evil1.test", 80, false).unwrap_or_else(|| panic!("{net}"));
        assert!(denied["why"].as_str().unwrap().contains("names `evil1.test`, not `web.test`"), "{denied}");
        assert!(entry(&net, "evil2.test", 80, false).is_some(), "{net}");
        assert!(entry(&net, "evil3.test", 80, false).is_some(), "{net}");
        let tls = entry(&net, "web.test", 80, false).unwrap_or_else(|| panic!("{net}"));
        assert!(tls["why"].as_str().unwrap().contains("port 80 carries plain HTTP only"), "{tls}");
    }
}

/// A name the policy allows leads nowhere on this host through DNS: when
/// it resolves to loopback (here through the host's own files, as a name
/// whose owner answers `127.0.0.1` would), the proxy refuses to connect
/// there instead of reaching the host's own services; `--resolve` pins it
/// there on purpose.
#[test]
fn an_allowed_name_that_resolves_to_this_host_does_not_reach_it() {
    for who in everyone() {
        if skip(who, "host_local") {
            continue;
        }
        let env = Env::new();
        let web = Lenient::start();
        let p = web.port;
        let script = format!(
            "curl -sS --max-time 5 --noproxy '' -x \"$HTTP_PROXY\" http://localhost:{p}/plain; echo \" plain=$?\"; \
             curl -sS --max-time 5 --noproxy '' -p -x \"$HTTP_PROXY\" http://localhost:{p}/tunnel; echo \" tunnel=$?\""
        );
        let out = through(&env, who, &format!("localhost:{p}"), &[], &[], &script);
        out.ok().stdout_has("resolves to ").stdout_has("an address of this host").stdout_lacks("ok\n");
        assert_eq!(web.got(), "", "{who:?}: the host's loopback was reached");
        let net = net_of(&env);
        let e = entry(&net, "localhost", p, false).unwrap_or_else(|| panic!("{net}"));
        assert_eq!(e["count"], 2, "{e}");
        // Pinned on purpose, it is reached.
        let pinned = through(&env, who, &format!("localhost:{p}"), &["localhost"], &[], &script);
        pinned.ok().stdout_has("ok\n plain=0");
        assert!(web.got().contains("GET /plain HTTP/1.1"), "{}", web.got());
    }
}

/// The record keeps where the command's bytes went: asking first for more
/// refused destinations than the record itemises does not push the one it
/// then reaches out of it into the uncounted rest.
#[test]
fn a_flood_of_refused_names_does_not_hide_the_destination_reached() {
    for who in everyone() {
        if skip(who, "log_flood") {
            continue;
        }
        let env = Env::new();
        let web = crate::egress::Web::start();
        web.put("/secret", "exfiltrated\n");
        let p = web.port;
        let script = format!(
            r#"python3 - <<'EOF'
import os, socket
p = int(os.environ["HTTP_PROXY"].rsplit(":", 1)[1])
for i in range(1100):
    s = socket.create_connection(("127.0.0.1", p), timeout=5)
    s.sendall(b"GET http://x%d.test/ HTTP/1.1\r\n\r\n" % i)
    s.recv(100)
    s.close()
EOF
curl -sS http://web.test:{p}/secret"#
        );
        let out = through(&env, who, &format!("web.test:{p}"), &["web.test"], &[], &script);
        out.ok().stdout_has("exfiltrated");
        let net = net_of(&env);
        let e = entry(&net, "web.test", p, true).unwrap_or_else(|| panic!("{who:?}: not itemised: {net}"));
        assert!(e["bytes_in"].as_u64().unwrap() > 10, "{e}");
        assert_eq!(net["connections"].as_array().unwrap().len(), 1000);
        assert_eq!(net["more"], 101, "{net}");
    }
}

/// As many tunnels at once as the proxy serves are served where runws
/// starts with the usual soft limit of 1024 open descriptors (each tunnel
/// holds several): none is refused with "Too many open files", and the
/// run's end is recorded.
#[test]
fn hundreds_of_tunnels_at_once_fit_under_a_soft_limit_of_1024_descriptors() {
    use std::os::unix::process::CommandExt;
    for who in everyone() {
        if skip(who, "fd_limit") {
            continue;
        }
        let env = Env::new();
        let web = Lenient::start();
        let p = web.port;
        let script = format!(
            r#"python3 - <<'EOF'
import os, socket
p = int(os.environ["HTTP_PROXY"].rsplit(":", 1)[1])
held, refused = [], []
for i in range(400):
    s = socket.create_connection(("127.0.0.1", p), timeout=10)
    s.sendall(b"CONNECT web.test:{p} HTTP/1.1\r\n\r\nhi")
    r = s.recv(200)
    (held if r.startswith(b"HTTP/1.1 200") else refused).append(r)
    held.append(s)
print("refused", len(refused), refused[:1])
EOF"#
        );
        let mut args: Vec<String> = ["run", "--sandbox", "--net"].map(String::from).to_vec();
        args.push(format!("allow=web.test:{p}"));
        args.extend(["--resolve".into(), "web.test=127.0.0.1".into(), "--".into(), "sh".into(), "-c".into()]);
        args.push(script);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let mut cmd = crate::sandbox::runws_as(&env, who, &args);
        // SAFETY: only setrlimit, async-signal-safe, between fork and exec.
        unsafe {
            cmd.pre_exec(|| {
                let (_, hard) = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)?;
                nix::sys::resource::setrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE, 1024, hard)?;
                Ok(())
            });
        }
        let out = Out::from(crate::sandbox::Retry::output_retrying(&mut cmd));
        out.ok().stdout_has("refused 0 []");
        let net = net_of(&env);
        assert_eq!(net["complete"], true);
        assert_eq!(entry(&net, "web.test", p, true).unwrap()["count"], 400, "{net}");
    }
}
