//! Archives in an S3-compatible store: `seal --to s3://…`, the archive
//! store of `run --seal`, `verify` and `restore` of an object, `archives`,
//! and the reaper's reading of what a store holds. Against the server
//! `ci/s3.sh` starts (RUNWS_TEST_S3_ENDPOINT); the store is inspected and
//! tampered with by plain HTTP requests, as the server checks no
//! signatures.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::harness::*;

/// The test server, with one fresh bucket per test.
struct S3 {
    host: String,
    endpoint: String,
    bucket: String,
    key_id: String,
    secret: String,
}

fn s3() -> Option<S3> {
    if !cfg!(feature = "s3") {
        eprintln!("skipped: runws is built without the `s3` feature");
        return None;
    }
    let endpoint = match std::env::var("RUNWS_TEST_S3_ENDPOINT") {
        Ok(e) if !e.is_empty() => e,
        _ if std::env::var_os("RUNWS_TEST_S3_REQUIRED").is_some_and(|v| !v.is_empty()) => {
            panic!("RUNWS_TEST_S3_ENDPOINT not set, but RUNWS_TEST_S3_REQUIRED says an S3 server was started")
        }
        _ => {
            eprintln!("skipped: RUNWS_TEST_S3_ENDPOINT not set (ci/s3.sh start)");
            return None;
        }
    };
    let host = endpoint.strip_prefix("http://").unwrap().trim_end_matches('/').to_string();
    let bucket = format!("runws-{}", &uuid::Uuid::now_v7().simple().to_string()[16..]);
    // Throw-away keys made now: the server checks no signature.
    let key_id = format!("AKTEST{}", rand_hex(7).to_uppercase());
    let secret = rand_hex(20);
    let s = S3 { host, endpoint, bucket, key_id, secret };
    let (status, _) = s.http("PUT", &format!("/{}", s.bucket), b"");
    assert_eq!(status, 200, "create bucket");
    Some(s)
}

impl S3 {
    fn http(&self, method: &str, path: &str, body: &[u8]) -> (u16, Vec<u8>) {
        let mut c = TcpStream::connect(&self.host).expect("connect to the S3 server");
        write!(
            c,
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nContent-Length: {}\r\nConnection: close\r\n\
             Authorization: AWS4-HMAC-SHA256 Credential={}/20260101/us-east-1/s3/aws4_request, \
             SignedHeaders=host, Signature=0\r\n\r\n",
            self.host,
            body.len(),
            self.key_id
        )
        .unwrap();
        c.write_all(body).unwrap();
        let mut raw = Vec::new();
        c.read_to_end(&mut raw).unwrap();
        let split = raw.windows(4).position(|w| w == b"\r\n\r\n").expect("a response") + 4;
        let head = String::from_utf8_lossy(&raw[..split]).to_ascii_lowercase();
        let status = head.split_whitespace().nth(1).unwrap().parse().unwrap();
        let mut body = raw[split..].to_vec();
        if head.contains("transfer-encoding: chunked") {
            let mut out = Vec::new();
            let mut rest = &body[..];
            loop {
                let line_end = rest.windows(2).position(|w| w == b"\r\n").unwrap();
                let n = usize::from_str_radix(std::str::from_utf8(&rest[..line_end]).unwrap().trim(), 16)
                    .unwrap();
                if n == 0 {
                    break;
                }
                out.extend_from_slice(&rest[line_end + 2..line_end + 2 + n]);
                rest = &rest[line_end + 4 + n..];
            }
            body = out;
        }
        (status, body)
    }

    fn url(&self, prefix: &str) -> String {
        format!("s3://{}/{prefix}", self.bucket)
    }

    fn get(&self, key: &str) -> Option<Vec<u8>> {
        match self.http("GET", &format!("/{}/{key}", self.bucket), b"") {
            (200, body) => Some(body),
            (404, _) => None,
            (s, body) => panic!("GET {key}: {s} {}", String::from_utf8_lossy(&body)),
        }
    }

    fn put(&self, key: &str, body: &[u8]) {
        let (s, _) = self.http("PUT", &format!("/{}/{key}", self.bucket), body);
        assert_eq!(s, 200, "PUT {key}");
    }

    /// Every key in the bucket, sorted.
    fn keys(&self) -> Vec<String> {
        let (s, body) = self.http("GET", &format!("/{}?list-type=2", self.bucket), b"");
        assert_eq!(s, 200);
        let text = String::from_utf8(body).unwrap();
        let mut keys: Vec<String> =
            text.split("<Key>").skip(1).map(|k| k.split("</Key>").next().unwrap().to_string()).collect();
        keys.sort();
        keys
    }

    /// Multipart uploads begun and neither completed nor aborted.
    fn uploads_in_progress(&self) -> usize {
        let (_, body) = self.http("GET", &format!("/{}?uploads", self.bucket), b"");
        String::from_utf8_lossy(&body).matches("<UploadId>").count()
    }

    /// `runws ARGS` with this store's endpoint and keys in the environment.
    fn cmd(&self, env: &Env, args: &[&str]) -> Command {
        let mut c = env.cmd(args);
        c.env("AWS_ACCESS_KEY_ID", &self.key_id)
            .env("AWS_SECRET_ACCESS_KEY", &self.secret)
            .env("AWS_REGION", "us-east-1")
            .env("AWS_ENDPOINT_URL", &self.endpoint);
        c
    }

    fn run(&self, env: &Env, args: &[&str]) -> Out {
        Out::from(self.cmd(env, args).output().unwrap())
    }
}

/// `2n` hex digits from the kernel's random source.
fn rand_hex(n: usize) -> String {
    let mut b = vec![0u8; n];
    std::fs::File::open("/dev/urandom").unwrap().read_exact(&mut b).unwrap();
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

fn token() -> String {
    format!("{}{}", "ghp_", rand_hex(18))
}

#[test]
fn a_seal_to_a_bucket_places_archive_checksum_and_receipt_once() {
    let Some(s3) = s3() else { return };
    let env = Env::new();
    env.sh("r1", "echo report > \"$RUNWS_DIR/outputs/report.txt\"").ok();
    let to = s3.url("evidence/ci");
    s3.run(&env, &["seal", "r1", "--to", &to]).ok().stderr_has("sealed run r1 into s3://");
    assert_eq!(
        s3.keys(),
        ["evidence/ci/r1.receipt.json", "evidence/ci/r1.tar.zst", "evidence/ci/r1.tar.zst.sha256"],
        "the archive, the line sha256sum -c reads, and the receipt"
    );
    let m = env.manifest("r1");
    let sha = m["checkpoint"]["archive_sha256"].as_str().unwrap().to_string();
    assert_eq!(m["checkpoint"]["source"], "receipt");
    assert_eq!(m["checkpoint"]["archive"], format!("{to}/r1.tar.zst"));
    let line = String::from_utf8(s3.get("evidence/ci/r1.tar.zst.sha256").unwrap()).unwrap();
    assert_eq!(line, format!("{sha}  r1.tar.zst\n"));
    let receipt: serde_json::Value =
        serde_json::from_slice(&s3.get("evidence/ci/r1.receipt.json").unwrap()).unwrap();
    assert_eq!(receipt["source"], "receipt");
    assert_eq!(receipt["archive_sha256"], sha);
    // The keys are never recorded.
    let manifest = std::fs::read_to_string(env.run_dir("r1").join("manifest.json")).unwrap();
    for text in [&manifest, &receipt.to_string()] {
        assert!(!text.contains(&s3.secret) && !text.contains(&s3.key_id));
    }

    // A second seal of the same run is refused and overwrites nothing.
    let before = s3.get("evidence/ci/r1.tar.zst").unwrap();
    s3.run(&env, &["seal", "r1", "--to", &to]).code(125).stderr_has("already exists").one_line_error();
    assert_eq!(s3.get("evidence/ci/r1.tar.zst").unwrap(), before);

    // Verified and restored from the store.
    let url = format!("{to}/r1.tar.zst");
    s3.run(&env, &["verify", &url]).ok().stdout_has(&format!("sha256:{sha}"));
    let dir = env.path("restored");
    s3.run(&env, &["restore", &url, "--to", dir.to_str().unwrap()]).ok().stderr_has("scan clean");
    assert_eq!(std::fs::read_to_string(dir.join("outputs/report.txt")).unwrap(), "report\n");
    // Nothing of the download stays behind.
    assert_eq!(std::fs::read_dir(env.root.join("uploads")).unwrap().count(), 0);
}

#[test]
fn a_secret_sends_the_archive_to_the_buckets_quarantine_which_restores() {
    let Some(s3) = s3() else { return };
    let env = Env::new();
    let t = token();
    env.sh("r1", &format!("echo 'token {t}' > \"$RUNWS_DIR/outputs/leak.txt\"")).ok();
    let to = s3.url("p");
    s3.run(&env, &["seal", "r1", "--to", &to]).code(80).stderr_has("quarantine");
    let keys = s3.keys();
    assert_eq!(
        keys,
        ["p/quarantine/r1.receipt.json", "p/quarantine/r1.tar.zst", "p/quarantine/r1.tar.zst.sha256"]
    );
    let m = env.manifest("r1");
    assert_eq!(m["checkpoint"]["source"], "quarantine");
    assert_eq!(m["checkpoint"]["archive"], format!("{to}/quarantine/r1.tar.zst"));
    // A quarantined archive restores, its findings listed.
    let dir = env.path("q");
    let out =
        s3.run(&env, &["restore", &format!("{to}/quarantine/r1.tar.zst"), "--to", dir.to_str().unwrap()]);
    out.ok().stderr_has("from a quarantine archive").stderr_has("secret found");
    assert!(!out.stderr.contains(&t), "a finding never shows the secret");
    assert!(dir.join("outputs/leak.txt").exists());
    // Another quarantine of the same run takes the next name.
    s3.run(&env, &["seal", "r1", "--to", &to]).code(80);
    assert!(s3.keys().contains(&"p/quarantine/r1.1.tar.zst".to_string()), "{:?}", s3.keys());
}

#[test]
fn a_wrong_checksum_object_refuses_verify_and_restore_and_leaves_dir_empty() {
    let Some(s3) = s3() else { return };
    let env = Env::new();
    env.sh("r1", "echo data > \"$RUNWS_DIR/outputs/a.txt\"").ok();
    s3.run(&env, &["seal", "r1", "--to", &s3.url("p")]).ok();
    let url = s3.url("p/r1.tar.zst");
    s3.put("p/r1.tar.zst.sha256", format!("{}  r1.tar.zst\n", "0".repeat(64)).as_bytes());
    s3.run(&env, &["verify", &url]).code(4).stderr_has("does not match");
    let dir = env.path("out");
    s3.run(&env, &["restore", &url, "--to", dir.to_str().unwrap()]).code(4).one_line_error();
    assert!(!dir.exists(), "nothing extracted");
    // A checksum naming another file, and none at all.
    s3.put("p/r1.tar.zst.sha256", format!("{}  other.tar.zst\n", "0".repeat(64)).as_bytes());
    s3.run(&env, &["restore", &url, "--to", dir.to_str().unwrap()]).code(4).stderr_has("names another file");
    s3.run(&env, &["verify", &s3.url("p/none.tar.zst")]).code(125).stderr_has("no archive");
    // An object that is no archive at all: the error names the URL.
    let junk = b"not an archive at all";
    s3.put("p/junk.tar.zst", junk);
    s3.put("p/junk.tar.zst.sha256", format!("{}  junk.tar.zst\n", sha256_hex(junk)).as_bytes());
    let out = s3.run(&env, &["restore", &s3.url("p/junk.tar.zst"), "--to", dir.to_str().unwrap()]);
    out.code(125).stderr_has(&s3.url("p/junk.tar.zst")).one_line_error();
    assert!(!out.stderr.contains("uploads"), "{}", out.stderr);
    s3.put("p/lone.tar.zst", b"no checksum beside it");
    s3.run(&env, &["verify", &s3.url("p/lone.tar.zst")]).code(4).stderr_has("is missing");
    assert!(!dir.exists());
    assert_eq!(std::fs::read_dir(env.root.join("uploads")).unwrap().count(), 0);
}

#[test]
fn a_killed_upload_leaves_nothing_under_the_real_name() {
    let Some(s3) = s3() else { return };
    let env = Env::new();
    // Incompressible, and over the single-PUT size: a multipart upload.
    env.sh("big", "head -c 40000000 /dev/urandom > \"$RUNWS_DIR/outputs/blob\"").ok();
    let to = s3.url("p");
    let mut child =
        s3.cmd(&env, &["seal", "big", "--to", &to]).env("RUNWS_S3_MULTIPART_FROM", "32MiB").spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while s3.uploads_in_progress() == 0 {
        assert!(child.try_wait().unwrap().is_none(), "the seal ended before its upload was seen");
        assert!(Instant::now() < deadline, "no upload began");
        std::thread::sleep(Duration::from_millis(5));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let keys = s3.keys();
    assert!(!keys.iter().any(|k| k.starts_with("p/big")), "nothing under the real name: {keys:?}");
    // The next seal succeeds, in parts too, and removes what the killed
    // one staged.
    Out::from(
        s3.cmd(&env, &["seal", "big", "--to", &to]).env("RUNWS_S3_MULTIPART_FROM", "32MiB").output().unwrap(),
    )
    .ok();
    assert_eq!(s3.uploads_in_progress(), 1, "only the killed upload is left in progress");
    assert!(!s3.keys().iter().any(|k| k.contains(".staging")), "{:?}", s3.keys());
    assert!(s3.keys().contains(&"p/big.tar.zst".to_string()));
    assert_eq!(std::fs::read_dir(env.root.join("uploads")).unwrap().count(), 0, "staging swept");
    let dir = env.path("out");
    s3.run(&env, &["restore", &s3.url("p/big.tar.zst"), "--to", dir.to_str().unwrap()]).ok();
    assert_eq!(std::fs::metadata(dir.join("outputs/blob")).unwrap().len(), 40_000_000);
}

#[test]
fn run_seal_uses_the_archive_store_by_job_and_archives_lists_it() {
    let Some(s3) = s3() else { return };
    let env = Env::new();
    let store = s3.url("fleet");
    let out = Out::from(
        s3.cmd(&env, &["run", "--run-id", "n1", "--job", "nightly", "--seal", "--", "true"])
            .env("RUNWS_ARCHIVE_STORE", &store)
            .output()
            .unwrap(),
    );
    out.ok();
    assert!(s3.keys().contains(&"fleet/nightly/n1.tar.zst".to_string()), "{:?}", s3.keys());
    s3.run(
        &env,
        &["run", "--run-id", "n2", "--job", "nightly", "--seal", "--archive-store", &store, "--", "true"],
    )
    .ok();
    let listed = s3.run(&env, &["archives", "--archive-store", &store, "--json"]);
    let v: Vec<serde_json::Value> = serde_json::from_str(&listed.ok().stdout).unwrap();
    assert_eq!(v.len(), 2, "{v:?}");
    assert_eq!(
        (v[0]["job"].as_str(), v[0]["run"].as_str(), v[0]["quarantine"].as_bool()),
        (Some("nightly"), Some("n1"), Some(false))
    );
    s3.run(&env, &["archives", "n2", "--archive-store", &store]).ok().stdout_has("fleet/nightly/n2.tar.zst");
    s3.run(&env, &["archives", "n3", "--archive-store", &store]).code(1).stderr_has("no archive");
    // `--to` wins over the store.
    s3.run(
        &env,
        &[
            "run",
            "--run-id",
            "n3",
            "--seal",
            "--to",
            &s3.url("elsewhere"),
            "--archive-store",
            &store,
            "--",
            "true",
        ],
    )
    .ok();
    assert!(s3.keys().contains(&"elsewhere/n3.tar.zst".to_string()));
}

#[test]
fn an_unreachable_store_saves_nothing_holds_the_run_and_says_why() {
    let Some(s3) = s3() else { return };
    let env = Env::new();
    env.sh("r1", "true").ok();
    let out = Out::from(
        s3.cmd(&env, &["seal", "r1", "--to", &s3.url("p")])
            .env("AWS_ENDPOINT_URL", "http://127.0.0.1:1")
            .output()
            .unwrap(),
    );
    out.code(81).stderr_has("NOTHING SAVED").stderr_has("onnection refused");
    assert!(!out.stderr.contains(&s3.secret));
    let m = env.manifest("r1");
    assert_eq!(m["checkpoint"]["source"], "none");
    assert_eq!(m["held"], true);
}

#[test]
fn credentials_come_from_a_profile_and_their_absence_is_said() {
    let Some(s3) = s3() else { return };
    let env = Env::new();
    env.sh("r1", "true").ok();
    let to = s3.url("p");
    let mut bare = env.cmd(&["seal", "r1", "--to", &to]);
    bare.env("AWS_ENDPOINT_URL", &s3.endpoint);
    Out::from(bare.output().unwrap()).code(125).stderr_has("no AWS credentials").one_line_error();
    assert!(s3.keys().is_empty());

    let aws = env.home.join(".aws");
    std::fs::create_dir_all(&aws).unwrap();
    std::fs::write(
        aws.join("credentials"),
        format!("[ci]\naws_access_key_id = {}\naws_secret_access_key = {}\n", s3.key_id, s3.secret),
    )
    .unwrap();
    std::fs::write(
        aws.join("config"),
        format!("[profile ci]\nregion = us-east-1\nendpoint_url = {}\n", s3.endpoint),
    )
    .unwrap();
    let mut profiled = env.cmd(&["seal", "r1", "--to", &to]);
    profiled.env("AWS_PROFILE", "ci");
    Out::from(profiled.output().unwrap()).ok();
    assert!(s3.keys().contains(&"p/r1.tar.zst".to_string()));
    let mut missing = env.cmd(&["verify", &s3.url("p/r1.tar.zst")]);
    missing.env("AWS_PROFILE", "nope");
    Out::from(missing.output().unwrap()).code(125).stderr_has("profile `nope`");
}

#[test]
fn archive_store_urls_are_refused_before_anything_runs() {
    let env = Env::new();
    for (url, says) in [
        ("s3://Bad_Bucket/p", "not a bucket name"),
        ("s3://bucket/../p", "segment"),
        ("gs://bucket/p", "not gs://"),
    ] {
        env.run(&["run", "--seal", "--to", url, "--", "sh", "-c", "touch ran"]).code(125).stderr_has(says);
        assert!(!env.path("ran").exists(), "{url}: the command ran");
    }
    let out = env.run(&["run", "--seal", "--archive-store", "s3://AKIAKEY:hunter2@bucket/p", "--", "true"]);
    out.code(125).stderr_has("credentials");
    assert!(!out.stderr.contains("hunter2"), "a key in a URL is never echoed");
}

#[test]
fn the_reaper_counts_a_listed_archive_as_evidence_and_waits_out_an_outage() {
    let Some(s3) = s3() else { return };
    let env = Env::new();
    let store = s3.url("st");
    // A run whose seal saved nothing (the store was down): held.
    env.run(&["run", "--run-id", "h1", "--job", "j", "--", "true"]).ok();
    let out = Out::from(
        s3.cmd(&env, &["seal", "h1", "--archive-store", &store])
            .env("AWS_ENDPOINT_URL", "http://127.0.0.1:1")
            .output()
            .unwrap(),
    );
    out.code(81);
    std::thread::sleep(Duration::from_millis(20));
    // Held: no store named, or a store without its archive.
    s3.run(&env, &["reap", "--keep", "1ms"]).ok();
    assert!(env.run_dir("h1").exists());
    s3.run(&env, &["reap", "--keep", "1ms", "--archive-store", &store]).ok();
    assert!(env.run_dir("h1").exists());
    // An object merely named after it is no evidence: the archive needs
    // its receipt and a `.sha256` its bytes match.
    s3.put("st/j/h1.tar.zst", b"sealed elsewhere");
    s3.run(&env, &["reap", "--keep", "1ms", "--archive-store", &store]).ok();
    assert!(env.run_dir("h1").exists(), "an archive alone is not a seal");
    let receipt = |sha: &str| {
        serde_json::json!({"run_id": "h1", "archive": "h1.tar.zst", "archive_sha256": sha})
            .to_string()
            .into_bytes()
    };
    let zeros = "0".repeat(64);
    s3.put("st/j/h1.tar.zst.sha256", format!("{zeros}  h1.tar.zst\n").as_bytes());
    s3.put("st/j/h1.receipt.json", &receipt(&zeros));
    s3.run(&env, &["reap", "--keep", "1ms", "--archive-store", &store]).ok();
    assert!(env.run_dir("h1").exists(), "an archive its .sha256 does not match is not a seal");
    // A receipt that does not name this run, this archive and its digest.
    let sha = sha256_hex(b"sealed elsewhere");
    s3.put("st/j/h1.tar.zst.sha256", format!("{sha}  h1.tar.zst\n").as_bytes());
    s3.put("st/j/h1.receipt.json", b"{}");
    s3.run(&env, &["reap", "--keep", "1ms", "--archive-store", &store]).ok();
    assert!(env.run_dir("h1").exists(), "a receipt naming nothing is not a seal's");
    // Its whole seal reached the store all the same (say, runws died
    // before recording it): an outage while listing keeps the run...
    s3.put("st/j/h1.receipt.json", &receipt(&sha));
    let out = Out::from(
        s3.cmd(&env, &["reap", "--keep", "1ms", "--archive-store", &store])
            .env("AWS_ENDPOINT_URL", "http://127.0.0.1:1")
            .output()
            .unwrap(),
    );
    out.ok().stdout_has("for a later reap to decide");
    assert!(env.run_dir("h1").exists());
    assert_eq!(env.manifest("h1")["held"], true, "nothing recorded as missing");
    // ...and a store that answers lets it go, saying where its evidence is.
    s3.run(&env, &["reap", "--keep", "1ms", "--archive-store", &store]).ok().stdout_has("st/j/h1.tar.zst");
    assert!(!env.run_dir("h1").exists());

    // Evidence in the job's quarantine (a later one, `.1`) counts too.
    env.run(&["run", "--run-id", "h2", "--job", "j", "--", "true"]).ok();
    Out::from(
        s3.cmd(&env, &["seal", "h2", "--archive-store", &store])
            .env("AWS_ENDPOINT_URL", "http://127.0.0.1:1")
            .output()
            .unwrap(),
    )
    .code(81);
    let bytes = b"quarantined elsewhere";
    let sha = sha256_hex(bytes);
    s3.put("st/j/quarantine/h2.1.tar.zst", bytes);
    s3.put("st/j/quarantine/h2.1.tar.zst.sha256", format!("{sha}  h2.1.tar.zst\n").as_bytes());
    let receipt = serde_json::json!({"run_id": "h2", "archive": "h2.1.tar.zst", "archive_sha256": sha});
    s3.put("st/j/quarantine/h2.1.receipt.json", receipt.to_string().as_bytes());
    std::thread::sleep(Duration::from_millis(20));
    s3.run(&env, &["reap", "--keep", "1ms", "--archive-store", &store])
        .ok()
        .stdout_has("st/j/quarantine/h2.1.tar.zst");
    assert!(!env.run_dir("h2").exists());
}

#[test]
fn a_lanes_kit_is_a_kit_only_once_its_copy_is_in_the_store() {
    let Some(s3) = s3() else { return };
    let env = Env::new();
    let lane = crate::lane::claim(&env);
    crate::lane::edit_replay(&env, &lane);
    crate::lane::work(&env, &lane, "echo hi > hello && git add hello && git commit -qm hello").ok();
    let store = s3.url("kits");
    let down = Out::from(
        s3.cmd(&env, &["lane", "seal", &lane, "--archive-store", &store])
            .env("AWS_ENDPOINT_URL", "http://127.0.0.1:1")
            .output()
            .unwrap(),
    );
    down.code(125).stderr_has("onnection refused");
    assert!(
        !env.root.join("archive/lanes").join(format!("{lane}.tar.zst")).exists(),
        "the local kit is taken back"
    );
    // A lane of the same name on another host stored its kit already: this
    // one takes the next free name, here and there.
    s3.put(&format!("kits/lanes/{lane}.tar.zst"), b"another host's kit");
    s3.run(&env, &["lane", "seal", &lane, "--archive-store", &store]).ok().stderr_has("stored as s3://");
    let local = env.root.join("archive/lanes").join(format!("{lane}.2.tar.zst"));
    assert!(local.exists());
    let keys = s3.keys();
    for suffix in [".tar.zst", ".tar.zst.sha256", ".receipt.json"] {
        assert!(keys.contains(&format!("kits/lanes/{lane}.2{suffix}")), "{keys:?}");
    }
    assert_eq!(s3.get(&format!("kits/lanes/{lane}.2.tar.zst")).unwrap(), std::fs::read(&local).unwrap());
    assert_eq!(s3.get(&format!("kits/lanes/{lane}.tar.zst")).unwrap(), b"another host's kit");
    let card: serde_json::Value =
        serde_json::from_str(&env.run(&["lane", "show", &lane, "--json"]).ok().stdout).unwrap();
    assert_eq!(card["kit"]["stored"], format!("{store}/lanes/{lane}.2.tar.zst"));
}

/// A producer run under its own ROOT (another host, as far as a consumer's
/// ROOT can tell), putting `payload` as data.txt and sealing into the
/// archive store `store`.
#[cfg(feature = "postgres")]
fn produce(s3: &S3, env: &Env, pg: &str, run: &str, job: &str, store: &str) {
    let args = [
        "--store",
        pg,
        "run",
        "--run-id",
        run,
        "--job",
        job,
        "--seal",
        "--",
        "sh",
        "-c",
        "echo payload | runws put data.txt",
    ];
    Out::from(s3.cmd(env, &args).env("RUNWS_ARCHIVE_STORE", store).output().unwrap()).ok();
}

/// `runws ARGS` where RUNWS_ARCHIVE_STORE names `store`: the one archive
/// store an import of another host's run reads.
#[cfg(feature = "postgres")]
fn trusting(s3: &S3, env: &Env, store: &str, args: &[&str]) -> Out {
    Out::from(s3.cmd(env, args).env("RUNWS_ARCHIVE_STORE", store).output().unwrap())
}

/// The PostgreSQL store of the fleet view, when the tests have one.
#[cfg(feature = "postgres")]
fn pg_url() -> Option<String> {
    crate::harness::stores().into_iter().flatten().next()
}

#[cfg(feature = "postgres")]
#[test]
fn import_takes_another_hosts_output_from_the_archive_store_verified_by_the_fleets_sha256() {
    let Some(s3) = s3() else { return };
    let Some(pg) = pg_url() else { return };
    let (producer, consumer) = (Env::new(), Env::new());
    let tag = &uuid::Uuid::now_v7().simple().to_string()[20..];
    let (p, job) = (format!("made-{tag}"), format!("maker-{tag}"));
    let store = s3.url("fleet");
    // The consumer trusts one archive store; an import reads only there.
    let consumer_run = |args: &[&str]| trusting(&s3, &consumer, &store, args);
    // The producer runs under another ROOT (another host, as far as the
    // consumer's ROOT can tell), sealing into the archive store.
    produce(&s3, &producer, &pg, &p, &job, &store);
    let import = "runws import \"$1\" data.txt && cat \"$RUNWS_DIR/inputs/$1/data.txt\"";
    // A plain run that names whose outputs it imports is given the store's
    // URL; the bucket's keys it is passed.
    let allow = format!("job:{job}");
    let plain_run = |id: &str, of: &str| {
        consumer_run(&[
            "--store",
            &pg,
            "run",
            "--run-id",
            id,
            "--allow-import",
            &allow,
            "--pass",
            "AWS_*",
            "--",
            "sh",
            "-c",
            import,
            "sh",
            of,
        ])
    };
    plain_run("c1", &p).ok().stdout_has("payload");
    let m = consumer.manifest("c1");
    let input = m["inputs"].as_array().unwrap().iter().find(|i| i["from_run"] == p.as_str()).unwrap().clone();
    assert_eq!(input["from_output"], "data.txt");
    assert_eq!(input["sha256"], producer.manifest(&p)["outputs"][0]["sha256"]);
    // Without an import list the command has no store URL: not found.
    consumer_run(&[
        "--store", &pg, "run", "--run-id", "c2", "--pass", "AWS_*", "--", "sh", "-c", import, "sh", &p,
    ])
    .code(125)
    .stderr_has("no run");

    // A sandboxed command reaches neither: runws imports for it, under its
    // --allow-import list (a job of another host counts).
    let sandboxed = consumer_run(&[
        "--store",
        &pg,
        "run",
        "--sandbox",
        "--net",
        "none",
        "--run-id",
        "c3",
        "--allow-import",
        &format!("job:{job}"),
        "--",
        "sh",
        "-c",
        import,
        "sh",
        &p,
    ]);
    sandboxed.ok().stdout_has("payload");
    consumer_run(&[
        "--store",
        &pg,
        "run",
        "--sandbox",
        "--net",
        "none",
        "--run-id",
        "c4",
        "--allow-import",
        "job:other",
        "--",
        "sh",
        "-c",
        import,
        "sh",
        &p,
    ])
    .code(3);

    // Without a trusted archive store, or with another one, nothing is read.
    let untrusting = |id: &str, store: Option<&str>| {
        let mut c = s3.cmd(
            &consumer,
            &[
                "--store",
                &pg,
                "run",
                "--run-id",
                id,
                "--allow-import",
                &allow,
                "--pass",
                "AWS_*",
                "--",
                "sh",
                "-c",
                import,
                "sh",
                &p,
            ],
        );
        if let Some(st) = store {
            c.env("RUNWS_ARCHIVE_STORE", st);
        }
        Out::from(c.output().unwrap())
    };
    untrusting("c7", None).code(125).stderr_has("RUNWS_ARCHIVE_STORE");
    untrusting("c8", Some(&s3.url("elsewhere"))).code(125).stderr_has("is not in the archive store");
    untrusting("c9", Some(&s3.url("fle"))).code(125).stderr_has("is not in the archive store");

    // The fleet view's sha256 is the one the output must have.
    let tampered = serde_json::json!("0".repeat(64));
    let mut c = postgres::Client::connect(&pg, postgres::NoTls).unwrap();
    c.execute(
        "UPDATE runws_runs_v1 SET record = jsonb_set(record, '{outputs,0,sha256}', $2::text::jsonb) WHERE run_id = $1",
        &[&p, &tampered.to_string()],
    )
    .unwrap();
    plain_run("c5", &p).code(4).stderr_has("does not match");
    assert!(!consumer.run_dir("c5").join("inputs").join(&p).join("data.txt").exists());
    // A run sealed into no archive store cannot be imported from elsewhere.
    let q = format!("local-{tag}");
    producer
        .run(&[
            "--store",
            &pg,
            "run",
            "--run-id",
            &q,
            "--job",
            &job,
            "--seal",
            "--",
            "sh",
            "-c",
            "echo x | runws put data.txt",
        ])
        .ok();
    plain_run("c6", &q).code(125).stderr_has("not into an archive store");
}

#[test]
fn a_planted_uploads_symlink_is_never_followed() {
    let Some(s3) = s3() else { return };
    let env = Env::new();
    let elsewhere = env.path("elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    // A plain run's command plants ROOT/uploads for a later seal to use.
    env.sh("r1", &format!("ln -s '{}' \"$RUNWS_ROOT/uploads\"", elsewhere.display())).ok();
    let out = s3.run(&env, &["seal", "r1", "--to", &s3.url("p")]);
    assert_ne!(out.code, Some(0), "{out:?}");
    out.stderr_has("symlink");
    assert_eq!(std::fs::read_dir(&elsewhere).unwrap().count(), 0, "nothing written through the link");
    assert!(s3.keys().is_empty());
}

/// A tar.zst holding `name` as a regular file of `size` zero bytes (a
/// bomb: it compresses to almost nothing).
#[cfg(feature = "postgres")]
fn zeros_archive(name: &str, size: u64) -> Vec<u8> {
    zeros_archive_of(&[(name, size)])
}

/// A tar.zst holding each (name, size) as a regular file of zero bytes.
#[cfg(feature = "postgres")]
fn zeros_archive_of(entries: &[(&str, u64)]) -> Vec<u8> {
    let mut enc = zstd::stream::write::Encoder::new(Vec::new(), 1).unwrap();
    {
        let mut b = tar::Builder::new(&mut enc);
        for (name, size) in entries {
            let mut h = tar::Header::new_gnu();
            h.set_size(*size);
            h.set_mode(0o644);
            h.set_entry_type(tar::EntryType::Regular);
            b.append_data(&mut h, name, std::io::repeat(0).take(*size)).unwrap();
        }
        b.finish().unwrap();
    }
    enc.finish().unwrap()
}

#[cfg(feature = "postgres")]
#[test]
fn an_import_never_writes_more_than_the_fleet_view_says_the_output_holds() {
    use sha2::Digest;
    let Some(s3) = s3() else { return };
    let Some(pg) = pg_url() else { return };
    let (producer, consumer) = (Env::new(), Env::new());
    let tag = &uuid::Uuid::now_v7().simple().to_string()[20..];
    let (p, job) = (format!("bomb-{tag}"), format!("bomber-{tag}"));
    let store = s3.url("fleet");
    let consumer_run = |args: &[&str]| trusting(&s3, &consumer, &store, args);
    produce(&s3, &producer, &pg, &p, &job, &store);
    // Whoever can write the bucket replaces the archive (and its checksum)
    // with one whose output is 64 MiB of zeros; the fleet view says 8 bytes.
    let key = format!("fleet/{job}/{p}.tar.zst");
    let bomb = zeros_archive(&format!("outputs/data.txt.{p}"), 64 << 20);
    let sum = sha2::Sha256::digest(&bomb).iter().map(|b| format!("{b:02x}")).collect::<String>();
    s3.put(&key, &bomb);
    s3.put(&format!("{key}.sha256"), format!("{sum}  {p}.tar.zst\n").as_bytes());
    // At most 8 MiB may be written by the import (512-byte blocks).
    let import = "ulimit -f 16384; runws import \"$1\" data.txt";
    let out = consumer_run(&[
        "--store",
        &pg,
        "run",
        "--run-id",
        "c1",
        "--allow-import",
        &format!("job:{job}"),
        "--pass",
        "AWS_*",
        "--",
        "sh",
        "-c",
        import,
        "sh",
        &p,
    ]);
    out.code(4);
    // A bomb ahead of the entry asked for is given up once it decompresses
    // to more than a seal packs: not read to its end.
    let ahead = zeros_archive_of(&[("outputs/pad", 400 << 20), (&format!("outputs/data.txt.{p}"), 8)]);
    let sum = sha2::Sha256::digest(&ahead).iter().map(|b| format!("{b:02x}")).collect::<String>();
    s3.put(&key, &ahead);
    s3.put(&format!("{key}.sha256"), format!("{sum}  {p}.tar.zst\n").as_bytes());
    let out = consumer_run(&[
        "--store",
        &pg,
        "run",
        "--run-id",
        "c2",
        "--allow-import",
        &format!("job:{job}"),
        "--pass",
        "AWS_*",
        "--",
        "sh",
        "-c",
        import,
        "sh",
        &p,
    ]);
    out.code(125).stderr_has("runs past its budget");
    let dir = consumer.run_dir("c1").join("inputs").join(&p);
    let left: Vec<_> =
        std::fs::read_dir(&dir).map(|d| d.flatten().map(|e| e.file_name()).collect()).unwrap_or_default();
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn two_seals_of_one_run_at_once_leave_one_whole_archive() {
    let Some(s3) = s3() else { return };
    let env = Env::new();
    env.sh("big", "head -c 8000000 /dev/urandom > \"$RUNWS_DIR/outputs/blob\"").ok();
    // In parts: a server may let two create-only multipart uploads both
    // complete, and the seal that lost must not take the winner's archive.
    for round in 0..3 {
        let to = s3.url(&format!("p{round}"));
        let start = || {
            s3.cmd(&env, &["seal", "big", "--to", &to])
                .env("RUNWS_S3_MULTIPART_FROM", "5MiB")
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        };
        let (a, b) = (start(), start());
        let mut codes =
            [a.wait_with_output().unwrap().status.code(), b.wait_with_output().unwrap().status.code()];
        codes.sort();
        assert_eq!(codes, [Some(0), Some(125)], "round {round}: one seal, one refusal");
        let url = format!("{to}/big.tar.zst");
        s3.run(&env, &["verify", &url]).ok();
    }
}

#[test]
fn a_held_seal_lock_stops_the_seal_at_its_deadline() {
    let Some(s3) = s3() else { return };
    let env = Env::new();
    env.sh("r1", "true").ok();
    // Any process of the user (a plain run's command among them) may hold
    // the lock seals of a run take turns on.
    let lock = env.run_dir("r1").join(".seal");
    std::fs::create_dir(&lock).unwrap();
    let held = std::fs::File::open(&lock).unwrap();
    rustix::fs::flock(&held, rustix::fs::FlockOperation::LockExclusive).unwrap();
    let started = Instant::now();
    s3.run(&env, &["seal", "r1", "--to", &s3.url("p"), "--deadline", "1s"])
        .code(125)
        .stderr_has("until the deadline")
        .one_line_error();
    assert!(started.elapsed() < Duration::from_secs(10), "{:?}", started.elapsed());
    assert!(s3.keys().is_empty());
    drop(held);
    s3.run(&env, &["seal", "r1", "--to", &s3.url("p")]).ok();
}
