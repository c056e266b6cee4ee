//! `run --sandbox --net allow=PATTERNS` and `audit --net`: the command's
//! only way out is runws's proxy. Every destination is a server of the
//! test's own on the host's loopback, named through `--resolve`; no test
//! reaches beyond this machine. Each attack is made from inside, as root
//! and as an ordinary user (`nobody` when the tests run as root).

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::harness::*;
use crate::sandbox::{Retry, Who, everyone, runws_as, skip};

/// A static HTTP/1.1 server on the host's loopback: files by path, one
/// request per connection, and every request line it was sent.
pub struct Web {
    pub port: u16,
    pub seen: Arc<Mutex<Vec<String>>>,
    files: Arc<Mutex<Files>>,
}

/// What a [`Web`] serves: each file's body and `Content-Type`.
type Files = HashMap<String, (Vec<u8>, &'static str)>;

impl Web {
    pub fn start() -> Web {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let files: Arc<Mutex<Files>> = Arc::new(Mutex::new(HashMap::new()));
        let (s, f) = (seen.clone(), files.clone());
        std::thread::spawn(move || {
            for c in l.incoming() {
                let Ok(c) = c else { continue };
                let (s, f) = (s.clone(), f.clone());
                std::thread::spawn(move || serve_one(c, &s, &f));
            }
        });
        Web { port, seen, files }
    }

    pub fn put(&self, path: &str, body: impl Into<Vec<u8>>) {
        self.put_as(path, "application/octet-stream", body);
    }

    /// A file served with its own `Content-Type` (pip reads an index page
    /// only when it says `text/html`).
    pub fn put_as(&self, path: &str, content_type: &'static str, body: impl Into<Vec<u8>>) {
        self.files.lock().unwrap().insert(path.to_string(), (body.into(), content_type));
    }

    /// Every file under `dir`, served at `prefix` + its relative path.
    #[allow(dead_code)]
    pub fn put_tree(&self, prefix: &str, dir: &Path) {
        for rel in tree(dir) {
            let p = dir.join(&rel);
            if p.is_file() {
                self.put(&format!("{prefix}{rel}"), std::fs::read(&p).unwrap());
            }
        }
    }

    pub fn seen(&self) -> Vec<String> {
        self.seen.lock().unwrap().clone()
    }
}

fn serve_one(mut c: TcpStream, seen: &Mutex<Vec<String>>, files: &Mutex<Files>) {
    let _ = c.set_read_timeout(Some(Duration::from_secs(20)));
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
        match c.read(&mut chunk) {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
    let head = String::from_utf8_lossy(&buf).to_string();
    let line = head.lines().next().unwrap_or("").to_string();
    seen.lock().unwrap().push(line.clone());
    let mut parts = line.split(' ');
    let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let path = path.split('?').next().unwrap_or("");
    let body = files.lock().unwrap().get(path).cloned();
    let reply = match body {
        Some((b, kind)) => {
            let mut r = format!(
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nContent-Type: {kind}\r\nConnection: close\r\n\r\n",
                b.len()
            )
            .into_bytes();
            if method != "HEAD" {
                r.extend_from_slice(&b);
            }
            r
        }
        None => b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".to_vec(),
    };
    let _ = c.write_all(&reply);
}

/// `runws run --sandbox --net allow=ALLOW --resolve NAME=127.0.0.1 ... --
/// sh -c SCRIPT` as `who`, with `extra` options before `--`.
pub fn through(env: &Env, who: Who, allow: &str, names: &[&str], extra: &[&str], script: &str) -> Out {
    let mut args: Vec<String> =
        vec!["run".into(), "--sandbox".into(), "--net".into(), format!("allow={allow}")];
    for n in names {
        args.push("--resolve".into());
        args.push(format!("{n}=127.0.0.1"));
    }
    args.extend(extra.iter().map(|s| s.to_string()));
    args.extend(["--".into(), "sh".into(), "-c".into(), script.into()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    Out::from(runws_as(env, who, &args).output_retrying())
}

/// The `net` record of the last run.
pub fn net_of(env: &Env) -> serde_json::Value {
    let ids = env.run_ids();
    env.manifest(ids.last().unwrap())["net"].clone()
}

/// The record's entry for `host:port`, allowed or not.
pub fn entry<'a>(
    net: &'a serde_json::Value,
    host: &str,
    port: u16,
    allowed: bool,
) -> Option<&'a serde_json::Value> {
    net["connections"]
        .as_array()?
        .iter()
        .find(|c| c["host"] == host && c["port"] == port && c["allowed"] == allowed)
}

/// An allowed name is reached (through a plain request and its bytes
/// counted); a name the policy does not name is answered 403 with a
/// one-line reason naming what would allow it, and recorded as denied.
#[test]
fn an_allowed_name_is_reached_and_a_denied_one_refused_with_403_and_recorded() {
    for who in everyone() {
        if skip(who, "allowed_and_denied") {
            continue;
        }
        let env = Env::new();
        let web = Web::start();
        web.put("/hello.txt", "hello from the host\n");
        let p = web.port;
        let out = through(
            &env,
            who,
            &format!("web.test:{p}"),
            &["web.test", "other.test"],
            &[],
            &format!(
                "curl -sS http://web.test:{p}/hello.txt && \
                 curl -sS -o /dev/null -w 'code=%{{http_code}}\\n' http://other.test:{p}/hello.txt && \
                 curl -sS http://other.test:{p}/hello.txt"
            ),
        );
        out.ok().stdout_has("hello from the host").stdout_has("code=403").stdout_has(&format!(
            "runws: `other.test:{p}` is not allowed by --net allow (add `other.test:{p}` to allow it)"
        ));
        // The server saw the request for its own path, not a proxy's URL.
        assert!(web.seen().iter().any(|l| l == "GET /hello.txt HTTP/1.1"), "{:?}", web.seen());
        assert_eq!(web.seen().len(), 1, "the denied request reached the server: {:?}", web.seen());
        let net = net_of(&env);
        assert_eq!(net["policy"], serde_json::json!([format!("web.test:{p}")]));
        assert_eq!(net["complete"], true);
        let ok = entry(&net, "web.test", p, true).expect("allowed entry");
        assert_eq!(ok["count"], 1);
        assert!(ok["bytes_in"].as_u64().unwrap() > 20 && ok["bytes_out"].as_u64().unwrap() > 20, "{ok}");
        let denied = entry(&net, "other.test", p, false).expect("denied entry");
        assert_eq!(denied["count"], 2);
        // `show` prints both.
        let shown = env.run(&["show", "last"]);
        shown
            .ok()
            .stdout_has(&format!("allowed web.test:{p} 1x"))
            .stdout_has(&format!("denied  other.test:{p} 2x"));
    }
}

/// Nothing leaves but through the proxy: a raw TCP connect to the allowed
/// server's own address and port, to any other address, a UDP packet,
/// `--noproxy '*'` and a name resolved inside all fail; a CONNECT to a
/// denied name is refused before anything is connected.
#[test]
fn raw_sockets_udp_noproxy_and_hardcoded_addresses_all_fail() {
    for who in everyone() {
        if skip(who, "raw_sockets") {
            continue;
        }
        let env = Env::new();
        let web = Web::start();
        web.put("/x", "reached\n");
        let p = web.port;
        // An address of this host that is not loopback, when it has one.
        let outside = std::process::Command::new("hostname")
            .arg("-I")
            .output()
            .ok()
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .and_then(|s| s.split_whitespace().find(|a| !a.contains(':')).map(str::to_string))
            .unwrap_or_else(|| "192.0.2.1".into());
        let script = format!(
            r#"python3 - <<'EOF'
import socket
def tcp(host, port):
    s = socket.socket()
    s.settimeout(3)
    try:
        s.connect((host, port)); return "CONNECTED"
    except OSError as e:
        return "refused " + type(e).__name__
def udp(host):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.sendto(b"x", (host, 53)); return "SENT"
    except OSError as e:
        return "refused " + type(e).__name__
import os
proxy_port = int(os.environ["HTTP_PROXY"].rsplit(":", 1)[1].strip("/"))
# The proxy listens on loopback inside too, at a port of the kernel's
# choosing: should it be the server's, connecting there reaches the proxy.
print("tcp-loopback", tcp("127.0.0.1", {p}) if proxy_port != {p} else "refused (the proxy's own port)")
print("tcp-outside", tcp("{outside}", {p}))
print("tcp-public", tcp("192.0.2.1", 443))
print("udp-outside", udp("{outside}"))
print("udp-public", udp("192.0.2.1"))
try:
    socket.getaddrinfo("web.test", {p}); print("dns RESOLVED")
except OSError as e:
    print("dns refused")
EOF
curl -sS --noproxy '*' --max-time 5 http://web.test:{p}/x; echo "noproxy=$?"
curl -sS --max-time 5 -p -x "$HTTPS_PROXY" http://web.test:{p}/x; echo "connect-allowed=$?"
curl -sS --max-time 5 -p -x "$HTTPS_PROXY" http://{outside}:{p}/x; echo "connect-literal=$?"
"#
        );
        let out = through(&env, who, &format!("web.test:{p}"), &["web.test"], &[], &script);
        let text = out.stdout.clone();
        for line in ["tcp-loopback", "tcp-outside", "tcp-public", "udp-outside", "udp-public"] {
            let l = text
                .lines()
                .find(|l| l.starts_with(line))
                .unwrap_or_else(|| panic!("{line} missing: {text}"));
            assert!(l.contains("refused"), "{who:?}: {l}\n{text}");
        }
        assert!(text.contains("dns refused"), "{text}");
        assert!(!text.contains("noproxy=0"), "{text}");
        // The same server through the proxy (CONNECT) is reached; its
        // address as a literal is not in the policy.
        assert!(text.contains("reached\nconnect-allowed=0"), "{text}");
        assert!(!text.contains("connect-literal=0"), "{text}");
        let net = net_of(&env);
        assert!(entry(&net, &outside, p, false).is_some(), "{net}");
        assert_eq!(web.seen().len(), 1, "{:?}", web.seen());
    }
}

/// A raw TCP server on the host, counting what it was sent.
fn sink() -> (u16, Arc<Mutex<Vec<u8>>>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let got = Arc::new(Mutex::new(Vec::new()));
    let g = got.clone();
    std::thread::spawn(move || {
        for c in l.incoming() {
            let Ok(mut c) = c else { continue };
            let g = g.clone();
            std::thread::spawn(move || {
                let _ = c.set_read_timeout(Some(Duration::from_secs(10)));
                let mut buf = [0u8; 4096];
                while let Ok(n) = c.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    g.lock().unwrap().extend_from_slice(&buf[..n]);
                    let _ = c.write_all(b"ok");
                }
            });
        }
    });
    (port, got)
}

/// A TLS ClientHello that names `name`, as Python writes it (no
/// certificate is ever checked: the proxy decides on the hello alone).
fn hello_script(proxy_var: &str, host: &str, port: u16, sni: &str) -> String {
    format!(
        r#"python3 - <<'EOF'
import os, socket, ssl
p = os.environ["{proxy_var}"].rsplit(":", 1)
s = socket.create_connection((p[0].split("//")[1], int(p[1])), timeout=5)
s.sendall(b"CONNECT {host}:{port} HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n")
print("reply", s.recv(200).split(b"\r\n")[0].decode())
ctx = ssl.create_default_context()
ctx.check_hostname = False
ctx.verify_mode = ssl.CERT_NONE
try:
    t = ctx.wrap_socket(s, server_hostname="{sni}")
    print("handshake done")
except Exception as e:
    print("tls", type(e).__name__, e)
EOF
"#
    )
}

/// Domain fronting through an allowed name: a tunnel to an allowed host
/// whose TLS hello names another is cut before the hello reaches the
/// server (a TLS alert, `access_denied`) and recorded under the name the
/// hello gave; the same tunnel naming its own host goes through.
#[test]
fn a_tls_hello_naming_another_host_than_the_tunnel_is_refused() {
    for who in everyone() {
        if skip(who, "sni") {
            continue;
        }
        let env = Env::new();
        let (p, got) = sink();
        let out = through(
            &env,
            who,
            &format!("api.test:{p}"),
            &["api.test"],
            &[],
            &format!(
                "{}{}",
                hello_script("HTTPS_PROXY", "api.test", p, "evil.test"),
                hello_script("HTTPS_PROXY", "api.test", p, "API.test")
            ),
        );
        let text = out.stdout.clone();
        assert!(text.contains("reply HTTP/1.1 200 Connection established"), "{text}");
        assert!(text.contains("ALERT_ACCESS_DENIED") || text.contains("access denied"), "{text}");
        // What reached the server: only the second hello, naming api.test.
        let bytes = got.lock().unwrap().clone();
        assert!(!bytes.windows(9).any(|w| w == b"evil.test"), "the fronted hello reached the server");
        assert!(bytes.windows(8).any(|w| w == b"API.test"), "the matching hello never arrived");
        let net = net_of(&env);
        let denied = entry(&net, "evil.test", p, false).unwrap_or_else(|| panic!("{net}"));
        assert!(denied["why"].as_str().unwrap().contains("names `evil.test`, not `api.test`"), "{denied}");
        assert_eq!(entry(&net, "api.test", p, true).unwrap()["count"], 2);
    }
}

/// A real TLS server (`openssl s_server`) reached by name through the
/// proxy, as a user's `curl https://...` does: the proxy sees no plaintext
/// and needs no certificate.
#[test]
fn https_to_an_allowed_name_works_end_to_end() {
    let env = Env::new();
    let dir = env.path("tls");
    std::fs::create_dir_all(&dir).unwrap();
    let made = std::process::Command::new("openssl")
        .args(["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=secure.test"])
        .args(["-addext", "subjectAltName=DNS:secure.test"])
        .arg("-keyout")
        .arg(dir.join("key.pem"))
        .arg("-out")
        .arg(dir.join("cert.pem"))
        .output()
        .expect("openssl");
    assert!(made.status.success(), "{}", String::from_utf8_lossy(&made.stderr));
    let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let server = std::process::Command::new("openssl")
        .args(["s_server", "-quiet", "-www", "-accept"])
        .arg(port.to_string())
        .arg("-cert")
        .arg(dir.join("cert.pem"))
        .arg("-key")
        .arg(dir.join("key.pem"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Killed however the test ends.
    let _server = KillOnDrop(server);
    assert!(wait_until(Duration::from_secs(10), || TcpStream::connect(("127.0.0.1", port)).is_ok()));
    let ca = dir.join("cert.pem");
    std::fs::set_permissions(env.tmp.path(), std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let out = through(
        &env,
        Who::Me,
        &format!("secure.test:{port}"),
        &["secure.test"],
        &["--ro", dir.to_str().unwrap()],
        &format!("curl -sS --cacert {} https://secure.test:{port}/ | head -c 200", ca.display()),
    );
    out.ok().stdout_has("<HTML>");
    let net = net_of(&env);
    let e = entry(&net, "secure.test", port, true).unwrap_or_else(|| panic!("{net}"));
    assert!(e["bytes_in"].as_u64().unwrap() > 500, "{e}");
}

/// A child process killed and reaped when the test ends, failed or not.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Bad input is refused in one line, with exit 125, before any run exists.
#[test]
fn bad_policies_are_refused_before_anything_starts() {
    let env = Env::new();
    let policy = env.path("policy.txt");
    std::fs::write(&policy, "# the registry\npkgs.example.com\nbad pattern here\n").unwrap();
    let cases: Vec<(Vec<String>, &str)> = vec![
        (vec!["--sandbox".into(), "--net".into(), "allow=".into()], "names no pattern"),
        (vec!["--sandbox".into(), "--net".into(), "allow=https://x.test/".into()], "a URL; write its host"),
        (vec!["--sandbox".into(), "--net".into(), "allow=a.*.test".into()], "`*` stands only"),
        (vec!["--sandbox".into(), "--net".into(), "allow=a.test:99999".into()], "not a port"),
        (
            vec!["--sandbox".into(), "--net".into(), format!("allow=@{}", env.path("missing").display())],
            "cannot read the policy file",
        ),
        (vec!["--sandbox".into(), "--net".into(), format!("allow=@{}", policy.display())], "policy.txt:3:"),
        (vec!["--sandbox".into(), "--net".into(), "everything".into()], "is not a --net value"),
        (vec!["--net".into(), "allow=a.test".into()], "--net needs --sandbox"),
        (vec!["--net".into(), "none".into()], "--net needs --sandbox"),
        (
            vec!["--sandbox".into(), "--resolve".into(), "a.test=127.0.0.1".into()],
            "--resolve needs --net allow",
        ),
        (
            vec![
                "--sandbox".into(),
                "--net".into(),
                "allow=a.test".into(),
                "--resolve".into(),
                "a.test".into(),
            ],
            "not NAME=ADDRESS",
        ),
    ];
    for (opts, why) in cases {
        let mut args = vec!["run".to_string()];
        args.extend(opts.clone());
        args.extend(["--".into(), "true".into()]);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        env.run(&args).code(125).one_line_error().stderr_has(why);
        assert!(env.run_ids().is_empty(), "{opts:?} created a run");
    }
    env.run(&["audit", "--net", "none", "--", "true"])
        .code(125)
        .one_line_error()
        .stderr_has("takes --net alone");
    // A variable the proxy sets cannot be granted too.
    env.run(&[
        "run",
        "--sandbox",
        "--net",
        "allow=a.test",
        "--env",
        "HTTPS_PROXY=http://elsewhere:1",
        "--",
        "true",
    ])
    .code(125)
    .stderr_has("`HTTPS_PROXY` is set by --net");
}

/// Landlock cannot hold a command to one address: `--net allow` refuses it
/// rather than run without enforcement.
#[test]
fn the_landlock_backend_refuses_net_allow() {
    let env = Env::new();
    env.run(&["run", "--sandbox=landlock", "--net", "allow=a.test", "--", "true"])
        .code(125)
        .one_line_error()
        .stderr_has("--net allow needs the namespace sandbox");
}

/// The environment names the proxy for the tools that read it, and the
/// manifest records those names (their values are runws's own).
#[test]
fn the_proxy_variables_are_set_and_recorded() {
    let env = Env::new();
    let out = through(&env, Who::Me, "a.test", &[], &[], "env");
    out.ok();
    let text = out.stdout.clone();
    let net = net_of(&env);
    let proxy = net["proxy"].as_str().unwrap().to_string();
    assert!(proxy.starts_with("http://127.0.0.1:"), "{proxy}");
    for name in [
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "ALL_PROXY",
        "http_proxy",
        "https_proxy",
        "all_proxy",
        "npm_config_proxy",
        "npm_config_https_proxy",
        "CARGO_HTTP_PROXY",
    ] {
        assert!(text.lines().any(|l| l == format!("{name}={proxy}")), "{name} missing:\n{text}");
    }
    assert!(
        text.contains("NO_PROXY=localhost,127.0.0.1,::1\n")
            && text.contains("no_proxy=localhost,127.0.0.1,::1\n")
    );
    assert!(text.contains("NODE_USE_ENV_PROXY=1\n"));
    let m = env.manifest(env.run_ids().last().unwrap());
    let names: Vec<&str> = m["env"].as_array().unwrap().iter().map(|e| e["name"].as_str().unwrap()).collect();
    for name in ["HTTPS_PROXY", "NO_PROXY", "npm_config_proxy", "CARGO_HTTP_PROXY"] {
        assert!(names.contains(&name), "{name} not recorded: {names:?}");
    }
    assert_eq!(m["sandbox"]["net"], "allow");
}

/// Twenty sandboxed runs at once, each with a policy of its own: each
/// reaches its own name, is refused its neighbour's, and records only its
/// own connections.
#[test]
fn twenty_runs_at_once_each_see_only_their_own_policy() {
    let env = Env::new();
    let web = Web::start();
    web.put("/id", "served\n");
    let p = web.port;
    let mut children = Vec::new();
    for i in 0..20 {
        let next = (i + 1) % 20;
        let args: Vec<String> = vec![
            "run".into(),
            "--run-id".into(),
            format!("r{i:02}"),
            "--sandbox".into(),
            "--net".into(),
            format!("allow=h{i}.test:{p}"),
            "--resolve".into(),
            format!("h{i}.test=127.0.0.1"),
            "--resolve".into(),
            format!("h{next}.test=127.0.0.1"),
            "--".into(),
            "sh".into(),
            "-c".into(),
            format!(
                "curl -sS http://h{i}.test:{p}/id; curl -s -o /dev/null -w '%{{http_code}}\\n' http://h{next}.test:{p}/id"
            ),
        ];
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let mut c = env.cmd(&args);
        c.stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped());
        children.push((i, next, c.spawn().unwrap()));
    }
    for (i, next, c) in children {
        let out = Out::from(c.wait_with_output().unwrap());
        out.ok().stdout_has("served\n403");
        let net = env.manifest(&format!("r{i:02}"))["net"].clone();
        let conns = net["connections"].as_array().unwrap();
        assert_eq!(conns.len(), 2, "{net}");
        assert!(entry(&net, &format!("h{i}.test"), p, true).is_some(), "{net}");
        assert!(entry(&net, &format!("h{next}.test"), p, false).is_some(), "{net}");
    }
}

/// The log is written as the run goes: runws killed with SIGKILL leaves
/// what its proxy saw, and `show` prints it, saying the run's end was not
/// recorded with it.
#[test]
fn the_connection_log_survives_a_killed_runws() {
    let env = Env::new();
    let web = Web::start();
    web.put("/x", "x\n");
    let p = web.port;
    let mut child = env
        .cmd(&[
            "run",
            "--run-id",
            "killed",
            "--sandbox",
            "--net",
            &format!("allow=web.test:{p}"),
            "--resolve",
            "web.test=127.0.0.1",
            "--",
            "sh",
            "-c",
            &format!("curl -sS http://web.test:{p}/x; curl -s http://gone.test/; sleep 60"),
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let log = env.run_dir("killed").join("net.json");
    let seen_both = wait_until(Duration::from_secs(20), || {
        std::fs::read_to_string(&log).is_ok_and(|t| t.contains("gone.test") && t.contains("web.test"))
    });
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), nix::sys::signal::Signal::SIGKILL)
        .unwrap();
    let _ = child.wait();
    assert!(seen_both, "the log was not written as the run went");
    let shown = env.run(&["show", "killed"]);
    shown
        .ok()
        .stdout_has(&format!("allowed web.test:{p} 1x"))
        .stdout_has("denied  gone.test:80 1x")
        .stdout_has("as last written while the run went on");
}

/// `audit --net`: nothing enforced, every destination let through and
/// reported, with the `--net allow=` list that would allow exactly those.
#[test]
fn audit_net_reports_every_destination_and_the_policy_that_allows_them() {
    for who in everyone() {
        if skip(who, "audit_net") {
            continue;
        }
        let env = Env::new();
        let web = Web::start();
        web.put("/a", "a\n");
        let p = web.port;
        let host = std::process::Command::new("hostname").output().unwrap();
        let host = String::from_utf8_lossy(&host.stdout).trim().to_ascii_lowercase();
        if who == Who::Nobody {
            std::fs::create_dir_all(&env.root).unwrap();
        }
        let out = Out::from(
            runws_as(
                &env,
                who,
                &[
                    "audit",
                    "--net",
                    "--",
                    "sh",
                    "-c",
                    &format!("curl -sS http://{host}:{p}/a; curl -s http://nowhere.invalid/ ; true"),
                ],
            )
            .output_retrying(),
        );
        out.ok()
            .stdout_has("a\n")
            .stderr_has(&format!("reached {host}:{p} (1x"))
            .stderr_has("failed  nowhere.invalid:80")
            .stderr_has(&format!("to allow these: --net allow={host}:{p}\n"));
        let net = net_of(&env);
        assert_eq!(net["policy"], serde_json::json!(["*"]));
    }
}

/// A run recorded under a policy is replayed under the same one; a policy
/// in the record that does not read as one refuses the replay.
#[test]
fn a_replay_keeps_the_recorded_policy_and_refuses_a_forged_one() {
    let env = Env::new();
    let web = Web::start();
    web.put("/r", "r\n");
    let p = web.port;
    through(
        &env,
        Who::Me,
        &format!("web.test:{p}"),
        &["web.test"],
        &["--run-id", "orig"],
        &format!(
            "curl -sS http://web.test:{p}/r; curl -s -o /dev/null -w '%{{http_code}}' http://else.test:{p}/r"
        ),
    )
    .ok()
    .stdout_has("r\n403");
    env.run(&["replay", "orig"]).ok().stdout_has("r\n403");
    let replayed = net_of(&env);
    assert_eq!(replayed["policy"], serde_json::json!([format!("web.test:{p}")]));
    assert_eq!(replayed["resolve"], serde_json::json!(["web.test=127.0.0.1"]));
    // A record rewritten to allow anything is not a policy.
    let path = env.run_dir("orig").join("manifest.json");
    let mut m: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    m["net"]["policy"] = serde_json::json!(["*.test:1; rm -rf /"]);
    std::fs::write(&path, serde_json::to_vec(&m).unwrap()).unwrap();
    env.run(&["replay", "orig"]).code(125).stderr_has("recorded a network policy runws cannot use");
}
