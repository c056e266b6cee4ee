//! The Landlock backend of `--sandbox`, attacked from inside as root and as
//! `nobody`: what the command can read, write, signal and reach, checked by
//! the command itself; the automatic choice where user namespaces are
//! blocked (a user namespace whose limit of nested ones is 0, as
//! `user.max_user_namespaces=0` sets on a host); and the refusals of what
//! Landlock cannot express.

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::harness::*;
use crate::sandbox::{Retry, Who, everyone, runws_as};

/// True (after saying so) when this kernel offers no Landlock.
fn no_landlock(env: &Env, who: Who) -> bool {
    let out =
        Out::from(runws_as(env, who, &["run", "--sandbox=landlock", "--", "/bin/true"]).output_retrying());
    if out.code == Some(125) && out.stderr.contains("no Landlock") {
        eprintln!("skipped: {}", out.stderr.trim());
        return true;
    }
    false
}

/// Tries each access from inside and prints `name yes` or `name no<errno>`.
const PROBE: &str = r#"
import os, signal, socket, subprocess, sys
public, hidden, rw, home, root, other, victim, disk = sys.argv[1:9]
def can(name, f):
    try:
        f()
        print(name, "yes")
    except OSError as e:
        print(name, "no%d" % e.errno)
run = os.environ["RUNWS_DIR"]
can("write_work", lambda: open("w.txt", "w").write("x"))
can("write_manifest", lambda: open(run + "/manifest.json", "a"))
can("create_top", lambda: open(run + "/planted", "w"))
can("write_tmp", lambda: open("/tmp/runws-landlock-probe-%d" % os.getpid(), "w"))
can("write_rw", lambda: open(rw + "/f", "w").write("x"))
can("read_public", lambda: open(public).read())
can("read_hidden", lambda: open(hidden).read())
can("list_home", lambda: os.listdir(home))
can("list_root", lambda: os.listdir(root))
can("read_other_run", lambda: open(other).read())
can("dev_null", lambda: open("/dev/null", "w").write("x"))
if disk:
    can("read_disk", lambda: open(disk, "rb").read(1))
can("read_shadow", lambda: open("/etc/shadow", "rb").read(1))
# Root's other secrets, where this host has them.
for p in ["/etc/security/opasswd", "/var/backups/shadow.bak", "/var/backups/gshadow.bak", "/etc/ssl/private", "/etc/sudoers.d"]:
    if os.path.lexists(p):
        can("secret:" + p, lambda p=p: os.listdir(p) if os.path.isdir(p) else open(p, "rb").read(1))
can("signal_outside", lambda: os.kill(int(victim), signal.SIGURG))
can("see_outside", lambda: os.stat("/proc/%s" % victim))
can("environ_outside", lambda: open("/proc/%s/environ" % victim, "rb").read())
print("uid", os.getuid())
can("setuid_mode", lambda: os.chmod("w.txt", 0o4755))
can("exec", lambda: subprocess.run(["/bin/true"], check=True))
print("guard", "yes" if subprocess.call(["runws", "put", "w", "w.txt"]) == 0 else "no")
caps = [l.split()[1] for l in open("/proc/self/status") if l.startswith("CapEff:")][0]
print("caps", caps)
"#;

/// A block device of the host, to try to read raw.
fn a_disk() -> String {
    let Ok(rd) = std::fs::read_dir("/sys/block") else { return String::new() };
    for e in rd.flatten() {
        let name = e.file_name().into_string().unwrap_or_default();
        if name.starts_with("loop") || name.starts_with("ram") {
            continue;
        }
        let dev = format!("/dev/{name}");
        if Path::new(&dev).exists() {
            return dev;
        }
    }
    String::new()
}

fn results(out: &Out) -> std::collections::BTreeMap<String, String> {
    out.stdout
        .lines()
        .filter_map(|l| l.split_once(' '))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
fn a_landlocked_command_writes_only_its_run_and_reads_nothing_hidden() {
    if !Path::new("/usr/bin/python3").exists() {
        eprintln!("skipped: /usr/bin/python3 is not installed");
        return;
    }
    let uid_now = nix::unistd::getuid().as_raw().to_string();
    for who in everyone() {
        let env = Env::new();
        if no_landlock(&env, who) {
            return;
        }
        // Another run of the same ROOT, whose manifest the command must not read.
        Out::from(runws_as(&env, who, &["run", "--run-id", "other", "--", "/bin/true"]).output_retrying())
            .ok();
        let other = env.run_dir("other").join("manifest.json");
        assert!(other.exists(), "the other run was made");
        let public = env.path("public.txt");
        let hidden = env.path("hidden.txt");
        let rw = env.path("rw");
        std::fs::write(&public, "public").unwrap();
        std::fs::write(&hidden, "secret").unwrap();
        std::fs::create_dir_all(&rw).unwrap();
        std::fs::write(env.home.join("in-home"), "secret").unwrap();
        for p in [&public, &hidden] {
            std::fs::set_permissions(p, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
        }
        std::fs::set_permissions(&rw, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
        // A process of the same user outside the run.
        let mut victim = Command::new("sleep");
        victim.arg("60");
        if who == Who::Nobody {
            victim.uid(65534).gid(65534);
        }
        let mut victim = victim.spawn().unwrap();
        // And with openat2 refused, as an old container profile refuses it:
        // the rules' paths are then opened another way, as strictly.
        for (probe, refused) in [("probe", None), ("probe-no-openat2", Some(nix::libc::SYS_openat2))] {
            let args = [
                "run",
                "--sandbox=landlock",
                "--run-id",
                probe,
                "--rw",
                rw.to_str().unwrap(),
                "--hide",
                hidden.to_str().unwrap(),
                "--",
                "/usr/bin/python3",
                "-c",
                PROBE,
                public.to_str().unwrap(),
                hidden.to_str().unwrap(),
                rw.to_str().unwrap(),
                env.home.to_str().unwrap(),
                env.root.to_str().unwrap(),
                other.to_str().unwrap(),
                &victim.id().to_string(),
                &a_disk(),
            ];
            let mut cmd = runws_as(&env, who, &args);
            if let Some(nr) = refused {
                // SAFETY: the closure only calls prctl.
                unsafe { cmd.pre_exec(move || refuse_call(nr)) };
            }
            let out = Out::from(cmd.output_retrying());
            out.ok();
            let r = results(&out);
            let say =
                |k: &str| r.get(k).cloned().unwrap_or_else(|| panic!("no {k} as {who:?} ({probe}): {out:?}"));
            assert_eq!(say("write_work"), "yes", "{who:?}");
            assert_eq!(say("write_rw"), "yes", "{who:?}");
            assert_eq!(say("read_public"), "yes", "{who:?}");
            assert_eq!(say("dev_null"), "yes", "{who:?}");
            assert_eq!(say("exec"), "yes", "{who:?}");
            assert_eq!(say("guard"), "yes", "{who:?}: the guard works over its socket");
            for denied in [
                "write_manifest",
                "create_top",
                "write_tmp",
                "read_hidden",
                "list_home",
                "list_root",
                "read_other_run",
                "read_shadow",
                "signal_outside",
                "environ_outside",
                "setuid_mode",
            ] {
                assert!(say(denied).starts_with("no"), "{denied} as {who:?}: {out:?}");
            }
            for (k, v) in r.iter().filter(|(k, _)| k.starts_with("secret:")) {
                assert!(v.starts_with("no"), "{k} as {who:?} ({probe}): {out:?}");
            }
            if let Some(disk) = r.get("read_disk") {
                assert!(disk.starts_with("no"), "a raw disk as {who:?}: {out:?}");
            }
            assert_eq!(say("caps"), "0000000000000000", "{who:?} holds capabilities");
            // What Landlock does not do: other processes are visible (not
            // reachable), and a root command stays uid 0 (without capabilities).
            assert_eq!(say("see_outside"), "yes", "{who:?}");
            assert_eq!(say("uid"), if who == Who::Nobody { "65534" } else { &uid_now }, "{who:?}");
        }
        let _ = victim.kill();
        let _ = victim.wait();
        // The record names the backend and what enforces each protection.
        let m = env.manifest("probe");
        let sb = &m["sandbox"];
        assert_eq!(sb["backend"], "landlock");
        assert_eq!(sb["mode"], "landlock");
        assert!(sb["landlock"]["abi"].as_u64().unwrap() >= 1);
        assert!(
            sb["enforced"]
                .as_array()
                .unwrap()
                .iter()
                .any(|e| e["by"].as_str().unwrap().starts_with("Landlock"))
        );
        assert!(!sb["not_covered"].as_array().unwrap().is_empty());
        assert_eq!(m["outputs"][0]["name"], "w");
        assert!(!env.run_dir("probe").join("planted").exists());
        env.run(&["show", "probe"]).ok().stdout_has("landlock ABI");
    }
}

const NET_PROBE: &str = r#"
import socket, sys
port = int(sys.argv[1])
def can(name, f):
    try:
        f()
        print(name, "yes")
    except OSError as e:
        print(name, "no%d" % e.errno)
can("unix", lambda: socket.socket(socket.AF_UNIX, socket.SOCK_STREAM).close())
can("tcp4", lambda: socket.create_connection(("127.0.0.1", port), timeout=5).close())
can("udp4", lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM).close())
can("tcp6", lambda: socket.socket(socket.AF_INET6, socket.SOCK_STREAM).close())
can("raw", lambda: socket.socket(socket.AF_PACKET, socket.SOCK_RAW).close())
can("netlink", lambda: socket.socket(socket.AF_NETLINK, socket.SOCK_RAW).close())
"#;

/// `--net none` under Landlock: no socket but a unix one, so no TCP, UDP or
/// raw packet, to the host's loopback included; `--net host` reaches it.
#[test]
fn net_none_leaves_only_unix_sockets_and_host_reaches_the_host() {
    if !Path::new("/usr/bin/python3").exists() {
        return;
    }
    let env = Env::new();
    if no_landlock(&env, Who::Me) {
        return;
    }
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port().to_string();
    std::thread::spawn(move || {
        for s in listener.incoming() {
            drop(s);
        }
    });
    let probe = |net: &str, id: &str| {
        env.run(&[
            "run",
            "--sandbox=landlock",
            "--net",
            net,
            "--run-id",
            id,
            "--",
            "/usr/bin/python3",
            "-c",
            NET_PROBE,
            &port,
        ])
    };
    let out = probe("none", "none");
    out.ok();
    let r = results(&out);
    assert_eq!(r["unix"], "yes", "{out:?}");
    for k in ["tcp4", "udp4", "tcp6", "raw", "netlink"] {
        assert_eq!(r[k], "no97", "{k}: {out:?}");
    }
    let out = probe("host", "host");
    out.ok();
    assert_eq!(results(&out)["tcp4"], "yes", "{out:?}");
}

/// Runs `argv` as `uid` in a new user namespace whose limit of nested user
/// namespaces is 0: what a host with `user.max_user_namespaces=0` gives.
const BLOCKED: &str = r#"
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
uid = int(sys.argv[1])
ready_r, ready_w = os.pipe()
go_r, go_w = os.pipe()
pid = os.fork()
if pid == 0:
    if libc.unshare(0x10000000) != 0:
        os._exit(90)
    os.write(ready_w, b"x")
    os.read(go_r, 1)
    with open("/proc/sys/user/max_user_namespaces", "w") as f:
        f.write("0")
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)
    os.execv(sys.argv[2], sys.argv[2:])
os.read(ready_r, 1)
for name in ("uid_map", "gid_map"):
    with open("/proc/%d/%s" % (pid, name), "w") as f:
        f.write("0 0 65536")
os.write(go_w, b"x")
_, status = os.waitpid(pid, 0)
sys.exit(os.waitstatus_to_exitcode(status))
"#;

/// Where user namespaces are blocked, `--sandbox` picks Landlock and says
/// why (as root and as `nobody`), and `--sandbox=ns` is refused.
#[test]
fn sandbox_falls_back_to_landlock_where_user_namespaces_are_blocked() {
    if !is_root() || !Path::new("/usr/bin/python3").exists() {
        eprintln!("skipped: needs root (to make the blocking user namespace) and python3");
        return;
    }
    let env = Env::new();
    if no_landlock(&env, Who::Me) {
        return;
    }
    // Run as nobody and as root inside: the binary, ROOT and HOME reachable.
    let _ = runws_as(&env, Who::Nobody, &["--version"]).output_retrying();
    let bin = env.path("runws-copy");
    let blocked = |uid: &str, root: &Path, args: &[&str]| {
        let mut c = Command::new("/usr/bin/python3");
        c.args(["-c", BLOCKED, uid, bin.to_str().unwrap()])
            .args(args)
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .env("HOME", &env.home)
            .env("RUNWS_ROOT", root)
            .current_dir(env.tmp.path());
        Out::from(c.output().unwrap())
    };
    for (uid, root) in [("65534", env.path("root-nobody")), ("0", env.path("root-zero"))] {
        std::fs::create_dir_all(&root).unwrap();
        std::fs::set_permissions(&root, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
        let out =
            blocked(uid, &root, &["run", "--sandbox", "--run-id", "auto", "--", "sh", "-c", "echo ran > f"]);
        if out.code == Some(90) {
            eprintln!("skipped: cannot make the blocking user namespace");
            return;
        }
        out.ok().stderr_has("using Landlock");
        let m: serde_json::Value =
            serde_json::from_slice(&std::fs::read(root.join("runs/auto/manifest.json")).unwrap()).unwrap();
        assert_eq!(m["sandbox"]["backend"], "landlock", "as {uid}");
        assert!(m["sandbox"]["chosen_because"].as_str().unwrap().contains("max_user_namespaces"), "{m}");
        assert_eq!(std::fs::read_to_string(root.join("runs/auto/work/f")).unwrap(), "ran\n");
        // Named, namespaces are refused here rather than replaced.
        blocked(uid, &root, &["run", "--sandbox=ns", "--", "/bin/true"]).code(125);
        // `--net allow` fails closed: never Landlock (which cannot hold a
        // command to one address), never the host's network, even with try.
        for mode in ["--sandbox", "--sandbox=try", "--sandbox=ns"] {
            let out = blocked(uid, &root, &["run", mode, "--net", "allow=a.test", "--", "/bin/true"]);
            out.code(125).one_line_error();
            assert!(
                out.stderr.contains("--net allow") || out.stderr.contains("namespace"),
                "{mode}: {}",
                out.stderr
            );
        }
    }
}

/// What Landlock cannot express is refused before anything runs.
#[test]
fn what_landlock_cannot_express_is_refused() {
    let env = Env::new();
    if no_landlock(&env, Who::Me) {
        return;
    }
    let dir = env.path("d");
    std::fs::create_dir_all(dir.join("inner")).unwrap();
    let d = dir.to_str().unwrap().to_string();
    let inner = dir.join("inner").to_str().unwrap().to_string();
    let refused = |extra: &[&str]| {
        let mut args = vec!["run", "--sandbox=landlock"];
        args.extend_from_slice(extra);
        args.extend_from_slice(&["--", "sh", "-c", "echo ran > ran"]);
        env.run(&args)
    };
    refused(&["--cache", &format!("{d}:/mnt/cache")]).code(125).one_line_error().stderr_has("another path");
    refused(&["--rw", &d, "--ro", &inner]).code(125).one_line_error().stderr_has("cannot take access back");
    refused(&["--rw", &d, "--hide", &inner]).code(125).one_line_error();
    // None of them ran the command.
    for id in env.run_ids() {
        assert!(!env.run_dir(&id).join("work/ran").exists(), "run {id} ran its command");
    }
}

/// Without a PID namespace a process the command leaves behind outlives the
/// run, as for a plain run; a control group (`--pids`) ends it.
#[test]
fn leftovers_outlive_a_landlocked_run_unless_it_has_a_group() {
    let env = Env::new();
    if no_landlock(&env, Who::Me) {
        return;
    }
    let marker = format!("landlock-left-{}", std::process::id());
    let script = format!("setsid sh -c 'sleep 30; echo {marker}' </dev/null >/dev/null 2>&1 &");
    env.run(&["run", "--sandbox=landlock", "--", "sh", "-c", &script]).ok();
    // Seen once it is past its execs (a process in the middle of one shows
    // no command line for a moment).
    let mut left = Vec::new();
    let seen = wait_until(std::time::Duration::from_secs(10), || {
        left = crate::sandbox::processes_with(&marker);
        !left.is_empty()
    });
    assert!(seen, "the leftover should still run");
    for pid in left {
        // The leftover leads its own session and process group.
        let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL);
    }
    let grouped = env.run(&["run", "--sandbox=landlock", "--pids", "100", "--", "sh", "-c", &script]);
    if grouped.code == Some(125) {
        eprintln!("skipped the group half: {}", grouped.stderr.trim());
        return;
    }
    grouped.ok();
    assert!(crate::sandbox::processes_with(&marker).is_empty(), "the group killed the leftover");
}

/// With `--net none` the host's file-system unix sockets stay reachable
/// under Landlock before ABI 9 (the namespace backend hides them): the
/// record says so, and this test holds the README to it.
#[test]
fn host_unix_sockets_stay_reachable_under_landlock() {
    if !Path::new("/usr/bin/python3").exists() {
        return;
    }
    let env = Env::new();
    if no_landlock(&env, Who::Me) {
        return;
    }
    let sock = env.path("host.sock");
    let listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
    std::thread::spawn(move || {
        for s in listener.incoming() {
            drop(s);
        }
    });
    let code = format!(
        "import socket; s = socket.socket(socket.AF_UNIX); s.connect({:?}); print('CONNECTED')",
        sock.to_str().unwrap()
    );
    let out = env.run(&[
        "run",
        "--sandbox=landlock",
        "--net",
        "none",
        "--run-id",
        "u",
        "--",
        "/usr/bin/python3",
        "-c",
        &code,
    ]);
    out.ok().stdout_has("CONNECTED");
    let m = env.manifest("u");
    let gaps = m["sandbox"]["not_covered"].as_array().unwrap();
    assert!(gaps.iter().any(|g| g.as_str().unwrap().contains("unix sockets")), "{m}");
}

/// A hidden path below a granted directory stays hidden: `--ro` of a
/// directory with a `--hide` inside it, or of one that holds HOME and ROOT
/// (or, as root, of `/etc`), grants every sibling on the way down instead
/// of the whole directory, as the walk from `/` does; a writable directory,
/// which cannot be split that way, is refused when it holds one.
#[test]
fn hidden_paths_below_a_granted_directory_stay_hidden() {
    let env = Env::new();
    if no_landlock(&env, Who::Me) {
        return;
    }
    env.run(&["run", "--run-id", "other", "--", "sh", "-c", "echo other-secret > f"]).ok();
    let other = env.run_dir("other").join("work/f");
    let data = env.path("data");
    std::fs::create_dir_all(data.join("secret")).unwrap();
    std::fs::write(data.join("secret/x"), "data-secret").unwrap();
    std::fs::write(data.join("open"), "data-open").unwrap();
    std::fs::write(env.home.join("in-home"), "home-secret").unwrap();
    let tmp = env.tmp.path().to_str().unwrap().to_string();
    let d = data.to_str().unwrap().to_string();
    let cat = |extra: &[&str], paths: &[&Path]| {
        let mut args = vec!["run", "--sandbox=landlock"];
        args.extend_from_slice(extra);
        let script = paths.iter().map(|p| format!("cat '{}';", p.display())).collect::<String>();
        args.extend_from_slice(&["--", "sh", "-c", &script]);
        env.run(&args)
    };
    let out = cat(
        &["--ro", &d, "--hide", &data.join("secret").to_string_lossy()],
        &[&data.join("open"), &data.join("secret/x")],
    );
    assert!(out.stdout.contains("data-open"), "{out:?}");
    assert!(!out.stdout.contains("data-secret"), "--hide inside --ro was readable: {out:?}");
    let out = cat(&["--ro", &tmp], &[&data.join("open"), &env.home.join("in-home"), &other]);
    assert!(out.stdout.contains("data-open"), "{out:?}");
    assert!(!out.stdout.contains("home-secret"), "HOME inside --ro was readable: {out:?}");
    assert!(!out.stdout.contains("other-secret"), "another run inside --ro was readable: {out:?}");
    cat(&["--rw", &tmp], &[&other]).code(125).one_line_error().stderr_has("hidden");
    cat(&["--cache", &tmp], &[&other]).code(125).one_line_error();
    if is_root() {
        let out = env.run(&["run", "--sandbox=landlock", "--ro", "/etc", "--", "head", "-c1", "/etc/shadow"]);
        assert_ne!(out.code, Some(0), "/etc/shadow was readable through --ro /etc: {out:?}");
    }
    assert_eq!(std::fs::read_to_string(&other).unwrap(), "other-secret\n");
}
/// The run directory's top level is the command's to read, not to change:
/// a command that takes the write and read bits off it and its manifest
/// (the owner's right, which Landlock does not restrict) must not keep
/// runws from recording the run's end, nor `show` from reading it.
#[test]
fn a_landlocked_command_cannot_keep_its_end_from_being_recorded() {
    for who in everyone() {
        if who == Who::Me && is_root() {
            // root's runws reads and writes whatever the modes say.
            continue;
        }
        let env = Env::new();
        if no_landlock(&env, who) {
            return;
        }
        let script = "chmod 0 \"$RUNWS_DIR\"/manifest.json \"$RUNWS_DIR\"/.manifest.json.final; \
                      chmod 0500 \"$RUNWS_DIR\"; exit 7";
        let out = Out::from(
            runws_as(&env, who, &["run", "--sandbox=landlock", "--run-id", "m", "--", "sh", "-c", script])
                .output_retrying(),
        );
        assert_eq!(out.code, Some(7), "the command's status as {who:?}: {out:?}");
        Out::from(runws_as(&env, who, &["show", "m"]).output_retrying()).ok().stdout_has("exit");
    }
}

/// The user's other terminals (`/dev/pts/N` of the same owner: a shell in
/// another window, where a password may be typed) are out of reach: the
/// command can neither read what is typed there nor write to it. The
/// namespace backend gives the command a devpts of its own; Landlock cannot
/// tell the command's own terminals from the user's, so it opens none.
#[test]
fn a_landlocked_command_cannot_open_another_terminal_of_its_user() {
    if !Path::new("/usr/bin/python3").exists() {
        return;
    }
    for who in everyone() {
        let env = Env::new();
        if no_landlock(&env, who) {
            return;
        }
        let pty = nix::pty::openpty(None, None).unwrap();
        let name =
            std::fs::read_link(format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&pty.slave)))
                .unwrap();
        if who == Who::Nobody {
            std::os::unix::fs::chown(&name, Some(65534), None).unwrap();
        }
        let code = format!(
            "import os\ntry:\n    os.open({:?}, os.O_RDWR | os.O_NOCTTY)\n    print('OPENED')\nexcept OSError as e:\n    print('refused', e.errno)",
            name.to_str().unwrap()
        );
        let out = Out::from(
            runws_as(&env, who, &["run", "--sandbox=landlock", "--", "/usr/bin/python3", "-c", &code])
                .output_retrying(),
        );
        out.ok().stdout_has("refused");
    }
}

/// Without a PID namespace a process group the command leaves behind
/// outlives the run: `runws claim pgid` inside a Landlock run is recorded
/// for the reaper, as in a plain run (the namespace backend may drop it,
/// its groups ending with the run).
#[test]
fn a_landlocked_claim_of_a_process_group_is_recorded() {
    let env = Env::new();
    if no_landlock(&env, Who::Me) {
        return;
    }
    let marker = format!("landlock-claim-{}", std::process::id());
    // The claim waits until the background shell has made its session (it
    // may not have yet when `&` returns), as a careful caller does.
    let script = format!(
        "setsid sh -c 'sleep 30; echo {marker}' </dev/null >/dev/null 2>&1 & pid=$!; \
         for i in $(seq 500); do [ \"$(cut -d' ' -f5 /proc/$pid/stat)\" = $pid ] && break; sleep 0.01; done; \
         runws claim pgid $pid && echo claimed $pid"
    );
    let out = env.run(&["run", "--sandbox=landlock", "--run-id", "c", "--", "sh", "-c", &script]);
    for pid in crate::sandbox::processes_with(&marker) {
        let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL);
    }
    out.ok().stdout_has("claimed");
    let m = env.manifest("c");
    let claims = m["claims"].as_array().cloned().unwrap_or_default();
    assert!(claims.iter().any(|c| c["kind"] == "pgid"), "the group was not recorded: {m}");
}

/// What Landlock leaves to file permissions, held to the README: the
/// command may change the mode and times of any file its user owns, hidden
/// ones included (Landlock restricts no metadata change), and as root it
/// reads a file only root may read unless that file is hidden (it is uid 0
/// without capabilities). The namespace backend allows neither.
#[test]
fn what_landlock_leaves_to_file_permissions() {
    let env = Env::new();
    if no_landlock(&env, Who::Me) {
        return;
    }
    let owned = env.home.join("owned.txt");
    std::fs::write(&owned, "mine").unwrap();
    std::fs::set_permissions(&owned, std::fs::Permissions::from_mode(0o600)).unwrap();
    let script =
        format!("chmod 0640 {0} && echo CHMOD; cat {0} >/dev/null 2>&1 || echo HIDDEN", owned.display());
    env.run(&["run", "--sandbox=landlock", "--", "sh", "-c", &script])
        .ok()
        .stdout_has("CHMOD")
        .stdout_has("HIDDEN");
    assert_eq!(std::fs::metadata(&owned).unwrap().permissions().mode() & 0o777, 0o640);
    if is_root() {
        let root_only = env.path("root-only.key");
        std::fs::write(&root_only, "root only").unwrap();
        std::fs::set_permissions(&root_only, std::fs::Permissions::from_mode(0o600)).unwrap();
        let script = format!("cat {}", root_only.display());
        env.run(&["run", "--sandbox=landlock", "--", "sh", "-c", &script]).ok().stdout_has("root only");
        let m = env.run(&["show", "--json", "last"]);
        assert!(m.stdout.contains("only root may read"), "{}", m.stdout);
    }
    let m = env.run(&["show", "--json", "last"]);
    assert!(m.stdout.contains("modes and times"), "{}", m.stdout);
}

/// Makes system call `nr` fail with EPERM, in the process that becomes
/// runws (and so in the command's process, which confines itself).
fn refuse_call(nr: nix::libc::c_long) -> std::io::Result<()> {
    use nix::libc;
    let stmt = |code: u16, k: u32| libc::sock_filter { code, jt: 0, jf: 0, k };
    let jump = |code: u16, k: u32, jt: u8, jf: u8| libc::sock_filter { code, jt, jf, k };
    let filter = [
        stmt((libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16, 0),
        jump((libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16, nr as u32, 0, 1),
        stmt((libc::BPF_RET | libc::BPF_K) as u16, libc::SECCOMP_RET_ERRNO | libc::EPERM as u32),
        stmt((libc::BPF_RET | libc::BPF_K) as u16, libc::SECCOMP_RET_ALLOW),
    ];
    install_filter(&filter)
}

/// The command's process confines itself while runws records the run, and
/// may fail at any step (its capabilities, its ruleset), as may runws's
/// filling of the ruleset, which goes on while the process is made: the
/// run is refused with the step's own reason every time, whichever comes
/// first (the child's end or runws's word to go on), and the command never
/// runs.
#[test]
fn a_confinement_that_fails_is_reported_with_its_reason() {
    use nix::libc;
    for who in everyone() {
        let env = Env::new();
        if no_landlock(&env, who) {
            return;
        }
        for (nr, says) in [
            (libc::SYS_landlock_restrict_self, "Landlock"),
            (libc::SYS_capset, "capset"),
            (libc::SYS_landlock_add_rule, "Landlock"),
        ] {
            for i in 0..15 {
                let marker = env.path(&format!("ran-{nr}-{i}"));
                let id = format!("refused-{nr}-{i}");
                let mut cmd = runws_as(
                    &env,
                    who,
                    &[
                        "run",
                        "--sandbox=landlock",
                        "--run-id",
                        &id,
                        "--",
                        "sh",
                        "-c",
                        &format!("echo x > {}", marker.display()),
                    ],
                );
                // SAFETY: the closure only calls prctl.
                unsafe { cmd.pre_exec(move || refuse_call(nr)) };
                let out = Out::from(cmd.output_retrying());
                out.code(125).one_line_error();
                assert!(out.stderr.contains(says), "{who:?} {says} {i}: {}", out.stderr);
                assert!(!marker.exists(), "{who:?} {says} {i}: the command ran");
                let m = env.manifest(&id);
                assert_eq!(m["exit_code"], 125, "{who:?} {says} {i}");
                // Once ROOT exists (the walk of `/` starts before the run,
                // for an existing ROOT), the command's process was made and
                // its gate stayed shut: a ruleset the walk's thread could
                // not fill is found at the gate, not before the fork.
                if i > 0 {
                    assert!(
                        m["child"]["pid"].as_i64().is_some(),
                        "{who:?} {says} {i}: no process was made: {m}"
                    );
                }
            }
        }
    }
}

/// As a namespace sandbox's PID 1 does, a landlocked command dies with
/// runws: a runws killed with SIGKILL leaves no confined command running on
/// unwatched (what the command itself left behind is the reaper's, as for
/// a plain run).
#[test]
fn a_landlocked_command_dies_with_runws() {
    let env = Env::new();
    if no_landlock(&env, Who::Me) {
        return;
    }
    let mut runws = env
        .cmd(&[
            "run",
            "--sandbox=landlock",
            "--run-id",
            "dies",
            "--",
            "sh",
            "-c",
            "echo $$ > pid; exec sleep 60",
        ])
        .spawn()
        .unwrap();
    let pid_file = env.run_dir("dies").join("work/pid");
    assert!(wait_until(Duration::from_secs(10), || std::fs::read_to_string(&pid_file)
        .is_ok_and(|s| s.ends_with('\n'))));
    let pid: i32 = std::fs::read_to_string(&pid_file).unwrap().trim().parse().unwrap();
    assert!(alive(pid));
    runws.kill().unwrap();
    runws.wait().unwrap();
    assert!(wait_until(Duration::from_secs(10), || !alive(pid)), "the command outlived runws");
}

/// A command's process that dies by a signal while it confines itself,
/// before its gate (here: killed by a filter on `close_range`, a call only
/// its confinement makes), never runs the command, and the run says it
/// was killed rather than that a pipe broke.
#[test]
fn a_child_killed_while_confining_is_not_reported_as_a_broken_pipe() {
    use nix::libc;
    let env = Env::new();
    if no_landlock(&env, Who::Me) {
        return;
    }
    for i in 0..5 {
        let marker = env.path(&format!("ran-{i}"));
        let mut cmd = env.cmd(&[
            "run",
            "--sandbox=landlock",
            "--",
            "sh",
            "-c",
            &format!("echo x > {}", marker.display()),
        ]);
        // SAFETY: the closure only calls prctl.
        unsafe {
            cmd.pre_exec(|| {
                let stmt = |code: u16, k: u32| libc::sock_filter { code, jt: 0, jf: 0, k };
                let jump = |code: u16, k: u32, jt: u8, jf: u8| libc::sock_filter { code, jt, jf, k };
                let jeq = (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16;
                let ret = (libc::BPF_RET | libc::BPF_K) as u16;
                install_filter(&[
                    stmt((libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16, 0),
                    jump(jeq, libc::SYS_close_range as u32, 0, 1),
                    stmt(ret, libc::SECCOMP_RET_KILL_PROCESS),
                    stmt(ret, libc::SECCOMP_RET_ALLOW),
                ])
            })
        };
        let out = Out::from(cmd.output().unwrap());
        assert!(!marker.exists(), "{i}: the command ran");
        assert!(!out.stderr.contains("Broken pipe"), "{i}: {}", out.stderr);
        // Refused before it started (125), or, when runws's word came first,
        // recorded as killed by the signal: never a success.
        assert_ne!(out.code, Some(0), "{i}: {}", out.stderr);
    }
}

/// `--sandbox=try` under Landlock goes through runws's init, forked in
/// process as root, which confines itself before its gate and passes it
/// before its exec: as root without CAP_SYS_ADMIN (a container's default,
/// where namespaces cannot be made) the command runs confined, without
/// capabilities, under the filter, root's secrets hidden, and only once
/// recorded.
#[test]
fn try_mode_under_landlock_as_root_runs_confined_through_the_init() {
    if !is_root() || !Path::new("/usr/bin/setpriv").exists() {
        eprintln!("skipped: needs root and setpriv");
        return;
    }
    let env = Env::new();
    if no_landlock(&env, Who::Me) {
        return;
    }
    let script = "grep -E '^(CapEff|Seccomp):' /proc/self/status; \
                  cat /etc/shadow >/dev/null 2>&1 && echo shadow-read || echo shadow-hidden; \
                  echo x > w && echo wrote";
    let mut c = Command::new("/usr/bin/setpriv");
    c.args(["--inh-caps=-sys_admin", "--bounding-set=-sys_admin", "--", BIN])
        .args(["run", "--sandbox=try", "--run-id", "t", "--", "sh", "-c", script])
        .env("RUNWS_ROOT", &env.root)
        .env("HOME", &env.home)
        .current_dir(env.tmp.path());
    let out = Out::from(c.output().unwrap());
    out.ok()
        .stderr_has("using Landlock")
        .stdout_has("CapEff:\t0000000000000000")
        .stdout_has("Seccomp:\t2")
        .stdout_has("shadow-hidden")
        .stdout_has("wrote");
    let m = env.manifest("t");
    assert_eq!(m["sandbox"]["backend"], "landlock", "{m}");
    assert_eq!(m["sandbox"]["mode"], "try", "{m}");
    assert_eq!(m["status"], "succeeded", "{m}");
}

/// Run as `nobody` in a directory anyone may write to: each pair of names
/// swapped again and again (`renameat2(RENAME_EXCHANGE)`) between a
/// directory of its own and a link to one of the targets (or to `/etc`,
/// with links to `shadow`, `gshadow` and `ssh` through that name), and one
/// link re-pointed among the targets and a directory of its own, until
/// killed.
const RACER: &str = r#"
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
parent, tag = sys.argv[1], sys.argv[2]
targets = sys.argv[3:]
p = lambda n: os.path.join(parent, "%s-%s" % (tag, n))
os.mkdir(p("d"))
pairs = []
for i, t in enumerate(targets):
    a, b = p("x%d" % i), p("l%d" % i)
    os.mkdir(a)
    os.symlink(t, b)
    pairs.append((a.encode(), b.encode()))
# directories of ours holding entries named like /etc's secrets, each
# swapped with a link to /etc, and links to those entries: resolved through
# the directory, then opened through the link
ys = []
for j in range(4):
    y, yl = p("y%d" % j), p("yl%d" % j)
    os.mkdir(y)
    for name in ("shadow", "gshadow", "ssh"):
        os.mkdir(os.path.join(y, name)) if name == "ssh" else open(os.path.join(y, name), "w").close()
        os.symlink(os.path.join(y, name), p("y%d%s" % (j, name)))
    os.symlink("/etc", yl)
    ys.append((y.encode(), yl.encode()))
s, new = p("s"), p("s.new")
choices = targets + [p("d")]
open(p("ready"), "w").close()
n = 0
while True:
    for a, b in pairs + ys:
        libc.renameat2(-100, a, -100, b, 2)
        for y, yl in ys:
            libc.renameat2(-100, y, -100, yl, 2)
    try:
        os.symlink(choices[n % len(choices)], new)
        os.rename(new, s)
    except OSError:
        pass
    n += 1
"#;

/// Another user races the walk of `/` of a root run whose ROOT lies in a
/// directory anyone may write to (`/tmp`): the entries it owns there turn
/// from directories into links to root's secrets, ROOT, another run and
/// HOME, and back, while runws lists that directory and adds each entry to
/// the ruleset. A rule is only ever added for what was listed (opened from
/// the listed directory, following no link), so none of those becomes
/// readable, also where openat2 is refused. With the entries opened
/// following links, most of these runs read root's secrets, the other run
/// and HOME; with the descriptor's own path unchecked where openat2 is
/// refused, a run now and then reads /etc/shadow (that window is a few
/// microseconds: this test finds it only sometimes).
#[test]
fn a_racer_beside_root_cannot_get_a_hidden_path_granted() {
    if !is_root() || !Path::new("/usr/bin/python3").exists() {
        eprintln!("skipped: needs root (the racer is nobody) and python3");
        return;
    }
    let env = Env::new();
    if no_landlock(&env, Who::Me) {
        return;
    }
    // The walk lists the directory that holds ROOT and HOME's parent: the
    // racer needs to write there, as anyone may in /tmp.
    let shared = env.tmp.path().parent().unwrap().to_path_buf();
    let mode = std::fs::metadata(&shared).unwrap().permissions().mode();
    if mode & 0o1002 != 0o1002 {
        eprintln!("skipped: {} is not a sticky directory anyone may write to", shared.display());
        return;
    }
    env.run(&["run", "--run-id", "other", "--", "sh", "-c", "echo other-secret > f"]).ok();
    let other = env.run_dir("other").join("work");
    std::fs::write(env.home.join("in-home"), "home-secret").unwrap();
    let tag = format!("runws-racer-{}", std::process::id());
    let mut targets = vec![
        "/etc".to_string(),
        env.root.display().to_string(),
        other.display().to_string(),
        env.home.display().to_string(),
    ];
    if Path::new("/etc/shadow").exists() {
        targets.push("/etc/shadow".into());
    }
    let mut racer = Command::new("/usr/bin/python3");
    racer.args(["-c", RACER, shared.to_str().unwrap(), &tag]).args(&targets).uid(65534).gid(65534);
    let mut racer = racer.spawn().unwrap();
    let ready = shared.join(format!("{tag}-ready"));
    let started = wait_until(Duration::from_secs(10), || ready.exists());
    let script = format!(
        "cat /etc/shadow >/dev/null 2>&1 && echo READ-shadow; cat /etc/gshadow >/dev/null 2>&1 && echo READ-gshadow; \
         cat '{}/f' 2>/dev/null; cat '{}/in-home' 2>/dev/null; ls /etc/ssh >/dev/null 2>&1 && echo READ-ssh; \
         echo done",
        other.display(),
        env.home.display()
    );
    let mut leaks = Vec::new();
    if started {
        for i in 0..60 {
            let mut cmd = env.cmd(&["run", "--sandbox=landlock", "--", "sh", "-c", &script]);
            if i % 2 == 1 {
                // SAFETY: the closure only calls prctl.
                unsafe { cmd.pre_exec(|| refuse_call(nix::libc::SYS_openat2)) };
            }
            let out = Out::from(cmd.output().unwrap());
            if out.code != Some(0) || !out.stdout.contains("done") {
                leaks.push(format!("run {i} failed: {out:?}"));
            } else if ["READ-", "other-secret", "home-secret"].iter().any(|s| out.stdout.contains(s)) {
                leaks.push(format!("run {i} read: {}", out.stdout.trim()));
            }
        }
    }
    let _ = racer.kill();
    let _ = racer.wait();
    for e in std::fs::read_dir(&shared).unwrap().flatten() {
        if e.file_name().to_string_lossy().starts_with(&tag) {
            let p = e.path();
            if std::fs::symlink_metadata(&p).is_ok_and(|m| m.is_dir()) {
                let _ = std::fs::remove_dir_all(&p);
            } else {
                let _ = std::fs::remove_file(&p);
            }
        }
    }
    assert!(started, "the racer did not start");
    assert!(leaks.is_empty(), "{} of 60 runs: {:#?}", leaks.len(), leaks);
}
