//! A fresh root per test, the real binary, and failures that show
//! everything: status, stdout and stderr.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

pub const BIN: &str = env!("CARGO_BIN_EXE_runws");

pub struct Env {
    pub tmp: tempfile::TempDir,
    pub root: PathBuf,
    /// A HOME for runws itself, so tests never touch the real one.
    pub home: PathBuf,
}

impl Env {
    pub fn new() -> Env {
        let tmp = tempfile::Builder::new().prefix("runws-test-").tempdir().expect("tempdir");
        let root = tmp.path().join("root");
        let home = tmp.path().join("outer-home");
        std::fs::create_dir_all(&home).unwrap();
        Env { tmp, root, home }
    }

    /// `runws ARGS` with a clean, known environment.
    pub fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(BIN);
        c.args(args);
        self.clean(&mut c);
        c
    }

    /// `c` with the clean, known environment of [`Env::cmd`].
    pub fn clean<'c>(&self, c: &'c mut Command) -> &'c mut Command {
        c.env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .env("HOME", &self.home)
            .env("RUNWS_ROOT", &self.root)
            .current_dir(self.tmp.path())
            .stdin(Stdio::null())
    }

    pub fn run(&self, args: &[&str]) -> Out {
        Out::from(self.cmd(args).output().expect("spawn runws"))
    }

    /// `runws run --run-id ID -- sh -c SCRIPT`
    pub fn sh(&self, id: &str, script: &str) -> Out {
        self.run(&["run", "--run-id", id, "--", "sh", "-c", script])
    }

    pub fn run_dir(&self, id: &str) -> PathBuf {
        self.root.join("runs").join(id)
    }

    pub fn manifest(&self, id: &str) -> serde_json::Value {
        let bytes = std::fs::read(self.run_dir(id).join("manifest.json")).expect("read manifest");
        serde_json::from_slice(&bytes).expect("parse manifest")
    }

    pub fn run_ids(&self) -> Vec<String> {
        let mut ids: Vec<String> = match std::fs::read_dir(self.root.join("runs")) {
            Ok(rd) => rd.map(|e| e.unwrap().file_name().into_string().unwrap()).collect(),
            Err(_) => Vec::new(),
        };
        ids.sort();
        ids
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.tmp.path().join(rel)
    }
}

#[derive(Debug)]
pub struct Out {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl From<Output> for Out {
    fn from(o: Output) -> Out {
        Out {
            code: o.status.code(),
            stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
        }
    }
}

impl Out {
    #[track_caller]
    pub fn code(&self, want: i32) -> &Out {
        assert_eq!(
            self.code,
            Some(want),
            "want exit {want}, got {:?}\n--- stdout\n{}\n--- stderr\n{}",
            self.code,
            self.stdout,
            self.stderr
        );
        self
    }

    #[track_caller]
    pub fn ok(&self) -> &Out {
        self.code(0)
    }

    #[track_caller]
    pub fn stderr_has(&self, needle: &str) -> &Out {
        assert!(self.stderr.contains(needle), "stderr lacks {needle:?}\n--- stderr\n{}", self.stderr);
        self
    }

    #[track_caller]
    pub fn stdout_has(&self, needle: &str) -> &Out {
        assert!(self.stdout.contains(needle), "stdout lacks {needle:?}\n--- stdout\n{}", self.stdout);
        self
    }

    #[track_caller]
    pub fn stdout_lacks(&self, needle: &str) -> &Out {
        assert!(!self.stdout.contains(needle), "stdout has {needle:?}\n--- stdout\n{}", self.stdout);
        self
    }

    /// Each refusal is one line starting with `runws: `.
    #[track_caller]
    pub fn one_line_error(&self) -> &Out {
        let lines: Vec<&str> = self.stderr.lines().filter(|l| l.starts_with("runws: ")).collect();
        assert_eq!(lines.len(), 1, "want one `runws:` line\n--- stderr\n{}", self.stderr);
        self
    }
}

pub fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// Polls `check` every 2ms until it holds or `limit` has passed; whether
/// it held at the last look.
pub fn wait_until(limit: Duration, mut check: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if check() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    check()
}

/// Waits (15s at most) for `path` to appear; fails the test when it never
/// does.
#[track_caller]
pub fn wait_for(path: &Path) {
    assert!(wait_until(Duration::from_secs(15), || path.exists()), "{} never appeared", path.display());
}

/// Whether process `pid` exists and is not a zombie.
pub fn alive(pid: i32) -> bool {
    // Bytes: a process's name (in the parentheses) need not be UTF-8.
    std::fs::read(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        let after = &s[s.iter().rposition(|&b| b == b')').map_or(0, |i| i + 1)..];
        String::from_utf8_lossy(after).split_whitespace().next() != Some("Z")
    })
}

/// A value that looks like a credential, made at run time so the source
/// tree holds none.
pub fn fake_secret(tag: &str) -> String {
    format!("{tag}-{}", uuid::Uuid::now_v7().simple())
}

/// Every file under `dir` (recursively), relative.
pub fn tree(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    fn walk(base: &Path, d: &Path, out: &mut Vec<String>) {
        let Ok(rd) = std::fs::read_dir(d) else { return };
        for e in rd {
            let e = e.unwrap();
            let p = e.path();
            out.push(p.strip_prefix(base).unwrap().display().to_string());
            if e.file_type().unwrap().is_dir() {
                walk(base, &p, out);
            }
        }
    }
    walk(dir, dir, &mut out);
    out.sort();
    out
}

/// The store URLs to test: the file store always, PostgreSQL when the test
/// environment names a server (CI always does).
pub fn stores() -> Vec<Option<String>> {
    let mut v = vec![None];
    if !cfg!(feature = "postgres") {
        eprintln!("skipped the PostgreSQL half: runws is built without the `postgres` feature");
        return v;
    }
    match std::env::var("RUNWS_TEST_PG_URL") {
        Ok(url) if !url.is_empty() => v.push(Some(url)),
        // Where a server was started for the tests, not using it is a failure.
        _ if std::env::var_os("RUNWS_TEST_PG_REQUIRED").is_some_and(|v| !v.is_empty()) => {
            panic!(
                "RUNWS_TEST_PG_URL not set, but RUNWS_TEST_PG_REQUIRED says a PostgreSQL server was started"
            )
        }
        _ => eprintln!("skipped the PostgreSQL half: RUNWS_TEST_PG_URL not set"),
    }
    v
}

/// Installs `filter` as this process's seccomp filter (no-new-privileges
/// first), in a `pre_exec` closure: what a container's profile or a kernel
/// that refuses a call looks like to the runws started then.
pub fn install_filter(filter: &[nix::libc::sock_filter]) -> std::io::Result<()> {
    use nix::libc;
    let prog = libc::sock_fprog { len: filter.len() as u16, filter: filter.as_ptr() as *mut _ };
    // SAFETY: prctl with a filter program borrowed for the duration of the
    // call (the kernel copies it).
    unsafe {
        if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0
            || libc::prctl(libc::PR_SET_SECCOMP, libc::SECCOMP_MODE_FILTER, &prog as *const libc::sock_fprog)
                != 0
        {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}
