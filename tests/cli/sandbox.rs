//! `runws run --sandbox`: each protection is tried from inside, as root and
//! as an ordinary user (`nobody` when the tests run as root). A test whose
//! kernel feature is missing says so on stderr and skips.

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::harness::*;

/// Who runs runws.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Who {
    /// The user running the tests.
    Me,
    /// uid/gid 65534, when the tests run as root.
    Nobody,
}

/// Everyone the tests can run as: the current user, and `nobody` when root.
pub fn everyone() -> Vec<Who> {
    if is_root() { vec![Who::Me, Who::Nobody] } else { vec![Who::Me] }
}

/// None when an ordinary user can create namespaces here; else why not.
pub fn userns_missing() -> Option<String> {
    let max = std::fs::read_to_string("/proc/sys/user/max_user_namespaces").unwrap_or_default();
    if max.trim() == "0" {
        return Some("user.max_user_namespaces is 0".into());
    }
    if std::fs::read_to_string("/proc/sys/kernel/unprivileged_userns_clone").is_ok_and(|v| v.trim() == "0") {
        return Some("kernel.unprivileged_userns_clone is 0".into());
    }
    None
}

/// True (after saying why on stderr) when `who` cannot use a sandbox here.
pub fn skip(who: Who, test: &str) -> bool {
    let unprivileged = who == Who::Nobody || !is_root();
    if unprivileged && let Some(why) = userns_missing() {
        eprintln!("skipped {test} as {who:?}: {why}");
        return true;
    }
    false
}

/// `runws ARGS` as `who`, with a root, HOME and binary that user can reach.
pub fn runws_as(env: &Env, who: Who, args: &[&str]) -> Command {
    if who == Who::Me {
        return env.cmd(args);
    }
    let open = |p: &Path| std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o777)).unwrap();
    open(env.tmp.path());
    std::fs::create_dir_all(&env.root).unwrap();
    open(&env.root);
    open(&env.home);
    let bin = env.path("runws-copy");
    if !bin.exists() {
        std::fs::copy(BIN, &bin).unwrap();
        std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let mut c = Command::new(&bin);
    c.args(args)
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("HOME", &env.home)
        .env("RUNWS_ROOT", &env.root)
        .current_dir(env.tmp.path())
        .stdin(std::process::Stdio::null())
        .uid(65534)
        .gid(65534);
    c
}

/// Spawning a freshly copied binary can fail with ETXTBSY while another
/// test thread forks with the copy's write descriptor still open: retry.
pub trait Retry {
    fn output_retrying(&mut self) -> std::process::Output;
    fn spawn_retrying(&mut self) -> std::process::Child;
}

impl Retry for Command {
    fn output_retrying(&mut self) -> std::process::Output {
        retry_busy(|| self.output())
    }

    fn spawn_retrying(&mut self) -> std::process::Child {
        retry_busy(|| self.spawn())
    }
}

fn retry_busy<T>(mut start: impl FnMut() -> std::io::Result<T>) -> T {
    for _ in 0..100 {
        match start() {
            Err(e) if e.raw_os_error() == Some(nix::libc::ETXTBSY) => {
                std::thread::sleep(std::time::Duration::from_millis(20))
            }
            other => return other.expect("spawn runws"),
        }
    }
    panic!("the runws copy stayed busy");
}

fn unique(tag: &str) -> String {
    format!("runws-probe-{tag}-{}", uuid::Uuid::now_v7().simple())
}

#[test]
fn writes_to_home_tmp_etc_and_usr_fail_and_the_run_dir_is_writable() {
    for who in everyone() {
        if skip(who, "writes_fail") {
            continue;
        }
        let env = Env::new();
        let name = unique("w");
        let passwd_home = if who == Who::Nobody { PathBuf::from("/nonexistent") } else { real_home() };
        let targets = [
            env.home.join(&name),
            passwd_home.join(&name),
            PathBuf::from("/etc").join(&name),
            PathBuf::from("/usr").join(&name),
        ];
        let script = r#"for p in "$@"; do if echo x > "$p" 2>/dev/null; then echo "WROTE $p"; else echo "DENIED $p"; fi; done
            echo x > /tmp/$PROBE && echo TMP_OK; echo x > /var/tmp/$PROBE && echo VARTMP_OK
            echo w > "$RUNWS_DIR/work/w" && echo WORK_OK; echo o > "$RUNWS_DIR/outputs/o" && echo OUTPUTS_OK"#;
        let probe = format!("PROBE={name}");
        let mut args =
            vec!["run", "--sandbox", "--run-id", "w", "--env", &probe, "--", "sh", "-c", script, "sh"];
        let strs: Vec<String> = targets.iter().map(|t| t.display().to_string()).collect();
        args.extend(strs.iter().map(|s| s.as_str()));
        let out = Out::from(runws_as(&env, who, &args).output_retrying());
        for t in &targets {
            let leaked = t.exists();
            let _ = std::fs::remove_file(t);
            assert!(!leaked, "{who:?}: {} was written on the host", t.display());
        }
        out.ok().stdout_has("TMP_OK").stdout_has("VARTMP_OK").stdout_has("WORK_OK").stdout_has("OUTPUTS_OK");
        assert!(!out.stdout.contains("WROTE"), "{who:?}:\n{}", out.stdout);
        assert!(!Path::new("/tmp").join(&name).exists(), "the sandbox's /tmp is the host's");
        assert!(!Path::new("/var/tmp").join(&name).exists());
        assert_eq!(std::fs::read_to_string(env.run_dir("w").join("work/w")).unwrap(), "w\n");
        let m = env.manifest("w");
        assert_eq!(m["sandbox"]["kind"], "sandbox");
        assert_eq!(m["sandbox"]["mode"], "on");
        assert_eq!(m["sandbox"]["user_namespace"], who == Who::Nobody || !is_root());
        assert!(m["sandbox"]["missing"].as_array().unwrap().is_empty());
    }
}

fn real_home() -> PathBuf {
    PathBuf::from(std::env::var_os("HOME").unwrap_or_else(|| "/root".into()))
}

#[test]
fn the_manifest_is_readable_but_cannot_be_changed_from_inside() {
    for who in everyone() {
        if skip(who, "manifest") {
            continue;
        }
        let env = Env::new();
        let script = r#"m="$RUNWS_DIR/manifest.json"
            grep -q '"run_id": "m"' "$m" && echo READ_OK
            echo '{}' > "$m" 2>/dev/null && echo WROTE
            printf x >> "$m" 2>/dev/null && echo APPENDED
            rm -f "$m" 2>/dev/null; [ -e "$m" ] || echo REMOVED
            echo '{}' > "$RUNWS_DIR/new.json" 2>/dev/null && mv -f "$RUNWS_DIR/new.json" "$m" 2>/dev/null && echo REPLACED
            chmod 666 "$m" 2>/dev/null && echo CHMODDED
            echo x | runws put a && echo PUT_OK
            grep -q '"name": "a"' "$m" && echo SEES_OWN_OUTPUT"#;
        let out = Out::from(
            runws_as(&env, who, &["run", "--sandbox", "--run-id", "m", "--", "sh", "-c", script])
                .output_retrying(),
        );
        out.ok().stdout_has("READ_OK").stdout_has("PUT_OK").stdout_has("SEES_OWN_OUTPUT");
        for bad in ["WROTE", "APPENDED", "REMOVED", "REPLACED", "CHMODDED"] {
            assert!(!out.stdout.contains(bad), "{who:?}: {bad}\n{}", out.stdout);
        }
        let m = env.manifest("m");
        assert_eq!(m["status"], "succeeded");
        assert_eq!(m["outputs"][0]["name"], "a");
    }
}

#[test]
fn net_none_cannot_reach_a_server_on_the_host_loopback() {
    if Command::new("bash").arg("--version").output().is_err() {
        eprintln!("skipped: bash is not installed");
        return;
    }
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port().to_string();
    listener.set_nonblocking(true).unwrap();
    let script = "exec 3<>/dev/tcp/127.0.0.1/$1 && echo CONNECTED || echo REFUSED";
    for who in everyone() {
        if skip(who, "net_none") {
            continue;
        }
        let env = Env::new();
        // Control: with the host's network the same script connects, so the
        // refusal below is the namespace's doing.
        let out = Out::from(
            runws_as(&env, who, &["run", "--sandbox", "--", "bash", "-c", script, "bash", &port])
                .output_retrying(),
        );
        out.ok().stdout_has("CONNECTED");
        while listener.accept().is_ok() {}
        let out = Out::from(
            runws_as(
                &env,
                who,
                &[
                    "run",
                    "--sandbox",
                    "--net",
                    "none",
                    "--run-id",
                    "n",
                    "--",
                    "bash",
                    "-c",
                    script,
                    "bash",
                    &port,
                ],
            )
            .output_retrying(),
        );
        out.ok().stdout_has("REFUSED");
        assert!(listener.accept().is_err(), "{who:?}: a connection reached the host listener");
        assert_eq!(env.manifest("n")["sandbox"]["net"], "none");
        // Loopback inside works.
        let inside = "python3 -c 'import socket; s=socket.socket(); s.bind((\"127.0.0.1\", 0)); s.listen(); \
            socket.create_connection(s.getsockname()); print(\"LOOPBACK_OK\")'";
        let out = Out::from(
            runws_as(&env, who, &["run", "--sandbox", "--net", "none", "--", "sh", "-c", inside])
                .output_retrying(),
        );
        out.ok().stdout_has("LOOPBACK_OK");
    }
}

pub fn processes_with(marker: &str) -> Vec<i32> {
    let mut found = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else { continue };
        if let Ok(cmd) = std::fs::read(e.path().join("cmdline"))
            && String::from_utf8_lossy(&cmd).contains(marker)
        {
            found.push(pid);
        }
    }
    found
}

#[test]
fn a_process_left_in_the_background_is_gone_when_the_run_ends() {
    for who in everyone() {
        if skip(who, "background") {
            continue;
        }
        let env = Env::new();
        // A unique sleep length is the marker; setsid leaves the process group.
        let secs = format!(
            "{}.{}",
            3000 + std::process::id() % 1000,
            uuid::Uuid::now_v7()
                .simple()
                .to_string()
                .bytes()
                .filter(u8::is_ascii_digit)
                .take(6)
                .map(char::from)
                .collect::<String>()
        );
        let script = "setsid sleep $1 </dev/null >/dev/null 2>&1 & sleep $1 </dev/null >/dev/null 2>&1 & sleep 0.2; echo STARTED";
        // Control: without a sandbox both survive the run.
        let out =
            Out::from(runws_as(&env, who, &["run", "--", "sh", "-c", script, "sh", &secs]).output_retrying());
        out.ok().stdout_has("STARTED");
        let left = processes_with(&secs);
        for pid in &left {
            let _ =
                nix::sys::signal::kill(nix::unistd::Pid::from_raw(*pid), nix::sys::signal::Signal::SIGKILL);
        }
        assert_eq!(left.len(), 2, "control: the background processes should outlive a plain run");
        let out = Out::from(
            runws_as(&env, who, &["run", "--sandbox", "--", "sh", "-c", script, "sh", &secs])
                .output_retrying(),
        );
        out.ok().stdout_has("STARTED");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while !processes_with(&secs).is_empty() && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        assert!(processes_with(&secs).is_empty(), "{who:?}: a background process outlived the sandboxed run");
    }
}

#[test]
fn the_guard_works_inside_and_refuses_a_stranger_outside() {
    for who in everyone() {
        if skip(who, "guard") {
            continue;
        }
        let env = Env::new();
        runws_as(
            &env,
            who,
            &["run", "--run-id", "producer", "--", "sh", "-c", "echo made-before | runws put data"],
        )
        .output_retrying();
        let script = r#"
            echo one | runws put report || exit 1
            runws has report && echo HAS
            runws has other || echo HAS_NOT:$?
            runws get report
            runws get report --from producer; echo FROM=$?
            runws import producer data && cat "$RUNWS_DIR/inputs/producer/data"
            runws info --json | grep -q '"kind": "sandbox"' && echo INFO_OK
            runws claim pgid 4242 && echo CLAIM_OK
            touch "$RUNWS_DIR/work/ready"
            while [ ! -e "$RUNWS_DIR/work/go" ]; do sleep 0.05; done
        "#;
        let args =
            ["run", "--sandbox", "--allow-import", "producer", "--run-id", "g", "--", "sh", "-c", script];
        let child = runws_as(&env, who, &args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn_retrying();
        let ready = env.run_dir("g").join("work/ready");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while !ready.exists() && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        // A process outside the run, with the run's variables, is refused.
        let dir = env.run_dir("g").display().to_string();
        let stranger = Out::from(
            runws_as(&env, who, &["put", "sneaky"])
                .env("RUNWS_DIR", &dir)
                .env("RUNWS_RUN_ID", "g")
                .output_retrying(),
        );
        std::fs::write(env.run_dir("g").join("work/go"), b"").unwrap();
        let out = Out::from(child.wait_with_output().unwrap());
        stranger.code(5).stderr_has("not part of run `g`");
        out.ok()
            .stdout_has("HAS\n")
            .stdout_has("HAS_NOT:1")
            .stdout_has("one\n")
            .stdout_has("FROM=3")
            .stdout_has("made-before")
            .stdout_has("INFO_OK")
            .stdout_has("CLAIM_OK");
        let m = env.manifest("g");
        let names: Vec<&str> =
            m["outputs"].as_array().unwrap().iter().map(|o| o["name"].as_str().unwrap()).collect();
        assert_eq!(names, ["report"]);
        assert_eq!(m["inputs"][0]["from_run"], "producer");
        assert!(m.get("claims").is_none(), "a pgid claim inside a sandbox is not recorded");
    }
}

#[test]
fn exit_codes_signals_and_timeout_pass_through_the_sandbox() {
    let env = Env::new();
    if skip(Who::Me, "exit_codes") {
        return;
    }
    env.run(&["run", "--sandbox", "--", "sh", "-c", "exit 7"]).code(7);
    env.run(&["run", "--sandbox", "--", "no-such-command-here"])
        .code(127)
        .one_line_error()
        .stderr_has("not found");
    env.run(&["run", "--sandbox", "--", "/etc/hostname"]).code(126).one_line_error();
    env.run(&["run", "--sandbox", "--run-id", "k", "--", "sh", "-c", "kill -TERM $$"]).code(143);
    assert_eq!(env.manifest("k")["status"], "killed");
    assert_eq!(env.manifest("k")["signal"], 15);
    env.run(&["run", "--sandbox", "--timeout", "300ms", "--", "sleep", "30"]).code(124);
    // A signal sent to runws reaches the command, whose trap decides the status.
    let child = env
        .cmd(&[
            "run",
            "--sandbox",
            "--",
            "sh",
            "-c",
            "trap 'echo TRAPPED; exit 3' TERM; touch ready; while :; do sleep 0.05; done",
        ])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while std::time::Instant::now() < deadline {
        let ready = env.run_ids().iter().any(|id| env.run_dir(id).join("work/ready").exists());
        if ready {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), nix::sys::signal::Signal::SIGTERM)
        .unwrap();
    let out = Out::from(child.wait_with_output().unwrap());
    out.code(3).stdout_has("TRAPPED");
}

#[test]
fn rw_ro_and_hide_grant_and_take_away() {
    for who in everyone() {
        if skip(who, "rw_ro_hide") {
            continue;
        }
        let env = Env::new();
        let rw = env.path("granted-rw");
        let ro = env.path("granted-ro");
        let hidden = env.path("hidden");
        for d in [&rw, &ro, &hidden] {
            std::fs::create_dir_all(d).unwrap();
            std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o777)).unwrap();
        }
        std::fs::write(ro.join("f"), "readable\n").unwrap();
        std::fs::write(hidden.join("secret"), "s").unwrap();
        let (rws, ros, hides) =
            (rw.display().to_string(), ro.display().to_string(), hidden.display().to_string());
        let script = r#"echo a > "$1/a" && echo RW_OK; cat "$2/f"; echo b > "$2/f" 2>/dev/null && echo RO_WROTE
            ls "$3"; cat "$3/secret" 2>/dev/null && echo SECRET_SEEN; touch "$3/x" 2>/dev/null && echo HIDE_WROTE; true"#;
        let out = Out::from(
            runws_as(
                &env,
                who,
                &[
                    "run",
                    "--sandbox",
                    "--rw",
                    &rws,
                    "--ro",
                    &ros,
                    "--hide",
                    &hides,
                    "--",
                    "sh",
                    "-c",
                    script,
                    "sh",
                    &rws,
                    &ros,
                    &hides,
                ],
            )
            .output_retrying(),
        );
        out.ok().stdout_has("RW_OK").stdout_has("readable");
        for bad in ["RO_WROTE", "SECRET_SEEN", "HIDE_WROTE"] {
            assert!(!out.stdout.contains(bad), "{who:?}: {bad}\n{}", out.stdout);
        }
        assert_eq!(std::fs::read_to_string(rw.join("a")).unwrap(), "a\n");
        assert_eq!(std::fs::read_to_string(ro.join("f")).unwrap(), "readable\n");
        // A path that does not exist, or named twice, is refused before anything runs.
        let before = env.run_ids().len();
        Out::from(
            runws_as(&env, who, &["run", "--sandbox", "--rw", "/no/such/path", "--", "true"])
                .output_retrying(),
        )
        .code(125)
        .one_line_error()
        .stderr_has("--rw `/no/such/path`");
        Out::from(
            runws_as(&env, who, &["run", "--sandbox", "--rw", &rws, "--ro", &rws, "--", "true"])
                .output_retrying(),
        )
        .code(125)
        .one_line_error()
        .stderr_has("more than one");
        assert_eq!(env.run_ids().len(), before + 2, "each refused run is recorded as failed");
        Out::from(runws_as(&env, who, &["run", "--rw", &rws, "--", "true"]).output_retrying())
            .code(125)
            .one_line_error();
    }
}

/// A seccomp filter that makes unshare(CLONE_NEWUSER) and
/// clone(CLONE_NEWUSER) fail with EPERM, as on a machine where user
/// namespaces are disabled (a container's default profile); installed in
/// the process that becomes runws. (clone3 passes its flags in memory a
/// filter cannot read: it fails with ENOSYS, so that the C library falls
/// back to clone.)
fn deny_user_namespaces() -> std::io::Result<()> {
    deny_namespaces_filter(false)
}

/// The same, and no Landlock either (its calls fail with ENOSYS, as on a
/// kernel without it): nothing is left to make a sandbox with.
fn deny_user_namespaces_and_landlock() -> std::io::Result<()> {
    deny_namespaces_filter(true)
}

fn deny_namespaces_filter(landlock_too: bool) -> std::io::Result<()> {
    use nix::libc;
    const NR_OFF: u32 = 0;
    const ARG0_OFF: u32 = 16;
    let stmt = |code: u16, k: u32| libc::sock_filter { code, jt: 0, jf: 0, k };
    let jump = |code: u16, k: u32, jt: u8, jf: u8| libc::sock_filter { code, jt, jf, k };
    let ld = (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16;
    let jeq = (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16;
    let ret = (libc::BPF_RET | libc::BPF_K) as u16;
    // landlock_create_ruleset, landlock_add_rule, landlock_restrict_self.
    let landlock = if landlock_too { libc::SYS_landlock_create_ruleset as u32 } else { u32::MAX };
    let filter = [
        stmt(ld, NR_OFF),
        jump(jeq, landlock, 0, 1),
        stmt(ret, libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32),
        jump(jeq, libc::SYS_clone3 as u32, 0, 1),
        stmt(ret, libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32),
        jump(jeq, libc::SYS_unshare as u32, 1, 0),
        jump(jeq, libc::SYS_clone as u32, 0, 3),
        stmt(ld, ARG0_OFF),
        jump((libc::BPF_JMP | libc::BPF_JSET | libc::BPF_K) as u16, libc::CLONE_NEWUSER as u32, 0, 1),
        stmt(ret, libc::SECCOMP_RET_ERRNO | libc::EPERM as u32),
        stmt(ret, libc::SECCOMP_RET_ALLOW),
    ];
    install_filter(&filter)
}

/// Without user namespaces (a container's seccomp profile) `--sandbox`
/// takes Landlock and says why; `--sandbox=ns` is refused.
#[test]
fn without_user_namespaces_the_sandbox_is_landlock() {
    let who = if is_root() { Who::Nobody } else { Who::Me };
    let env = Env::new();
    let mut cmd =
        runws_as(&env, who, &["run", "--sandbox", "--run-id", "auto", "--", "sh", "-c", "echo RAN"]);
    // SAFETY: the closure only calls prctl.
    unsafe { cmd.pre_exec(deny_user_namespaces) };
    let out = Out::from(cmd.output_retrying());
    if out.code == Some(125) && out.stderr.contains("no Landlock") {
        eprintln!("skipped: this kernel has no Landlock");
        return;
    }
    out.ok().stdout_has("RAN").stderr_has("using Landlock");
    let m = env.manifest("auto");
    assert_eq!(m["sandbox"]["backend"], "landlock");
    assert!(m["sandbox"]["chosen_because"].as_str().unwrap().contains("user namespace"), "{m}");
    let mut cmd =
        runws_as(&env, who, &["run", "--sandbox=ns", "--run-id", "ns", "--", "sh", "-c", "echo RAN"]);
    // SAFETY: as above.
    unsafe { cmd.pre_exec(deny_user_namespaces) };
    let out = Out::from(cmd.output_retrying());
    out.code(125).one_line_error().stderr_has("user namespaces are disabled");
    assert!(!out.stdout.contains("RAN"));
}

/// With neither user namespaces nor Landlock, `--sandbox` is refused and
/// `--sandbox=try` runs without, recording why.
#[test]
fn without_user_namespaces_the_run_is_refused_or_runs_with_try_and_records_why() {
    // Only an unprivileged runws needs a user namespace.
    let who = if is_root() { Who::Nobody } else { Who::Me };
    let env = Env::new();
    let mut cmd = runws_as(&env, who, &["run", "--sandbox", "--run-id", "off", "--", "sh", "-c", "echo RAN"]);
    // SAFETY: the closure only calls prctl.
    unsafe { cmd.pre_exec(deny_user_namespaces_and_landlock) };
    let out = Out::from(cmd.output_retrying());
    out.code(125).one_line_error().stderr_has("user namespaces are disabled");
    assert!(!out.stdout.contains("RAN"));
    let m = env.manifest("off");
    assert_eq!(m["status"], "failed");
    assert!(m["error"].as_str().unwrap().contains("user namespaces are disabled"));

    let mut cmd =
        runws_as(&env, who, &["run", "--sandbox=try", "--run-id", "try", "--", "sh", "-c", "echo RAN"]);
    // SAFETY: as above.
    unsafe { cmd.pre_exec(deny_user_namespaces_and_landlock) };
    let out = Out::from(cmd.output_retrying());
    out.ok().stdout_has("RAN").stderr_has("--sandbox=try: running without user namespace");
    let m = env.manifest("try");
    assert_eq!(m["sandbox"]["mode"], "try");
    let missing: Vec<&str> = m["sandbox"]["missing"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["protection"].as_str().unwrap())
        .collect();
    assert!(missing.contains(&"user namespace") && missing.contains(&"mount namespace"), "{missing:?}");
}

/// A sandboxed command that dies of a signal, a real-time one included,
/// ends the run as a plain run does: 128+N, and the manifest names the
/// signal (as root, PID 1 reports the status; as `nobody`, the outer init
/// dies of the same signal).
#[test]
fn a_command_killed_by_any_signal_ends_a_sandboxed_run_as_128_plus_n() {
    for who in everyone() {
        if skip(who, "a_command_killed_by_any_signal_ends_a_sandboxed_run_as_128_plus_n") {
            continue;
        }
        let env = Env::new();
        for (sig, id) in [(9, "kill"), (10, "usr1"), (40, "realtime")] {
            let script = format!("kill -{sig} $$");
            let args = ["run", "--sandbox", "--run-id", id, "--", "sh", "-c", &script];
            let out = Out::from(runws_as(&env, who, &args).output_retrying());
            out.code(128 + sig);
            assert_eq!(env.manifest(id)["signal"], sig, "as {who:?}");
        }
        let out = Out::from(runws_as(&env, who, &["run", "--", "sh", "-c", "kill -40 $$"]).output_retrying());
        out.code(168);
    }
}
