//! A sandboxed command is the adversary: these tests attack the host from
//! inside `run --sandbox`, as root and as `nobody`, and check from inside
//! what the command could do (not only what runws printed). A root command
//! must be no stronger against the host kernel, its devices and its unix
//! sockets than an unprivileged one.

use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::harness::*;
use crate::sandbox::{Retry, Who, everyone, runws_as, skip};

/// `python3 -c PROBE` inside a sandbox as `who`; the probe's stdout.
fn probe(env: &Env, who: Who, extra: &[&str], id: &str, code: &str) -> Out {
    let mut args = vec!["run", "--sandbox", "--run-id", id];
    args.extend_from_slice(extra);
    args.extend_from_slice(&["--", "/usr/bin/python3", "-c", code]);
    Out::from(runws_as(env, who, &args).output_retrying())
}

fn have_python() -> bool {
    if Path::new("/usr/bin/python3").exists() {
        return true;
    }
    eprintln!("skipped: /usr/bin/python3 is not installed");
    false
}

/// Writing a host-wide kernel knob is refused: the current value is written
/// back, so even on a kernel that accepts it nothing on the host changes.
const PROC_SYS: &str = r#"
import os
for knob in ["/proc/sys/kernel/domainname", "/proc/sys/kernel/core_pattern",
             "/proc/sys/kernel/hostname", "/proc/sys/vm/drop_caches"]:
    try:
        cur = open(knob, "rb").read() if not knob.endswith("drop_caches") else b"0\n"
    except OSError as e:
        print("UNREADABLE", knob, e.errno); continue
    try:
        fd = os.open(knob, os.O_WRONLY)
    except OSError as e:
        print("DENIED", knob, e.errno); continue
    try:
        if not knob.endswith("drop_caches"):
            os.write(fd, cur)
        print("WROTE", knob)
    except OSError as e:
        print("DENIED", knob, e.errno)
    finally:
        os.close(fd)
for path in ["/proc/sysrq-trigger", "/proc/sys/kernel/sysrq"]:
    try:
        os.close(os.open(path, os.O_WRONLY)); print("OPENED", path)
    except OSError as e:
        print("DENIED", path, e.errno)
for path in ["/proc/kcore", "/proc/keys", "/proc/timer_list"]:
    try:
        with open(path, "rb") as f:
            data = f.read(64)
        print("READ" if data else "EMPTY", path)
    except OSError as e:
        print("DENIED", path, e.errno)
print("DONE")
"#;

#[test]
fn host_kernel_knobs_in_proc_are_out_of_reach() {
    if !have_python() {
        return;
    }
    for who in everyone() {
        if skip(who, "proc_sys") {
            continue;
        }
        let env = Env::new();
        let out = probe(&env, who, &[], "p", PROC_SYS);
        out.ok().stdout_has("DONE");
        for bad in ["WROTE", "OPENED", "READ /proc/kcore", "READ /proc/keys", "READ /proc/timer_list"] {
            assert!(!out.stdout.contains(bad), "{who:?}: {bad}\n{}", out.stdout);
        }
    }
}

/// Every mount the command sees, from its own `/proc/self/mountinfo`:
/// (mount point, per-mount options, file system type).
const MOUNTS: &str = r#"
for line in open("/proc/self/mountinfo"):
    left, right = line.split(" - ", 1)
    f = left.split()
    print("MOUNT", f[4], f[5], right.split()[0])
import os, stat
for name in sorted(os.listdir("/dev")):
    st = os.lstat("/dev/" + name)
    kind = "dir" if stat.S_ISDIR(st.st_mode) else "link" if stat.S_ISLNK(st.st_mode) else \
        "chr" if stat.S_ISCHR(st.st_mode) else "blk" if stat.S_ISBLK(st.st_mode) else "other"
    print("DEV", name, kind)
with open("/dev/null", "wb") as f: f.write(b"x")
assert open("/dev/zero", "rb").read(4) == b"\0" * 4
assert len(open("/dev/urandom", "rb").read(16)) == 16
import pty
m, s = pty.openpty(); print("PTY", os.ttyname(s)); os.close(m); os.close(s)
print("FD", os.readlink("/dev/fd"))
for d in ["/dev/shm", "/tmp"]:
    open(d + "/x", "w").write("x"); print("WRITABLE", d)
try:
    open("/dev/newfile", "w"); print("DEV_WRITABLE")
except OSError: pass
print("DONE")
"#;

#[test]
fn the_command_gets_a_private_dev_and_every_other_mount_is_nosuid_nodev() {
    if !have_python() {
        return;
    }
    for who in everyone() {
        if skip(who, "private_dev") {
            continue;
        }
        let env = Env::new();
        let out = probe(&env, who, &[], "d", MOUNTS);
        out.ok().stdout_has("DONE").stdout_has("WRITABLE /dev/shm").stdout_has("PTY /dev/pts/");
        out.stdout_has("FD /proc/self/fd");
        assert!(!out.stdout.contains("DEV_WRITABLE"), "{who:?}: /dev is writable\n{}", out.stdout);
        let dev: Vec<(String, String)> = out
            .stdout
            .lines()
            .filter_map(|l| l.strip_prefix("DEV "))
            .map(|l| {
                let (n, k) = l.split_once(' ').unwrap();
                (n.to_string(), k.to_string())
            })
            .collect();
        let names: Vec<&str> = dev.iter().map(|(n, _)| n.as_str()).collect();
        for want in ["null", "zero", "full", "random", "urandom", "tty", "ptmx", "pts", "shm", "fd"] {
            assert!(names.contains(&want), "{who:?}: /dev lacks {want}: {names:?}");
        }
        let allowed = [
            "null", "zero", "full", "random", "urandom", "tty", "ptmx", "pts", "shm", "fd", "stdin",
            "stdout", "stderr",
        ];
        for (n, k) in &dev {
            assert!(allowed.contains(&n.as_str()), "{who:?}: /dev/{n} ({k}) is a host node");
            assert_ne!(k, "blk", "{who:?}: block device /dev/{n}");
        }
        let mut seen = 0;
        for line in out.stdout.lines().filter_map(|l| l.strip_prefix("MOUNT ")) {
            let f: Vec<&str> = line.split(' ').collect();
            let (point, opts, fstype) = (f[0], f[1], f[2]);
            seen += 1;
            let opts: Vec<&str> = opts.split(',').collect();
            assert!(opts.contains(&"nosuid"), "{who:?}: {point} ({fstype}) lacks nosuid: {opts:?}");
            // The private /dev's device nodes and its devpts are the only
            // mounts where device nodes work.
            // (As root, the private /dev itself holds nodes made there.)
            let device_node =
                point == "/dev" || (point.starts_with("/dev/") && !point.starts_with("/dev/shm"));
            if !device_node {
                assert!(opts.contains(&"nodev"), "{who:?}: {point} ({fstype}) lacks nodev: {opts:?}");
            }
            if point == "/proc" || point.starts_with("/proc/sys") {
                assert!(opts.contains(&"ro"), "{who:?}: {point} is writable");
            }
        }
        assert!(seen > 5, "{who:?}: no mounts listed\n{}", out.stdout);
    }
}

/// A device node the user makes visible with `--ro` (here, a copy of
/// `/dev/null`'s numbers made by root) cannot be opened: `--ro` and `--rw`
/// binds are `nodev` like every other mount.
#[test]
fn a_device_node_in_a_granted_directory_cannot_be_opened() {
    if !is_root() || !have_python() {
        eprintln!("skipped: making a device node needs root");
        return;
    }
    for who in everyone() {
        if skip(who, "nodev_grant") {
            continue;
        }
        let env = Env::new();
        let dir = env.path("devices");
        std::fs::create_dir(&dir).unwrap();
        let node = dir.join("null-copy");
        let made = Command::new("mknod").arg(&node).args(["c", "1", "3"]).status().unwrap();
        assert!(made.success());
        std::fs::set_permissions(&node, std::fs::Permissions::from_mode(0o666)).unwrap();
        let code = format!(
            "import os\n\
             for flags in (os.O_RDONLY, os.O_WRONLY):\n\
             \x20   try:\n\
             \x20       os.close(os.open({node:?}, flags)); print('OPENED')\n\
             \x20   except OSError as e:\n\
             \x20       print('DENIED', e.errno)\n",
            node = node.display().to_string()
        );
        for grant in ["--ro", "--rw"] {
            let d = dir.display().to_string();
            let out = probe(&env, who, &[grant, &d], &format!("n{}", &grant[2..]), &code);
            out.ok().stdout_has("DENIED");
            assert!(!out.stdout.contains("OPENED"), "{who:?} {grant}: a device node opened\n{}", out.stdout);
        }
    }
}

/// A unix-socket server on the host file system (a docker or database
/// socket would do the same) answers `sock` requests.
struct SocketServer {
    path: PathBuf,
    child: std::process::Child,
}

impl SocketServer {
    fn start(path: &Path) -> SocketServer {
        let _ = std::fs::remove_file(path);
        let code = "import socket, sys, os\n\
                    s = socket.socket(socket.AF_UNIX)\n\
                    s.bind(sys.argv[1]); os.chmod(sys.argv[1], 0o777); s.listen(8)\n\
                    print('up', flush=True)\n\
                    while True:\n\
                    \x20   c, _ = s.accept(); c.sendall(b'HOST-SERVICE\\n'); c.close()\n";
        let mut child = Command::new("/usr/bin/python3")
            .args(["-c", code])
            .arg(path)
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufRead::read_line(&mut std::io::BufReader::new(child.stdout.take().unwrap()), &mut line)
            .unwrap();
        assert_eq!(line.trim(), "up");
        SocketServer { path: path.to_path_buf(), child }
    }
}

impl Drop for SocketServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.path);
    }
}

fn connect_code(path: &Path) -> String {
    format!(
        "import socket\n\
         s = socket.socket(socket.AF_UNIX)\n\
         try:\n\
         \x20   s.connect({p:?}); print('REACHED', s.recv(64).decode().strip())\n\
         except OSError as e:\n\
         \x20   print('UNREACHABLE', e.errno)\n",
        p = path.display().to_string()
    )
}

#[test]
fn net_none_hides_host_unix_sockets_unless_granted() {
    if !is_root() || !have_python() {
        eprintln!("skipped: a socket under /run and /var/cache needs root");
        return;
    }
    let tag = uuid::Uuid::now_v7().simple().to_string();
    let in_run = PathBuf::from(format!("/run/runws-test-{tag}.sock"));
    // A socket directory outside /run, found through the kernel's list.
    let elsewhere_dir = PathBuf::from(format!("/var/cache/runws-test-{tag}"));
    std::fs::create_dir(&elsewhere_dir).unwrap();
    std::fs::set_permissions(&elsewhere_dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    struct Cleanup(PathBuf);
    impl Drop for Cleanup {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
    let _cleanup = Cleanup(elsewhere_dir.clone());
    let elsewhere = elsewhere_dir.join("service.sock");
    // Names are anyone's to choose: one with a space is hidden whole, and
    // one that is not UTF-8 (bound by anybody on the host, here) must not
    // make the kernel's list unreadable and so hide nothing at all.
    let spaced = elsewhere_dir.join("other service.sock");
    let poison = elsewhere_dir.join(std::ffi::OsStr::from_bytes(b"poison-\xff.sock"));
    let _poison = std::os::unix::net::UnixListener::bind(&poison).unwrap();
    let _a = SocketServer::start(&in_run);
    let _b = SocketServer::start(&elsewhere);
    let _c = SocketServer::start(&spaced);
    for who in everyone() {
        if skip(who, "unix_sockets") {
            continue;
        }
        let env = Env::new();
        for (i, sock) in [&in_run, &elsewhere, &spaced].into_iter().enumerate() {
            let code = connect_code(sock);
            // Control: with the host's network the socket answers.
            let host = probe(&env, who, &["--net", "host"], &format!("h{i}"), &code);
            host.ok().stdout_has("REACHED HOST-SERVICE");
            let none = probe(&env, who, &["--net", "none"], &format!("n{i}"), &code);
            none.ok().stdout_has("UNREACHABLE");
            // Granted by name, it is reachable again.
            let s = sock.display().to_string();
            let granted = probe(&env, who, &["--net", "none", "--ro", &s], &format!("g{i}"), &code);
            granted.ok().stdout_has("REACHED HOST-SERVICE");
        }
        let m = env.manifest("n0");
        let layout = m["sandbox"]["layout"].to_string();
        assert!(layout.contains("\"/run\""), "{who:?}: /run is not hidden: {layout}");
    }
}

/// `unshare -U` inside the sandbox fails (no nested user namespace, so no
/// fresh capability set), unless `--allow-userns` is given.
#[test]
fn nested_user_namespaces_are_refused_unless_allowed() {
    if Command::new("unshare").arg("--version").output().is_err() {
        eprintln!("skipped: unshare is not installed");
        return;
    }
    let script = "if unshare -U true 2>/dev/null; then echo NESTED; else echo REFUSED; fi
        if unshare -Ur true 2>/dev/null; then echo NESTED_ROOT; fi";
    for who in everyone() {
        if skip(who, "nested_userns") {
            continue;
        }
        let env = Env::new();
        let out = Out::from(
            runws_as(&env, who, &["run", "--sandbox", "--run-id", "u", "--", "sh", "-c", script])
                .output_retrying(),
        );
        out.ok().stdout_has("REFUSED");
        assert!(!out.stdout.contains("NESTED"), "{who:?}: a nested user namespace was made\n{}", out.stdout);
        let m = env.manifest("u");
        assert_eq!(m["sandbox"]["nested_userns"], false, "{who:?}: {m}");

        let out = Out::from(
            runws_as(
                &env,
                who,
                &["run", "--sandbox", "--allow-userns", "--run-id", "a", "--", "sh", "-c", script],
            )
            .output_retrying(),
        );
        out.ok().stdout_has("NESTED");
        assert_eq!(env.manifest("a")["sandbox"]["nested_userns"], true);
    }
}

/// The command cannot push input into the terminal it shares with the
/// user's shell (TIOCSTI): the call is refused before the kernel looks at
/// the descriptor (EPERM rather than ENOTTY on a non-terminal).
#[test]
fn the_command_cannot_inject_terminal_input() {
    if !have_python() {
        return;
    }
    let code = "import fcntl, termios, os\n\
                fd = os.open('/dev/null', os.O_RDONLY)\n\
                for req in (termios.TIOCSTI, termios.TIOCSTI | (1 << 32)):\n\
                \x20   try:\n\
                \x20       fcntl.ioctl(fd, req, b'x'); print('INJECTED')\n\
                \x20   except OSError as e:\n\
                \x20       print('ERRNO', e.errno)\n";
    for who in everyone() {
        if skip(who, "tiocsti") {
            continue;
        }
        let env = Env::new();
        let out = probe(&env, who, &[], "t", code);
        out.ok();
        let errnos: Vec<&str> = out.stdout.lines().filter_map(|l| l.strip_prefix("ERRNO ")).collect();
        assert_eq!(errnos, vec!["1", "1"], "{who:?}: TIOCSTI was not refused\n{}", out.stdout);
    }
}

/// As root, the command is uid 0 only inside: on the host it is `nobody`,
/// so a root-only file or a root-only unix socket (docker's, the system
/// bus) is as closed to it as to any unprivileged user; what it writes in
/// the run and in `--rw` paths still belongs to root on disk.
#[test]
fn a_root_command_is_no_stronger_than_an_unprivileged_one() {
    if !is_root() || !have_python() {
        eprintln!("skipped: needs root");
        return;
    }
    let env = Env::new();
    let secrets = env.path("root-only");
    std::fs::create_dir(&secrets).unwrap();
    std::fs::write(secrets.join("key"), "root's secret\n").unwrap();
    std::fs::set_permissions(secrets.join("key"), std::fs::Permissions::from_mode(0o600)).unwrap();
    let sock = secrets.join("daemon.sock");
    let server = SocketServer::start(&sock);
    std::fs::set_permissions(&sock, std::fs::Permissions::from_mode(0o600)).unwrap();
    let shared = env.path("shared-rw");
    std::fs::create_dir(&shared).unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o700)).unwrap();
    let code = format!(
        "import os, socket\n\
         print('UID', os.getuid(), os.geteuid())\n\
         try:\n\
         \x20   print('READ', open({key:?}).read().strip())\n\
         except OSError as e:\n\
         \x20   print('NOREAD', e.errno)\n\
         s = socket.socket(socket.AF_UNIX)\n\
         try:\n\
         \x20   s.connect({sock:?}); print('REACHED', s.recv(64).decode().strip())\n\
         except OSError as e:\n\
         \x20   print('UNREACHABLE', e.errno)\n\
         open('made-here', 'w').write('x')\n\
         open({shared:?} + '/made-there', 'w').write('x')\n\
         print('WROTE')\n",
        key = secrets.join("key").display().to_string(),
        sock = sock.display().to_string(),
        shared = shared.display().to_string(),
    );
    let (s, r) = (secrets.display().to_string(), shared.display().to_string());
    let out = probe(&env, Who::Me, &["--ro", &s, "--rw", &r], "r", &code);
    drop(server);
    out.ok().stdout_has("UID 0 0").stdout_has("NOREAD").stdout_has("UNREACHABLE").stdout_has("WROTE");
    assert!(!out.stdout.contains("READ root"), "{}", out.stdout);
    assert!(!out.stdout.contains("REACHED"), "{}", out.stdout);
    use std::os::unix::fs::MetadataExt;
    for made in [env.run_dir("r").join("work/made-here"), shared.join("made-there")] {
        let meta = std::fs::metadata(&made).unwrap();
        assert_eq!((meta.uid(), meta.gid()), (0, 0), "{} is not root's on disk", made.display());
    }
    assert_eq!(env.manifest("r")["sandbox"]["host_ids"], serde_json::json!([65534, 65534]));
}

/// The run's files stay on the host's disk, where mounts are not `nosuid`:
/// the command cannot leave a set-user-ID or set-group-ID program there
/// (as root it would run as root for whoever executes it later).
#[test]
fn the_command_cannot_leave_a_set_id_program_behind() {
    if !have_python() {
        return;
    }
    let code = "import os, shutil\n\
                shutil.copy('/bin/true', 'prog')\n\
                for mode in (0o4755, 0o2755, 0o6755):\n\
                \x20   try:\n\
                \x20       os.chmod('prog', mode); print('CHMOD', oct(mode))\n\
                \x20   except OSError as e:\n\
                \x20       print('REFUSED', e.errno)\n\
                for name, flags in (('made', os.O_CREAT | os.O_WRONLY), ('excl', os.O_CREAT | os.O_EXCL | os.O_WRONLY)):\n\
                \x20   try:\n\
                \x20       os.close(os.open(name, flags, 0o4755)); print('CREATED', name)\n\
                \x20   except OSError as e:\n\
                \x20       print('REFUSED', e.errno)\n\
                r = os.system('chmod u+s prog 2>/dev/null'); print('SHELL', r)\n\
                os.chmod('prog', 0o1755); print('STICKY_OK')\n";
    for who in everyone() {
        if skip(who, "set_id") {
            continue;
        }
        let env = Env::new();
        let out = probe(&env, who, &[], "s", code);
        out.ok().stdout_has("STICKY_OK");
        assert!(!out.stdout.contains("CHMOD"), "{who:?}: a set-id mode was set\n{}", out.stdout);
        assert!(!out.stdout.contains("CREATED"), "{who:?}: a set-id file was created\n{}", out.stdout);
        assert!(!out.stdout.contains("SHELL 0"), "{who:?}: chmod u+s worked\n{}", out.stdout);
        use std::os::unix::fs::MetadataExt;
        for f in tree(&env.run_dir("s")) {
            let meta = std::fs::symlink_metadata(env.run_dir("s").join(&f)).unwrap();
            assert_eq!(meta.mode() & 0o6000, 0, "{who:?}: {f} is set-id on the host");
        }
    }
}

/// Keyrings are not namespaced (the session keyring runws was started in
/// holds the caller's keys) and io_uring performs opens and mode changes
/// without a system call the filter sees: both are refused.
#[test]
fn keyrings_and_io_uring_are_refused() {
    if !have_python() {
        return;
    }
    let code = "import ctypes, os\n\
                libc = ctypes.CDLL(None, use_errno=True)\n\
                libc.syscall.restype = ctypes.c_long\n\
                def call(name, nr, *args):\n\
                \x20   r = libc.syscall(ctypes.c_long(nr), *[ctypes.c_long(a) for a in args])\n\
                \x20   print(name, 'OK' if r >= 0 else 'ERRNO %d' % ctypes.get_errno())\n\
                call('keyctl', 250, 0, -3, 0)\n\
                call('add_key', 248, 0, 0, 0, 0, -3)\n\
                params = ctypes.create_string_buffer(120)\n\
                call('io_uring_setup', 425, 4, ctypes.addressof(params))\n";
    if !cfg!(target_arch = "x86_64") {
        eprintln!("skipped: the probe uses x86-64 system-call numbers");
        return;
    }
    for who in everyone() {
        if skip(who, "keyring") {
            continue;
        }
        let env = Env::new();
        let out = probe(&env, who, &[], "k", code);
        out.ok()
            .stdout_has("keyctl ERRNO 1")
            .stdout_has("add_key ERRNO 1")
            .stdout_has("io_uring_setup ERRNO 38");
    }
}

/// A descriptor the caller left open (here, to a directory the sandbox
/// hides) does not reach the command: only 0, 1, 2 and `--listen` sockets.
#[test]
fn inherited_descriptors_do_not_reach_a_sandboxed_command() {
    let env = Env::new();
    let hidden = env.path("hidden-dir");
    std::fs::create_dir(&hidden).unwrap();
    std::fs::write(hidden.join("secret"), "x").unwrap();
    let script = "ls /proc/self/fd/9/ 2>/dev/null && echo LEAKED; ls /proc/self/fd | tr '\\n' ' '; echo";
    let out = Out::from(
        Command::new("sh")
            .arg("-c")
            .arg("exec 9<\"$HIDDEN\"; exec \"$@\"")
            .arg("sh")
            .arg(BIN)
            .args(["run", "--sandbox", "--run-id", "f", "--", "sh", "-c", script])
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .env("HOME", &env.home)
            .env("RUNWS_ROOT", &env.root)
            .env("HIDDEN", &hidden)
            .current_dir(env.tmp.path())
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap(),
    );
    out.ok();
    assert!(!out.stdout.contains("LEAKED") && !out.stdout.contains("secret"), "{}", out.stdout);
    // Control: without a sandbox the descriptor is the caller's to pass on.
    let plain = Out::from(
        Command::new("sh")
            .arg("-c")
            .arg("exec 9<\"$HIDDEN\"; exec \"$@\"")
            .arg("sh")
            .arg(BIN)
            .args(["run", "--run-id", "p", "--", "sh", "-c", "ls /proc/self/fd/9/"])
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .env("HOME", &env.home)
            .env("RUNWS_ROOT", &env.root)
            .env("HIDDEN", &hidden)
            .current_dir(env.tmp.path())
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap(),
    );
    plain.ok().stdout_has("secret");
}

/// A command in the foreground of a terminal that turns echo off and ends
/// (or is killed) leaves the terminal as runws found it.
#[test]
fn the_terminal_modes_are_restored_when_the_command_ends() {
    if !have_python() {
        return;
    }
    let env = Env::new();
    std::fs::create_dir_all(&env.root).unwrap();
    // A pseudo-terminal whose slave is runws's controlling terminal and
    // stdin; the modes are read back from it once runws has exited.
    let driver = r#"
import os, sys, subprocess, termios, fcntl
master, slave = os.openpty()
def ctty():
    os.setsid()
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)
for extra in ([], ["--sandbox"]):
    p = subprocess.Popen([sys.argv[1], "run"] + extra + ["--", "sh", "-c", "stty -echo -icanon"],
                         stdin=slave, stdout=slave, stderr=slave, preexec_fn=ctty)
    p.wait()
    lflag = termios.tcgetattr(slave)[3]
    print("ECHO" if lflag & termios.ECHO else "NOECHO", "ICANON" if lflag & termios.ICANON else "RAW", p.returncode)
"#;
    let out = Out::from(
        Command::new("/usr/bin/python3")
            .args(["-c", driver, BIN])
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .env("HOME", &env.home)
            .env("RUNWS_ROOT", &env.root)
            .current_dir(env.tmp.path())
            .output()
            .unwrap(),
    );
    out.ok();
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(lines, vec!["ECHO ICANON 0", "ECHO ICANON 0"], "{}\n{}", out.stdout, out.stderr);
}
