//! `--ping URL` against local HTTP servers (one that answers, one that
//! hangs, one that refuses, one that fails), and `--metrics-dir`.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::harness::{Env, wait_until};

/// One request a [`Server`] received: its request line and body.
#[derive(Debug, Clone)]
pub struct Seen {
    pub line: String,
    pub body: Vec<u8>,
}

/// How a [`Server`] answers.
#[derive(Clone, Copy)]
pub enum Answer {
    Status(u16),
    /// Accepts nothing: connections wait in the backlog, unanswered.
    Hang,
}

/// A local HTTP server on a thread, recording every request.
pub struct Server {
    pub port: u16,
    pub seen: Arc<Mutex<Vec<Seen>>>,
    _listener: Option<TcpListener>,
}

impl Server {
    pub fn start(answer: Answer) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let Answer::Status(status) = answer else {
            return Server { port, seen, _listener: Some(listener) };
        };
        let log = seen.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(conn) = conn else { continue };
                serve(conn, status, &log);
            }
        });
        Server { port, seen, _listener: None }
    }

    /// A port nothing listens on: connections are refused.
    pub fn refusing() -> Server {
        let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        Server { port, seen: Arc::new(Mutex::new(Vec::new())), _listener: None }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

fn serve(mut conn: TcpStream, status: u16, log: &Mutex<Vec<Seen>>) {
    conn.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        match conn.read(&mut chunk) {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
    let len: usize = head
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().parse().unwrap())
        })
        .unwrap_or(0);
    while buf.len() < head_end + len {
        match conn.read(&mut chunk) {
            Ok(0) | Err(_) => break,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
    let line = head.lines().next().unwrap_or_default().to_string();
    log.lock().unwrap().push(Seen { line, body: buf[head_end..].to_vec() });
    let _ = write!(conn, "HTTP/1.1 {status} X\r\nContent-Length: 2\r\nConnection: close\r\n\r\nOK");
}

fn pings(env: &Env, id: &str) -> Vec<serde_json::Value> {
    env.manifest(id)["pings"].as_array().cloned().unwrap_or_default()
}

#[test]
fn pings_start_then_success_with_the_run_id_and_the_captured_output() {
    let env = Env::new();
    let server = Server::start(Answer::Status(200));
    let url = server.url("/ping/abc");
    env.run(&["run", "--capture", "--ping", &url, "--", "sh", "-c", "echo hello; echo oops >&2"]).ok();
    let id = env.run_ids().pop().unwrap();
    let seen = server.seen();
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert_eq!(seen[0].line, format!("POST /ping/abc/start?rid={id} HTTP/1.1"));
    assert!(seen[0].body.is_empty());
    assert_eq!(seen[1].line, format!("POST /ping/abc?rid={id} HTTP/1.1"));
    assert_eq!(seen[1].body, b"hello\noops\n");
    let p = pings(&env, &id);
    assert_eq!(p.len(), 2, "{p:?}");
    assert_eq!(
        (p[0]["event"].as_str(), p[0]["ok"].as_bool(), p[0]["status"].as_u64()),
        (Some("start"), Some(true), Some(200))
    );
    assert_eq!((p[1]["event"].as_str(), p[1]["ok"].as_bool()), (Some("success"), Some(true)));
    // The URL is a credential: not recorded.
    assert!(!std::fs::read_to_string(env.run_dir(&id).join("manifest.json")).unwrap().contains("/ping/abc"));
}

#[test]
fn a_failure_pings_its_exit_code_and_a_run_id_that_is_no_uuid_is_not_sent() {
    let env = Env::new();
    let server = Server::start(Answer::Status(200));
    let url = server.url("/hc/");
    env.run(&["run", "--run-id", "nightly-1", "--ping", &url, "--", "sh", "-c", "echo x; exit 3"]).code(3);
    let seen = server.seen();
    let lines: Vec<&str> = seen.iter().map(|s| s.line.as_str()).collect();
    assert_eq!(lines, ["POST /hc/start HTTP/1.1", "POST /hc/3 HTTP/1.1"]);
    // Without --capture the body is empty.
    assert!(seen[1].body.is_empty());
    assert_eq!(pings(&env, "nightly-1")[1]["event"], "fail");
}

#[test]
fn a_hanging_server_neither_delays_the_command_nor_changes_its_exit_code() {
    let env = Env::new();
    let server = Server::start(Answer::Hang);
    let url = server.url("/p");
    let began = Instant::now();
    let out = env.run(&[
        "run",
        "--run-id",
        "r1",
        "--ping",
        &url,
        "--ping-timeout",
        "300ms",
        "--",
        "sh",
        "-c",
        "exit 5",
    ]);
    let took = began.elapsed();
    out.code(5).stderr_has("the `start` ping of run `r1` failed after 3 attempt(s): timed out");
    // Each ping is bounded: 3 attempts of 300ms and the pauses between.
    assert!(took < Duration::from_secs(8), "took {took:?}");
    let m = env.manifest("r1");
    assert_eq!(m["status"], "failed");
    assert_eq!(m["exit_code"], 5);
    // The command ran at once and its end was recorded before any ping ended.
    let at = |f: &str| humantime::parse_rfc3339(m[f].as_str().unwrap()).unwrap();
    assert!(at("finished_at").duration_since(at("started_at")).unwrap() < Duration::from_secs(1));
    let p = pings(&env, "r1");
    assert_eq!(p.len(), 2, "{p:?}");
    for ping in &p {
        assert_eq!(ping["ok"], false);
        assert_eq!(ping["attempts"], 3);
        assert!(ping["error"].as_str().unwrap().contains("timed out"), "{ping}");
    }
}

#[test]
fn a_refused_connection_or_a_failing_server_is_recorded_and_the_run_still_succeeds() {
    let env = Env::new();
    let refusing = Server::refusing();
    let began = Instant::now();
    env.run(&["run", "--run-id", "r1", "--ping", &refusing.url("/p"), "--", "true"])
        .ok()
        .stderr_has("cannot connect to 127.0.0.1");
    assert!(began.elapsed() < Duration::from_secs(5));
    let p = pings(&env, "r1");
    assert_eq!(p[1]["event"], "success");
    assert_eq!(p[1]["ok"], false);
    assert!(p[1]["error"].as_str().unwrap().contains("cannot connect"));

    let failing = Server::start(Answer::Status(503));
    env.run(&["run", "--run-id", "r2", "--ping", &failing.url("/p"), "--", "true"]).ok();
    // Tried again: three attempts each.
    assert!(wait_until(Duration::from_secs(5), || failing.seen().len() == 6), "{:?}", failing.seen());
    let p = pings(&env, "r2");
    assert_eq!((p[0]["status"].as_u64(), p[0]["attempts"].as_u64()), (Some(503), Some(3)));
}

#[test]
fn https_and_malformed_urls_are_refused_before_the_run_is_made() {
    let env = Env::new();
    for url in ["https://hc-ping.com/abc", "http://u:pw@h/x", "hc-ping.com/abc"] {
        env.run(&["run", "--ping", url, "--", "true"]).code(125).one_line_error().stderr_has("--ping");
    }
    env.run(&["run", "--ping", "https://hc-ping.com/abc", "--", "true"]).stderr_has("plain http://");
    env.run(&["run", "--metrics-dir", "missing", "--", "true"]).code(125).one_line_error();
    assert!(env.run_ids().is_empty());
}

#[test]
fn metrics_dir_gets_one_textfile_per_job_replaced_atomically() {
    let env = Env::new();
    let dir = env.path("metrics");
    std::fs::create_dir(&dir).unwrap();
    std::fs::write(env.path("in.csv"), "a,b\n1,2\n").unwrap();
    let m = dir.to_str().unwrap();
    env.run(&[
        "run",
        "--job",
        "nightly",
        "--metrics-dir",
        m,
        "--input",
        "in.csv",
        "--",
        "sh",
        "-c",
        "printf 12345 | runws put out",
    ])
    .ok();
    let text = std::fs::read_to_string(dir.join("runws_nightly.prom")).unwrap();
    for line in [
        "runws_last_run_exit_code{job=\"nightly\"} 0\n",
        "runws_last_run_success{job=\"nightly\"} 1\n",
        "runws_last_run_input_bytes{job=\"nightly\"} 8\n",
        "runws_last_run_output_bytes{job=\"nightly\"} 5\n",
        "# TYPE runws_last_run_duration_seconds gauge\n",
    ] {
        assert!(text.contains(line), "lacks {line:?}:\n{text}");
    }
    let stamp = text.lines().find(|l| l.starts_with("runws_last_run_timestamp_seconds")).unwrap();
    let secs: f64 = stamp.rsplit(' ').next().unwrap().parse().unwrap();
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64();
    assert!((now - secs).abs() < 60.0, "{stamp}");
    env.run(&["run", "--job", "nightly", "--metrics-dir", m, "--", "false"]).code(1);
    let text = std::fs::read_to_string(dir.join("runws_nightly.prom")).unwrap();
    assert!(text.contains("runws_last_run_success{job=\"nightly\"} 0\n"), "{text}");
    assert!(text.contains("runws_last_run_exit_code{job=\"nightly\"} 1\n"), "{text}");
    // Nothing else is left in the directory: no temp file.
    let names: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(names, ["runws_nightly.prom"]);
}

#[test]
fn a_command_cannot_forge_the_record_of_its_pings() {
    let env = Env::new();
    let forge = r#"sed -i '1s/^{/{"pings":[{"at":"x","attempts":1,"event":"success","ok":true}],/' "$RUNWS_DIR/manifest.json"; grep -q '"pings"' "$RUNWS_DIR/manifest.json""#;
    env.run(&["run", "--run-id", "r1", "--", "sh", "-c", forge]).ok();
    let m = env.manifest("r1");
    assert!(m.get("pings").is_none(), "{m}");
    assert!(m["restored"][0]["fields"].as_array().unwrap().iter().any(|f| f == "pings"), "{m}");
}

/// The end ping's body is read from the run's `logs/`, which the command can
/// rewrite: a log it replaced with a symlink to a file outside the run (one
/// only runws may read, as root) is never followed, so that file's bytes
/// never reach the monitor; the run still ends as the command did.
#[test]
fn a_log_replaced_by_a_symlink_never_sends_what_it_points_at() {
    let env = Env::new();
    let secret = env.path("secret");
    std::fs::write(&secret, "only-for-runws\n").unwrap();
    let server = Server::start(Answer::Status(200));
    let url = server.url("/p");
    let script = format!(
        "echo visible; cd \"$RUNWS_DIR/logs\" && rm -f stdout.log && ln -s '{}' stdout.log",
        secret.display()
    );
    env.run(&["run", "--capture", "--ping", &url, "--", "sh", "-c", &script]).ok();
    let seen = server.seen();
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert!(!String::from_utf8_lossy(&seen[1].body).contains("only-for-runws"), "{seen:?}");
}
