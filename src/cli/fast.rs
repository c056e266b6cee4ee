//! The `runws run` command lines a scheduler writes, parsed without clap.
//!
//! runws starts once per job, and building clap's parser for `run` (forty
//! arguments, their help, their checks) cost about a fifth of a whole
//! `runws run -- /bin/true`. This parser takes only the plain form:
//! `[--root DIR] [--store URL] run [--OPTION VALUE | --FLAG]... -- COMMAND...`
//! with each option at most once, as its own word. Anything else (help, an
//! `--option=value`, an empty value or one that starts with `-`, a repeated or unknown
//! option, a missing `--`, an option whose companion is missing, a value that
//! does not parse) returns `None`, and clap parses the line and writes every
//! error message. A unit test holds the two parsers to the same result.

use std::ffi::{OsStr, OsString};
use std::path::PathBuf;
use std::time::Duration;

use super::{Cli, Command, RunArgs, SealArgs};
use crate::duration;
use crate::run::Request;

/// Parses `args` (with the program name first) when it is a plain `run`
/// command line; `env` looks up RUNWS_ROOT and RUNWS_STORE.
pub fn parse_run(args: &[OsString], env: impl Fn(&str) -> Option<OsString>) -> Option<Cli> {
    let mut words = args.iter().skip(1);
    let mut root: Option<PathBuf> = None;
    let mut store: Option<String> = None;
    let mut a = defaults();
    let mut seen: Vec<&str> = Vec::new();
    let mut in_run = false;
    loop {
        let word = words.next()?.to_str()?;
        if word == "run" && !in_run {
            in_run = true;
            continue;
        }
        if word == "--" && in_run {
            a.command = words.cloned().collect();
            break;
        }
        let name = word.strip_prefix("--")?;
        // `--sandbox` and `--sandbox=MODE` are one option.
        let key = if name.starts_with("sandbox=") {
            "sandbox"
        } else if name.starts_with("limits=") {
            "limits"
        } else {
            name
        };
        if seen.contains(&key) {
            return None;
        }
        seen.push(key);
        // Global options come before or after `run`; the rest only after.
        match name {
            "root" => root = Some(PathBuf::from(value(&mut words)?)),
            "store" => store = Some(text(&mut words)?),
            _ if !in_run => return None,
            "listen" => a.listen = true,
            "capture" => a.capture = true,
            "json-status-fd" => a.json_status_fd = Some(number(&mut words)?),
            "seal" => a.seal = true,
            "allow-unscanned" => a.seal_opts.allow_unscanned = true,
            "allow-userns" => a.allow_userns = true,
            "sandbox" => a.sandbox = Some("on".into()),
            "sandbox=on" | "sandbox=try" | "sandbox=ns" | "sandbox=landlock" => {
                a.sandbox = Some(name["sandbox=".len()..].into())
            }
            "run-id" => a.run_id = Some(text(&mut words)?),
            "job" => a.job = Some(text(&mut words)?),
            "env" => a.env.push(text(&mut words)?),
            "pass" => a.pass.push(text(&mut words)?),
            "env-file" => a.env_file.push(value(&mut words)?.into()),
            "path" => a.path = text(&mut words)?,
            "ports" => a.ports = number(&mut words)?,
            "port-host" => a.port_host = text(&mut words)?,
            "input" => a.inputs.push(value(&mut words)?.into()),
            "fingerprint" => a.fingerprint = Some(text(&mut words)?),
            "allow-import" => a.allow_import.push(text(&mut words)?),
            "timeout" => a.timeout = Some(dur(&mut words)?),
            "kill-after" => a.kill_after = Some(dur(&mut words)?),
            "lease-ttl" => a.lease_ttl = dur(&mut words)?,
            "worktree" => a.worktree = Some(value(&mut words)?.into()),
            "base" => a.base = text(&mut words)?,
            "cwd" => a.cwd = Some(value(&mut words)?.into()),
            "lease" => a.lease = Some(text(&mut words)?),
            "wait" => a.wait = dur(&mut words)?,
            "ping" => a.ping = Some(text(&mut words)?),
            "ping-timeout" => a.ping_timeout = dur(&mut words)?,
            "metrics-dir" => a.metrics_dir = Some(value(&mut words)?.into()),
            "memory" => a.memory = Some(duration::parse_size(&text(&mut words)?).ok()?),
            "pids" => a.pids = Some(number(&mut words).filter(|n| *n >= 1)?),
            "cpu" => a.cpu = Some(crate::cgroup::parse_cores(&text(&mut words)?).ok()?),
            "limits=on" | "limits=try" => a.limits = Some(name["limits=".len()..].into()),
            "to" => a.seal_opts.to = Some(text(&mut words)?),
            "archive-store" => a.seal_opts.archive_store = Some(text(&mut words)?),
            "format" => a.seal_opts.format = one_of(&mut words, &crate::seal::archive::Format::NAMES)?,
            "include" => a.seal_opts.include.push(text(&mut words)?),
            "max-bytes" => a.seal_opts.max_bytes = duration::parse_size(&text(&mut words)?).ok()?,
            "max-files" => a.seal_opts.max_files = number(&mut words)?,
            "deadline" => a.seal_opts.deadline = dur(&mut words)?,
            "net" => a.net = Some(text(&mut words)?),
            "resolve" => a.resolve.push(text(&mut words)?),
            "rw" => a.rw.push(value(&mut words)?.into()),
            "ro" => a.ro.push(value(&mut words)?.into()),
            "cache" => a.cache.push(text(&mut words)?),
            "hide" => a.hide.push(value(&mut words)?.into()),
            _ => return None,
        }
        // Repeatable options may come again.
        if matches!(
            name,
            "env"
                | "pass"
                | "env-file"
                | "input"
                | "allow-import"
                | "include"
                | "rw"
                | "ro"
                | "cache"
                | "hide"
                | "resolve"
        ) {
            seen.pop();
        }
    }
    // What clap's `requires` and `required` would refuse.
    let sandbox_only = a.net.is_some()
        || !a.resolve.is_empty()
        || a.allow_userns
        || !(a.rw.is_empty() && a.ro.is_empty() && a.cache.is_empty() && a.hide.is_empty());
    if a.command.is_empty()
        || (a.kill_after.is_some() && a.timeout.is_none())
        || (seen.contains(&"base") && a.worktree.is_none())
        || (seen.contains(&"wait") && a.lease.is_none())
        || (seen.contains(&"ping-timeout") && a.ping.is_none())
        || (sandbox_only && a.sandbox.is_none())
    {
        return None;
    }
    // clap takes an unset option from the environment, even an empty value,
    // which it refuses for a path.
    if root.is_none()
        && let Some(v) = env("RUNWS_ROOT")
    {
        if v.is_empty() {
            return None;
        }
        root = Some(v.into());
    }
    if store.is_none()
        && let Some(v) = env("RUNWS_STORE")
    {
        store = Some(v.into_string().ok()?);
    }
    Some(Cli { store, root, command: Command::Run(Box::new(a)) })
}

/// `run`'s arguments as clap fills them when none is given: a run's own
/// defaults ([`Request::new`]'s), the seal's, and no sandbox (a test holds
/// them to clap's).
fn defaults() -> RunArgs {
    let run = Request::new(Vec::new());
    RunArgs {
        run_id: run.run_id,
        job: run.job,
        env: run.env,
        pass: run.pass,
        env_file: run.env_file,
        path: run.path,
        ports: run.ports,
        port_host: run.port_host,
        listen: run.listen,
        inputs: run.inputs,
        fingerprint: run.fingerprint,
        allow_import: run.allow_import,
        timeout: run.timeout,
        kill_after: run.kill_after,
        lease_ttl: run.lease_ttl,
        capture: run.capture,
        json_status_fd: run.json_status_fd,
        worktree: run.worktree,
        base: run.base,
        cwd: run.cwd,
        lease: run.lease,
        wait: run.wait,
        ping: run.ping,
        ping_timeout: run.ping_timeout,
        metrics_dir: run.metrics_dir,
        memory: None,
        pids: None,
        cpu: None,
        limits: None,
        seal: false,
        seal_opts: SealArgs {
            to: None,
            archive_store: None,
            format: crate::seal::DEFAULT_FORMAT_SHOWN.into(),
            include: Vec::new(),
            max_bytes: crate::seal::DEFAULT_MAX_BYTES,
            max_files: crate::seal::DEFAULT_MAX_FILES,
            deadline: crate::seal::DEFAULT_DEADLINE,
            allow_unscanned: false,
        },
        sandbox: None,
        net: None,
        resolve: Vec::new(),
        rw: Vec::new(),
        ro: Vec::new(),
        cache: Vec::new(),
        hide: Vec::new(),
        allow_userns: false,
        command: Vec::new(),
    }
}

/// The option's value: the next word, unless it is empty (clap refuses an
/// empty path) or looks like an option.
fn value<'a>(words: &mut impl Iterator<Item = &'a OsString>) -> Option<&'a OsStr> {
    let v = words.next()?;
    match v.as_encoded_bytes().first() {
        None | Some(b'-') => None,
        Some(_) => Some(v),
    }
}

fn text<'a>(words: &mut impl Iterator<Item = &'a OsString>) -> Option<String> {
    value(words)?.to_str().map(str::to_string)
}

fn number<'a, T: std::str::FromStr>(words: &mut impl Iterator<Item = &'a OsString>) -> Option<T> {
    let v = text(words)?;
    if v.is_empty() || !v.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    v.parse().ok()
}

fn dur<'a>(words: &mut impl Iterator<Item = &'a OsString>) -> Option<Duration> {
    duration::parse(&text(words)?).ok()
}

fn one_of<'a>(words: &mut impl Iterator<Item = &'a OsString>, allowed: &[&str]) -> Option<String> {
    let v = text(words)?;
    allowed.contains(&v.as_str()).then_some(v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn os(args: &[&str]) -> Vec<OsString> {
        std::iter::once("runws").chain(args.iter().copied()).map(OsString::from).collect()
    }

    fn real_env(name: &str) -> Option<OsString> {
        std::env::var_os(name)
    }

    /// What clap makes of `args` (it reads the real environment too).
    fn by_clap(args: &[&str]) -> String {
        format!("{:?}", Cli::try_parse_from(os(args)).expect("clap accepts the line"))
    }

    #[test]
    fn agrees_with_clap_on_every_option() {
        let cases: &[&[&str]] = &[
            &["run", "--", "/bin/true"],
            &["run", "--", "sh", "-c", "echo $PORT", "--", "--job", "x"],
            &["--root", "/r", "run", "--ports", "1", "--", "/bin/true"],
            &["--store", "file:/s", "run", "--root", "/r", "--", "x"],
            &["run", "--run-id", "a.b_c-1", "--job", "nightly", "--", "./nightly.sh"],
            &["run", "--env", "A=1", "--env", "B=2", "--pass", "AWS_PROFILE", "--pass", "X", "--", "x"],
            &["run", "--env-file", "e1", "--env-file", "e2", "--path", "/opt/bin", "--", "x"],
            &["run", "--ports", "0", "--port-host", "::1", "--listen", "--", "x"],
            &["run", "--input", "a.csv", "--input", "dir/", "--fingerprint", "sha256:ab", "--", "x"],
            &["run", "--allow-import", "r1", "--sandbox", "--allow-import", "job:nightly", "--", "x"],
            &["run", "--timeout", "10m", "--kill-after", "5s", "--lease-ttl", "2s", "--", "x"],
            &["run", "--capture", "--cwd", "sub", "--", "x"],
            &["run", "--json-status-fd", "3", "--", "x"],
            &["run", "--memory", "256MiB", "--pids", "64", "--cpu", "0.5", "--", "x"],
            &["run", "--memory", "1G", "--limits=try", "--", "x"],
            &["run", "--cpu", "2", "--limits=on", "--", "x"],
            &["run", "--worktree", ".", "--base", "main", "--", "x"],
            &["run", "--lease", "k", "--wait", "1m", "--", "x"],
            &["run", "--ping", "http://h/p", "--ping-timeout", "2s", "--metrics-dir", "m", "--", "x"],
            &[
                "run",
                "--seal",
                "--to",
                "/a",
                "--format",
                "gz",
                "--include",
                "home/x",
                "--include",
                "tmp/y",
                "--",
                "x",
            ],
            &["run", "--max-bytes", "1GiB", "--max-files", "10", "--deadline", "5s", "--", "x"],
            &["run", "--seal", "--allow-unscanned", "--", "x"],
            &["run", "--seal", "--to", "s3://bucket/p", "--archive-store", "s3://bucket/q", "--", "x"],
            &["run", "--sandbox", "--net", "none", "--", "/bin/true"],
            &["run", "--sandbox=try", "--net", "host", "--rw", "/a", "--ro", "/b", "--hide", "/c", "--", "x"],
            &["run", "--sandbox", "--allow-userns", "--", "x"],
            &["run", "--sandbox=ns", "--net", "none", "--", "x"],
            &["run", "--sandbox", "--net", "allow=a.test,@p", "--resolve", "a.test=127.0.0.1", "--", "x"],
            &["run", "--sandbox=landlock", "--rw", "/a", "--", "x"],
            &[
                "run",
                "--sandbox=on",
                "--cache",
                "/c:/tmp/c",
                "--cache",
                "/d",
                "--rw",
                "/e",
                "--rw",
                "/f",
                "--",
                "x",
            ],
        ];
        for args in cases {
            let fast = parse_run(&os(args), real_env).unwrap_or_else(|| panic!("declined {args:?}"));
            assert_eq!(format!("{fast:?}"), by_clap(args), "for {args:?}");
        }
        // An option added to `run` is added here too (and to the parser).
        let mut cmd = <Cli as clap::CommandFactory>::command();
        cmd.build();
        let run = cmd.find_subcommand("run").unwrap();
        for long in run.get_arguments().filter_map(|a| a.get_long()).filter(|l| *l != "help") {
            let used = cases.iter().any(|c| {
                c.iter().any(|w| w.strip_prefix("--").is_some_and(|n| n.split('=').next() == Some(long)))
            });
            assert!(used, "--{long} of `run` is not covered by the fast path's cases");
        }
    }

    #[test]
    fn leaves_every_other_line_to_clap() {
        let cases: &[&[&str]] = &[
            &[],
            &["--version"],
            &["run", "--help", "--", "x"],
            &["run", "-h"],
            &["ls"],
            &["run", "x"],
            &["run", "--"],
            &["run", "--job=a", "--", "x"],
            &["run", "--job", "a", "--job", "b", "--", "x"],
            &["run", "--capture", "--capture", "--", "x"],
            &["run", "--sandbox", "--sandbox=try", "--", "x"],
            &["run", "--job", "-a", "--", "x"],
            &["run", "--job", "--", "x"],
            &["run", "--ports", "x", "--", "x"],
            &["run", "--ports", "70000", "--", "x"],
            &["run", "--ports", " 1", "--", "x"],
            &["run", "--ports", "+3", "--", "x"],
            &["run", "--sandbox=try", "--sandbox", "--", "x"],
            &["run", "--timeout", "soon", "--", "x"],
            &["run", "--format", "xz", "--", "x"],
            &["run", "--net", "none", "--", "x"],
            &["run", "--rw", "/a", "--", "x"],
            &["run", "--ro", "/a", "--", "x"],
            &["run", "--cache", "/tmp", "--", "x"],
            &["run", "--hide", "/a", "--", "x"],
            &["run", "--pids", "0", "--", "x"],
            &["run", "--sandbox=off", "--", "x"],
            &["run", "--sandbox=ns", "--sandbox=landlock", "--", "x"],
            &["run", "--cpu", "0", "--", "x"],
            &["run", "--memory", "lots", "--", "x"],
            &["run", "--limits", "try", "--", "x"],
            &["run", "--limits=off", "--", "x"],
            &["run", "--limits=try", "--limits=on", "--", "x"],
            &["run", "--allow-userns", "--", "x"],
            &["run", "--net", "--sandbox", "--", "x"],
            &["run", "--sandbox", "--net", "--", "x"],
            &["run", "--kill-after", "1s", "--", "x"],
            &["run", "--base", "main", "--", "x"],
            &["run", "--wait", "1s", "--", "x"],
            &["run", "--ping-timeout", "1s", "--", "x"],
            &["run", "--nonsense", "--", "x"],
            &["--ports", "1", "run", "--", "x"],
            &["run", "run", "--", "x"],
            &["run", "--root", "/a", "--root", "/b", "--", "x"],
        ];
        for args in cases {
            assert!(parse_run(&os(args), |_| None).is_none(), "took {args:?}");
        }
    }

    /// Whatever the words, when the fast path takes a line clap takes it
    /// too, to the same result (random lines from a pool of tricky words).
    #[test]
    fn never_takes_a_line_clap_refuses_or_reads_otherwise() {
        let pool = [
            "run",
            "--",
            "x",
            "-a",
            "--job",
            "a",
            "--ports",
            "1",
            "70000",
            "--sandbox",
            "--sandbox=try",
            "--allow-userns",
            "--net",
            "none",
            "--rw",
            "/a",
            "--cache",
            "/c",
            "--timeout",
            "1s",
            "--kill-after",
            "--lease",
            "k",
            "--wait",
            "--base",
            "main",
            "--worktree",
            ".",
            "--root",
            "/r",
            "--store",
            "s",
            "--capture",
            "--listen",
            "--env",
            "A=1",
            "--format",
            "gz",
            "--input",
            "--help",
            "-h",
            "--job=b",
            "",
        ];
        let mut seed: u64 = 0x2545_f491_4f6c_dd1d;
        let mut next = |n: usize| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed % n as u64) as usize
        };
        let mut taken = 0;
        for _ in 0..40_000 {
            let len = 2 + next(7);
            let mut line: Vec<&str> = vec!["run"];
            line.extend((0..len).map(|_| pool[next(pool.len())]));
            if next(2) == 0 {
                line.insert(line.len() - 1, "--");
            }
            if let Some(fast) = parse_run(&os(&line), real_env) {
                taken += 1;
                let clap = Cli::try_parse_from(os(&line)).map(|c| format!("{c:?}"));
                assert_eq!(Ok(format!("{fast:?}")), clap.map_err(|e| e.to_string()), "for {line:?}");
            }
        }
        assert!(taken > 1_000, "the fast path took only {taken} lines");
    }

    #[test]
    fn root_and_store_come_from_the_environment_as_clap_takes_them() {
        let env = |root: &'static str, store: &'static str| {
            move |name: &str| match name {
                "RUNWS_ROOT" if !root.is_empty() || store == "empty-root" => Some(OsString::from(root)),
                "RUNWS_STORE" if !store.is_empty() && store != "empty-root" => Some(OsString::from(store)),
                _ => None,
            }
        };
        let args = os(&["run", "--", "x"]);
        let cli = parse_run(&args, env("/from-env", "file:/s")).unwrap();
        assert_eq!(cli.root, Some(PathBuf::from("/from-env")));
        assert_eq!(cli.store.as_deref(), Some("file:/s"));
        // The flag wins over the environment.
        let cli = parse_run(&os(&["--root", "/flag", "run", "--", "x"]), env("/from-env", "")).unwrap();
        assert_eq!(cli.root, Some(PathBuf::from("/flag")));
        assert_eq!(cli.store, None);
        // An empty RUNWS_ROOT is clap's error to report.
        assert!(parse_run(&args, env("", "empty-root")).is_none());
    }
}
