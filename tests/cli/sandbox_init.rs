//! The process between runws and a sandboxed command (the init) hands on
//! nothing of runws: checked from inside the sandbox and from outside it,
//! as root and as `nobody`.

use crate::harness::*;
use crate::sandbox::{Retry, Who, everyone, runws_as, skip};

/// The init between runws and the command (run inside runws's forked child
/// as root, executed afresh otherwise) hands on nothing of runws: not the
/// secrets in runws's environment or memory (through any /proc entry of the
/// inits), not a descriptor beyond the standard three, not a variable
/// outside the documented set.
#[test]
fn nothing_of_runws_reaches_the_sandboxed_command() {
    for who in everyone() {
        if skip(who, "nothing_of_runws_reaches_the_sandboxed_command") {
            continue;
        }
        let env = Env::new();
        let secret = fake_secret("runws-parent-secret");
        let probe = r#"
            for p in /proc/[0-9]*; do
              for f in environ cmdline; do cat "$p/$f" 2>/dev/null | tr '\0' '\n'; done
            done
            echo "FDS $(ls /proc/self/fd | sort -n | tr '\n' ' ')"
            echo "ENV $(env | cut -d= -f1 | sort | tr '\n' ' ')"
        "#;
        // A secret in runws's environment, and one in its arguments (a store
        // URL can hold a password; this one only names a directory).
        let store = format!("file:{}", env.path(&fake_secret("store-secret")).display());
        let arg_secret = store.rsplit('/').next().unwrap().to_string();
        let mut out = None;
        for verb in ["audit", "run"] {
            if verb == "audit" && who != Who::Me {
                continue;
            }
            let mut args = vec!["--store", store.as_str(), verb];
            if verb == "run" {
                args.extend(["--sandbox", "--net", "none"]);
            }
            args.extend(["--", "sh", "-c", probe]);
            let mut cmd = runws_as(&env, who, &args);
            cmd.env("AWS_SECRET_ACCESS_KEY", &secret);
            let o = Out::from(cmd.output_retrying());
            o.ok();
            // An audit runs the command in the caller's own environment, by
            // design: only runws's arguments must stay out of its sight.
            let hidden = if verb == "audit" { vec![&arg_secret] } else { vec![&secret, &arg_secret] };
            for s in hidden {
                assert!(
                    !o.stdout.contains(s.as_str()),
                    "{verb} as {who:?}: the command read {s}:\n{}",
                    o.stdout
                );
            }
            out = Some(o);
        }
        let out = out.unwrap();
        // What a plain run's command sees (the shell sets PWD, SHLVL and _
        // itself in both): the sandbox adds nothing. Descriptors: the
        // standard three and the one `ls` reads /proc/self/fd with; a
        // plain run also passes on whatever else runws was given, a
        // sandboxed one nothing more.
        let plain = Out::from(runws_as(&env, who, &["run", "--", "sh", "-c", probe]).output_retrying());
        let line =
            |o: &Out, what: &str| o.stdout.lines().find_map(|l| l.strip_prefix(what)).unwrap().to_string();
        assert_eq!(line(&out, "ENV "), line(&plain, "ENV "), "as {who:?}");
        assert_eq!(line(&out, "FDS "), "0 1 2 3 ", "as {who:?}");
        assert!(line(&plain, "FDS ").starts_with("0 1 2 3 "), "as {who:?}");
    }
}

/// A run of `sleep 30` in a sandbox as `who`, alive: runws, and the pids of
/// the process runws recorded as its child and of that process's first
/// child. As root, runws forks its child straight into the new PID
/// namespace (it is PID 1 there); otherwise the child is an outer init that
/// makes PID 1. Either way both are inits, between runws and the command.
fn live_inits(env: &Env, who: Who) -> (std::process::Child, Vec<i32>) {
    let runws =
        runws_as(env, who, &["run", "--run-id", "live", "--sandbox", "--", "sleep", "30"]).spawn_retrying();
    let manifest = env.run_dir("live").join("manifest.json");
    let recorded = || {
        let m: serde_json::Value = serde_json::from_slice(&std::fs::read(&manifest).ok()?).ok()?;
        m["child"]["pid"].as_i64().map(|p| p as i32)
    };
    let outer = found(recorded).expect("the run recorded its child");
    let status = std::fs::read_to_string(format!("/proc/{outer}/status")).unwrap();
    let nspid = status.lines().find_map(|l| l.strip_prefix("NSpid:")).unwrap_or("").to_string();
    if who == Who::Me && is_root() {
        assert!(nspid.trim_end().ends_with(" 1") || nspid.trim_end().ends_with("\t1"), "NSpid:{nspid}");
    }
    let first_child = || {
        let kids = std::fs::read_to_string(format!("/proc/{outer}/task/{outer}/children")).ok()?;
        kids.split_whitespace().next()?.parse::<i32>().ok()
    };
    let pid1 =
        found(first_child).unwrap_or_else(|| panic!("as {who:?}: the recorded child never had a child"));
    (runws, vec![outer, pid1])
}

/// What `f` finds within 10 seconds.
fn found<T>(mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let mut got = None;
    wait_until(std::time::Duration::from_secs(10), || {
        got = f();
        got.is_some()
    });
    got
}

fn end(mut runws: std::process::Child) {
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(runws.id() as i32), nix::sys::signal::Signal::SIGTERM)
        .unwrap();
    runws.wait().unwrap();
}

/// The processes between runws and the sandboxed command hold none of
/// runws's own descriptors (the port ledger, the run directory, the guard's
/// socket, the signalfd, the plan): while a run lives, every descriptor of
/// its inits is a standard stream, a pipe, or one runws itself was given.
#[test]
fn the_sandbox_inits_hold_none_of_runws_descriptors() {
    for who in everyone() {
        if skip(who, "the_sandbox_inits_hold_none_of_runws_descriptors") {
            continue;
        }
        let env = Env::new();
        let (runws, inits) = live_inits(&env, who);
        std::thread::sleep(std::time::Duration::from_millis(100));
        for pid in &inits {
            for fd in std::fs::read_dir(format!("/proc/{pid}/fd")).unwrap() {
                let target = std::fs::read_link(fd.unwrap().path()).unwrap_or_default();
                let t = target.to_string_lossy();
                let foreign = ["ports.ledger", "/runs/", "socket:", "anon_inode:", "memfd:"];
                assert!(!foreign.iter().any(|f| t.contains(f)), "as {who:?}, init {pid} holds {t}");
            }
        }
        end(runws);
    }
}

/// The inits are as closed to the user's other processes as runws itself,
/// whoever started runws: not dumpable, so their memory, environment and
/// descriptors under /proc belong to root, and another process of the same
/// user (another run's command among them) can neither read nor trace them.
#[test]
fn the_sandbox_inits_are_closed_to_the_users_other_processes() {
    use std::os::unix::fs::MetadataExt;
    for who in everyone() {
        if skip(who, "the_sandbox_inits_are_closed_to_the_users_other_processes") {
            continue;
        }
        let env = Env::new();
        let (runws, inits) = live_inits(&env, who);
        // As root the recorded child is PID 1 and its child is the command
        // (once it has executed `sleep`, the command's own business): only
        // the processes that are runws's code are inits.
        let runws_code = |pid: &i32| {
            std::fs::read_link(format!("/proc/{pid}/exe"))
                .is_ok_and(|e| e.file_name().is_some_and(|n| n.to_string_lossy().starts_with("runws")))
        };
        let inits: Vec<i32> = inits.into_iter().filter(runws_code).collect();
        assert!(!inits.is_empty(), "as {who:?}: no init found");
        'pids: for pid in &inits {
            for file in ["environ", "mem", "fd"] {
                let meta = std::fs::metadata(format!("/proc/{pid}/{file}"));
                // On a loaded machine the command's own process may execute
                // `sleep` between the listing and this read: then it is no
                // longer runws's code, and its files are its user's.
                if !runws_code(pid) {
                    continue 'pids;
                }
                let meta = meta.unwrap_or_else(|e| panic!("as {who:?}: /proc/{pid}/{file}: {e}"));
                assert_eq!(meta.uid(), 0, "as {who:?}: /proc/{pid}/{file} of an init belongs to its user");
            }
        }
        end(runws);
    }
}

/// The sandboxed command holds no capability, whoever started runws: none
/// effective, permitted, inheritable or ambient, and an empty bounding set
/// (so nothing it executes can gain one back).
#[test]
fn the_sandboxed_command_holds_no_capability() {
    for who in everyone() {
        if skip(who, "the_sandboxed_command_holds_no_capability") {
            continue;
        }
        let env = Env::new();
        let probe = "grep -E '^Cap(Inh|Prm|Eff|Bnd|Amb):' /proc/self/status";
        let out =
            Out::from(runws_as(&env, who, &["run", "--sandbox", "--", "sh", "-c", probe]).output_retrying());
        out.ok();
        let lines: Vec<&str> = out.stdout.lines().collect();
        assert_eq!(lines.len(), 5, "{out:?}");
        for line in lines {
            let value = line.split_whitespace().nth(1).unwrap();
            assert!(value.chars().all(|c| c == '0'), "{who:?}: {line}");
        }
    }
}

/// What runws makes before the run exists (as an ordinary user, the user
/// and network namespaces, through a helper process) goes when the run is
/// refused: a run id used already leaves no process of runws's behind.
#[test]
fn a_sandboxed_run_refused_before_it_starts_leaves_no_process_behind() {
    for who in everyone() {
        if skip(who, "a_sandboxed_run_refused_before_it_starts_leaves_no_process_behind") {
            continue;
        }
        let env = Env::new();
        // Unique on this machine: a helper shares runws's memory, so its
        // command line is runws's, with this id in it.
        let id = format!("twice-{}", std::process::id());
        runws_as(&env, who, &["run", "--run-id", &id, "--", "true"]).output_retrying();
        for net in ["none", "host"] {
            let out = Out::from(
                runws_as(&env, who, &["run", "--run-id", &id, "--sandbox", "--net", net, "--", "true"])
                    .output_retrying(),
            );
            out.code(125).stderr_has("already exists");
            let holding = || {
                std::fs::read_dir("/proc").unwrap().flatten().any(|p| {
                    std::fs::read(p.path().join("cmdline"))
                        .is_ok_and(|c| c.windows(id.len()).any(|w| w == id.as_bytes()))
                })
            };
            assert!(wait_until(std::time::Duration::from_secs(10), || !holding()), "as {who:?}, --net {net}");
        }
    }
}
