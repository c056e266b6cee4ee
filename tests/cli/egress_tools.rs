//! Real tools through `run --sandbox --net allow=PATTERNS`: git, pip, npm,
//! cargo and Node's own fetch, each fetching from a server of the test's
//! own on the host's loopback (named through `--resolve`, so nothing
//! reaches beyond this machine), each finding the proxy through the
//! variables runws sets and nothing else. Each test checks that the tool
//! did its work and that the run's `net` record lists that server, and
//! only it, as allowed with the bytes both ways counted.
//!
//! A tool that is not installed is skipped with a message on stderr,
//! unless `RUNWS_TEST_TOOLS_REQUIRED` is set (CI installs them all), where
//! that fails the test.

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use sha2::Digest;

use crate::egress::{Web, entry, net_of, through};
use crate::harness::*;
use crate::sandbox::{Who, everyone, skip};

/// Where the tools were installed for these tests: a missing one fails.
fn required() -> bool {
    std::env::var_os("RUNWS_TEST_TOOLS_REQUIRED").is_some_and(|v| !v.is_empty())
}

/// Says on stderr why `test` is skipped, or fails it where the tools are
/// required.
fn missing(test: &str, why: &str) {
    assert!(!required(), "{test}: {why}, and RUNWS_TEST_TOOLS_REQUIRED says it was installed");
    eprintln!("skipped {test}: {why}");
}

/// `tool` on the PATH the sandbox has (`/usr/local/bin:/usr/bin:/bin`).
fn on_path(tool: &str) -> Option<PathBuf> {
    let out = Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .output()
        .ok()?;
    let p = String::from_utf8_lossy(&out.stdout).trim().to_string();
    (out.status.success() && p.starts_with('/')).then(|| PathBuf::from(p))
}

/// The run reached `host:port` through the proxy, and nothing else: one
/// record entry, allowed, one connection for each of the `requests` the
/// server saw (the proxy forwards one request a connection), bytes counted
/// both ways.
#[track_caller]
fn reached_only(env: &Env, host: &str, port: u16, requests: usize) {
    let net = net_of(env);
    assert_eq!(net["complete"], true, "{net}");
    let e = entry(&net, host, port, true).unwrap_or_else(|| panic!("{host}:{port} not allowed in {net}"));
    assert_eq!(e["count"].as_u64(), Some(requests as u64), "{e}");
    assert!(e["bytes_out"].as_u64().unwrap() > 0 && e["bytes_in"].as_u64().unwrap() > 0, "{e}");
    let all = net["connections"].as_array().unwrap();
    assert_eq!(all.len(), 1, "the tool asked for more than its server: {net}");
}

/// A fresh temporary directory everyone can read (for `--ro`).
fn shared_dir() -> tempfile::TempDir {
    let d = tempfile::Builder::new().prefix("runws-tools-").tempdir().unwrap();
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    d
}

/// A directory under the test's own that `who` can write (for `--rw`).
fn writable(env: &Env, rel: &str) -> PathBuf {
    let d = env.path(rel);
    std::fs::create_dir_all(&d).unwrap();
    std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o777)).unwrap();
    d
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Base64: padded with the standard alphabet, or unpadded URL-safe.
fn base64(bytes: &[u8], url: bool) -> String {
    let mut abc: Vec<u8> = (b'A'..=b'Z').chain(b'a'..=b'z').chain(b'0'..=b'9').collect();
    abc.extend_from_slice(if url { b"-_" } else { b"+/" });
    let mut out = String::new();
    for c in bytes.chunks(3) {
        let n = (u32::from(c[0]) << 16)
            | (u32::from(*c.get(1).unwrap_or(&0)) << 8)
            | u32::from(*c.get(2).unwrap_or(&0));
        for i in 0..=c.len() {
            out.push(abc[(n >> (18 - 6 * i)) as usize & 63] as char);
        }
        if !url {
            out.push_str(&"=".repeat(3 - c.len()));
        }
    }
    out
}

/// A gzipped tar of `files` (path, contents), as npm and cargo read them.
fn tgz(files: &[(&str, &str)]) -> Vec<u8> {
    let gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    let mut tar = tar::Builder::new(gz);
    for (path, body) in files {
        let mut h = tar::Header::new_ustar();
        h.set_size(body.len() as u64);
        h.set_mode(0o644);
        h.set_mtime(1_700_000_000);
        h.set_entry_type(tar::EntryType::Regular);
        tar.append_data(&mut h, path, body.as_bytes()).unwrap();
    }
    tar.into_inner().unwrap().finish().unwrap()
}

/// `git ARGS` in `dir` on the host, with no user or system configuration.
fn git(dir: &Path, args: &[&str]) {
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_AUTHOR_NAME", "runws test")
        .env("GIT_AUTHOR_EMAIL", "test@runws.invalid")
        .env("GIT_COMMITTER_NAME", "runws test")
        .env("GIT_COMMITTER_EMAIL", "test@runws.invalid")
        .output()
        .expect("git");
    assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

/// A bare repository ready for git's dumb HTTP protocol: a first commit
/// packed, a second one loose, `info/refs` and `objects/info/packs`
/// written by `git update-server-info`.
fn bare_repo(dir: &Path) -> PathBuf {
    let src = dir.join("src");
    std::fs::create_dir_all(&src).unwrap();
    git(&src, &["init", "-q", "-b", "main"]);
    std::fs::write(src.join("hello.txt"), "hello from git\n").unwrap();
    git(&src, &["add", "hello.txt"]);
    git(&src, &["commit", "-q", "-m", "first"]);
    let bare = dir.join("repo.git");
    git(dir, &["clone", "-q", "--bare", "src", "repo.git"]);
    git(&bare, &["gc", "-q"]);
    std::fs::write(src.join("more.txt"), "more\n").unwrap();
    git(&src, &["add", "more.txt"]);
    git(&src, &["commit", "-q", "-m", "second"]);
    git(&src, &["push", "-q", "../repo.git", "main"]);
    git(&bare, &["update-server-info"]);
    bare
}

/// `git clone http://...` of a repository served over git's dumb HTTP
/// protocol: the refs, the pack and its index, a loose object, all fetched
/// through the proxy as plain `http://` requests.
#[test]
fn git_clones_over_dumb_http_through_the_proxy() {
    if on_path("git").is_none() {
        return missing("git_clone", "git is not installed");
    }
    for who in everyone() {
        if skip(who, "git_clone") {
            continue;
        }
        let env = Env::new();
        let made = shared_dir();
        let bare = bare_repo(made.path());
        let web = Web::start();
        web.put_tree("/repo.git/", &bare);
        let p = web.port;
        let out = through(
            &env,
            who,
            &format!("git.test:{p}"),
            &["git.test"],
            &[],
            &format!(
                "git clone -q http://git.test:{p}/repo.git \"$TMPDIR/clone\" && cd \"$TMPDIR/clone\" && \
                 git log --format=%s && cat hello.txt more.txt && git fsck --no-progress"
            ),
        );
        out.ok().stdout_has("second\nfirst\nhello from git\nmore\n");
        let seen = web.seen();
        assert!(seen.iter().any(|l| l.starts_with("GET /repo.git/info/refs")), "{seen:?}");
        assert!(seen.iter().any(|l| l.contains("/objects/pack/pack-") && l.contains(".pack ")), "{seen:?}");
        reached_only(&env, "git.test", p, seen.len());
    }
}

/// A wheel of `demo-pkg` 1.0: a module and its dist-info, RECORD hashed.
fn wheel() -> Vec<u8> {
    let mut files = vec![
        ("demo_pkg/__init__.py".to_string(), "GREETING = 'hello from demo-pkg'\n".to_string()),
        (
            "demo_pkg-1.0.dist-info/METADATA".into(),
            "Metadata-Version: 2.1\nName: demo-pkg\nVersion: 1.0\n".into(),
        ),
        (
            "demo_pkg-1.0.dist-info/WHEEL".into(),
            "Wheel-Version: 1.0\nGenerator: runws-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n".into(),
        ),
    ];
    let mut record = String::new();
    for (path, body) in &files {
        let digest = base64(&sha2::Sha256::digest(body.as_bytes()), true);
        record.push_str(&format!("{path},sha256={digest},{}\n", body.len()));
    }
    record.push_str("demo_pkg-1.0.dist-info/RECORD,,\n");
    files.push(("demo_pkg-1.0.dist-info/RECORD".into(), record));
    let mut zip = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let options = zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored);
    for (path, body) in &files {
        zip.start_file(path.as_str(), options).unwrap();
        zip.write_all(body.as_bytes()).unwrap();
    }
    zip.finish().unwrap().into_inner()
}

/// `pip install --index-url http://... --target DIR demo-pkg` from a PEP
/// 503 simple index, pip from a venv of Debian's Python: pip is given no
/// `--proxy`, it reads the variables.
#[test]
fn pip_installs_from_a_simple_index_through_the_proxy_variables() {
    let python = Path::new("/usr/bin/python3");
    if !python.exists() {
        return missing("pip_install", "/usr/bin/python3 is not installed");
    }
    let made = shared_dir();
    let venv = made.path().join("venv");
    let created = Command::new(python).args(["-m", "venv"]).arg(&venv).output().unwrap();
    if !created.status.success() {
        let why = String::from_utf8_lossy(&created.stdout).trim().to_string();
        return missing("pip_install", &format!("`python3 -m venv` fails (python3-venv missing?): {why}"));
    }
    let whl = wheel();
    let name = "demo_pkg-1.0-py3-none-any.whl";
    for who in everyone() {
        if skip(who, "pip_install") {
            continue;
        }
        let env = Env::new();
        let web = Web::start();
        let p = web.port;
        web.put(&format!("/files/{name}"), whl.clone());
        web.put_as(
            "/simple/demo-pkg/",
            "text/html",
            format!(
                "<!DOCTYPE html>\n<html><body>\n<a href=\"/files/{name}#sha256={}\">{name}</a>\n</body></html>\n",
                hex(&sha2::Sha256::digest(&whl))
            ),
        );
        let out = through(
            &env,
            who,
            &format!("pkgs.test:{p}"),
            &["pkgs.test"],
            &["--ro", made.path().to_str().unwrap()],
            &format!(
                "'{pip}' install --no-cache-dir --disable-pip-version-check --no-input \
                 --index-url http://pkgs.test:{p}/simple/ --trusted-host pkgs.test:{p} \
                 --target \"$TMPDIR/site\" demo-pkg && \
                 /usr/bin/python3 -c 'import sys; sys.path.insert(0, sys.argv[1]); import demo_pkg; \
                 print(demo_pkg.GREETING)' \"$TMPDIR/site\"",
                pip = venv.join("bin/pip").display()
            ),
        );
        out.ok().stdout_has("Successfully installed demo-pkg-1.0").stdout_has("hello from demo-pkg\n");
        let seen = web.seen();
        assert!(seen.contains(&"GET /simple/demo-pkg/ HTTP/1.1".to_string()), "{seen:?}");
        assert!(seen.contains(&format!("GET /files/{name} HTTP/1.1")), "{seen:?}");
        reached_only(&env, "pkgs.test", p, seen.len());
    }
}

/// `npm install --registry http://... demo-npm`: the registry's metadata
/// (with the `integrity` and `shasum` npm checks) and the tarball, through
/// the proxy npm reads from `npm_config_proxy`.
#[test]
fn npm_installs_from_a_registry_through_the_proxy() {
    if on_path("npm").is_none() || on_path("node").is_none() {
        return missing("npm_install", "npm (or node) is not installed");
    }
    let tarball = tgz(&[
        ("package/package.json", r#"{"name":"demo-npm","version":"1.0.0","main":"index.js"}"#),
        ("package/index.js", "module.exports = 'hello from demo-npm';\n"),
    ]);
    let integrity = format!("sha512-{}", base64(&sha2::Sha512::digest(&tarball), false));
    let shasum = {
        let mut sum = Command::new("sha1sum")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("sha1sum");
        sum.stdin.take().unwrap().write_all(&tarball).unwrap();
        let out = sum.wait_with_output().unwrap();
        String::from_utf8_lossy(&out.stdout)[..40].to_string()
    };
    for who in everyone() {
        if skip(who, "npm_install") {
            continue;
        }
        let env = Env::new();
        let web = Web::start();
        let p = web.port;
        let meta = serde_json::json!({
            "name": "demo-npm",
            "dist-tags": {"latest": "1.0.0"},
            "versions": {"1.0.0": {
                "name": "demo-npm",
                "version": "1.0.0",
                "main": "index.js",
                "dist": {
                    "tarball": format!("http://reg.test:{p}/demo-npm/-/demo-npm-1.0.0.tgz"),
                    "integrity": integrity,
                    "shasum": shasum,
                },
            }},
        });
        web.put_as("/demo-npm", "application/json", meta.to_string());
        web.put("/demo-npm/-/demo-npm-1.0.0.tgz", tarball.clone());
        let project = writable(&env, "project");
        std::fs::write(
            project.join("package.json"),
            r#"{"name":"project","version":"1.0.0","private":true}"#,
        )
        .unwrap();
        std::fs::set_permissions(project.join("package.json"), std::fs::Permissions::from_mode(0o666))
            .unwrap();
        let out = through(
            &env,
            who,
            &format!("reg.test:{p}"),
            &["reg.test"],
            &["--rw", project.to_str().unwrap()],
            &format!(
                "cd '{}' && npm install --registry http://reg.test:{p}/ --cache \"$TMPDIR/npm\" \
                 --no-audit --no-fund --no-update-notifier --loglevel=warn demo-npm && \
                 node -e 'console.log(require(\"demo-npm\"))'",
                project.display()
            ),
        );
        out.ok().stdout_has("hello from demo-npm\n");
        let lock = std::fs::read_to_string(project.join("package-lock.json")).unwrap();
        assert!(lock.contains(&integrity), "{lock}");
        assert!(project.join("node_modules/demo-npm/index.js").is_file());
        let seen = web.seen();
        assert!(seen.contains(&"GET /demo-npm HTTP/1.1".to_string()), "{seen:?}");
        assert!(seen.contains(&"GET /demo-npm/-/demo-npm-1.0.0.tgz HTTP/1.1".to_string()), "{seen:?}");
        reached_only(&env, "reg.test", p, seen.len());
    }
}

/// The cargo of the toolchain itself, not rustup's proxy (which needs
/// rustup's home): `rustup which cargo`, else the cargo running these
/// tests, else `cargo` on the PATH.
fn real_cargo() -> Option<PathBuf> {
    let rustup = Command::new("rustup")
        .args(["which", "cargo"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()));
    let found =
        rustup.or_else(|| std::env::var_os("CARGO").map(PathBuf::from)).or_else(|| on_path("cargo"))?;
    std::fs::canonicalize(found).ok().filter(|p| p.is_file())
}

/// `cargo fetch` of a project depending on crate `demo` from a sparse
/// registry over plain HTTP (`config.json`, the index file, the `.crate`
/// with its sha256 `cksum`), configured through the environment, with
/// `CARGO_HOME` inside the run: cargo finds the proxy in
/// `CARGO_HTTP_PROXY`. The toolchain lives under the home the sandbox
/// hides, so its directory is passed with `--ro`; `nobody` cannot read
/// it, so this runs as the test's user only.
#[test]
fn cargo_fetches_from_a_sparse_registry_through_the_proxy() {
    let Some(cargo) = real_cargo() else {
        return missing("cargo_fetch", "cargo is not installed");
    };
    let bin = cargo.parent().unwrap().to_path_buf();
    let toolchain = bin.parent().unwrap().to_path_buf();
    let env = Env::new();
    let web = Web::start();
    let p = web.port;
    let krate = tgz(&[
        ("demo-0.1.0/Cargo.toml", "[package]\nname = \"demo\"\nversion = \"0.1.0\"\nedition = \"2021\"\n"),
        ("demo-0.1.0/src/lib.rs", "pub fn hello() -> &'static str {\n    \"hello from demo\"\n}\n"),
    ]);
    let cksum = hex(&sha2::Sha256::digest(&krate));
    web.put_as(
        "/index/config.json",
        "application/json",
        format!(r#"{{"dl":"http://reg.test:{p}/dl/{{crate}}/{{version}}/download"}}"#),
    );
    web.put(
        "/index/de/mo/demo",
        format!(
            "{}\n",
            serde_json::json!({"name": "demo", "vers": "0.1.0", "deps": [], "cksum": cksum,
                "features": {}, "yanked": false})
        ),
    );
    web.put("/dl/demo/0.1.0/download", krate);
    let project = writable(&env, "project");
    std::fs::create_dir_all(project.join("src")).unwrap();
    std::fs::write(
        project.join("Cargo.toml"),
        "[package]\nname = \"user\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n\
         [dependencies]\ndemo = { version = \"0.1\", registry = \"local\" }\n",
    )
    .unwrap();
    std::fs::write(project.join("src/main.rs"), "fn main() {\n    println!(\"{}\", demo::hello());\n}\n")
        .unwrap();
    let mut extra = vec!["--rw".to_string(), project.display().to_string()];
    if !toolchain.starts_with("/usr") {
        extra.extend(["--ro".to_string(), toolchain.display().to_string()]);
    }
    let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
    let out = through(
        &env,
        Who::Me,
        &format!("reg.test:{p}"),
        &["reg.test"],
        &extra,
        &format!(
            "export PATH='{bin}':\"$PATH\" CARGO_HOME=\"$TMPDIR/cargo-home\" \
             CARGO_REGISTRIES_LOCAL_INDEX=sparse+http://reg.test:{p}/index/ && \
             cd '{project}' && cargo fetch && cat \"$CARGO_HOME\"/registry/src/*/demo-0.1.0/src/lib.rs",
            bin = bin.display(),
            project = project.display()
        ),
    );
    out.ok().stdout_has("\"hello from demo\"");
    let lock = std::fs::read_to_string(project.join("Cargo.lock")).unwrap();
    assert!(lock.contains(&format!("checksum = \"{cksum}\"")), "{lock}");
    let seen = web.seen();
    for want in ["GET /index/config.json", "GET /index/de/mo/demo", "GET /dl/demo/0.1.0/download"] {
        assert!(seen.iter().any(|l| l.starts_with(&format!("{want} "))), "{want}: {seen:?}");
    }
    reached_only(&env, "reg.test", p, seen.len());
}

/// Node's built-in `fetch` reads the proxy variables only when told to
/// (`NODE_USE_ENV_PROXY=1`, which runws sets) and only from Node 24 on:
/// there it reaches the server through the proxy. An older Node ignores
/// them; its fetch then resolves the name itself, finds no DNS in the
/// sandbox, and nothing leaves (npm is not affected: it reads its own
/// `npm_config_proxy`, see the npm test).
#[test]
fn node_fetch_goes_through_the_proxy_from_node_24() {
    let Some(node) = on_path("node") else {
        return missing("node_fetch", "node is not installed");
    };
    let version = Command::new(&node).args(["-p", "process.versions.node"]).output().unwrap();
    let version = String::from_utf8_lossy(&version.stdout).trim().to_string();
    let major: u32 = version.split('.').next().and_then(|m| m.parse().ok()).unwrap_or(0);
    let env = Env::new();
    let web = Web::start();
    web.put("/hello.txt", "hello from the host\n");
    let p = web.port;
    let out = through(
        &env,
        Who::Me,
        &format!("web.test:{p}"),
        &["web.test"],
        &[],
        &format!(
            "node -e 'fetch(\"http://web.test:{p}/hello.txt\").then(r => r.text()).then(\
             t => process.stdout.write(t), \
             e => {{ console.error(\"fetch failed:\", (e.cause && e.cause.code) || e); process.exit(3); }})'"
        ),
    );
    if major >= 24 || out.code == Some(0) {
        out.ok().stdout_has("hello from the host\n");
        reached_only(&env, "web.test", p, web.seen().len());
        return;
    }
    // Before Node 24: the fetch failed without reaching anything.
    out.code(3).stderr_has("fetch failed");
    assert!(web.seen().is_empty(), "{:?}", web.seen());
    let net = net_of(&env);
    assert_eq!(net["connections"].as_array().map(Vec::len), Some(0), "{net}");
    eprintln!(
        "skipped node_fetch through the proxy: Node {version} ignores NODE_USE_ENV_PROXY (read from \
         Node 24 on); checked that its fetch reaches nothing instead"
    );
}
