//! Kernel-assigned ports, unique among live runs; socket activation.

use crate::harness::*;

#[test]
fn ports_are_distinct_and_recorded() {
    let env = Env::new();
    let out =
        env.run(&["run", "--run-id", "p", "--ports", "3", "--", "sh", "-c", "echo $PORT $PORT_1 $PORT_2"]);
    out.ok();
    let ports: Vec<u16> = out.stdout.split_whitespace().map(|p| p.parse().unwrap()).collect();
    assert_eq!(ports.len(), 3);
    assert!(ports[0] != ports[1] && ports[1] != ports[2] && ports[0] != ports[2]);
    let m = env.manifest("p");
    let recorded: Vec<u64> =
        m["ports"].as_array().unwrap().iter().map(|p| p["port"].as_u64().unwrap()).collect();
    assert_eq!(recorded, ports.iter().map(|p| *p as u64).collect::<Vec<_>>());
    // The command can bind the port it was given.
    let script = "python3 -c 'import os,socket; s=socket.socket(); s.bind((\"127.0.0.1\", int(os.environ[\"PORT\"]))); print(\"bound\")'";
    if std::process::Command::new("python3").arg("-V").output().is_ok() {
        env.run(&["run", "--", "sh", "-c", script]).ok().stdout_has("bound");
    }
    env.run(&["run", "--ports", "0", "--", "sh", "-c", "test -z \"$PORT\""]).ok();
    env.run(&["run", "--port-host", "not-an-ip", "--", "true"]).code(125).one_line_error();
}

#[test]
fn listen_hands_over_bound_listening_sockets() {
    let env = Env::new();
    if std::process::Command::new("python3").arg("-V").output().is_err() {
        eprintln!("skipped: python3 is not installed");
        return;
    }
    let script = r#"
import os, socket
assert os.environ["LISTEN_PID"] == str(os.getpid()), (os.environ["LISTEN_PID"], os.getpid())
n = int(os.environ["LISTEN_FDS"])
assert os.environ["LISTEN_FDNAMES"] == "PORT:PORT_1"
for i in range(n):
    s = socket.socket(fileno=3 + i)
    assert s.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN) == 1
    want = int(os.environ["PORT" if i == 0 else "PORT_%d" % i])
    assert s.getsockname()[1] == want
    c = socket.create_connection(("127.0.0.1", want))
    conn, _ = s.accept()
    c.sendall(b"hi"); assert conn.recv(2) == b"hi"
print("ok", n)
"#;
    env.run(&["run", "--listen", "--ports", "2", "--", "python3", "-c", script]).ok().stdout_has("ok 2");
}

/// Whether some live process holds byte `port` of the ledger, asked the way
/// another runws asks (an open-file-description lock that fails at once).
fn held(ledger: &std::path::Path, port: u16) -> bool {
    let file = std::fs::OpenOptions::new().read(true).write(true).open(ledger).unwrap();
    // SAFETY: flock is a plain C struct for which all-zero is a valid value.
    let mut range: nix::libc::flock = unsafe { std::mem::zeroed() };
    range.l_type = nix::libc::F_WRLCK as i16;
    range.l_whence = nix::libc::SEEK_SET as i16;
    range.l_start = port as i64;
    range.l_len = 1;
    match nix::fcntl::fcntl(&file, nix::fcntl::FcntlArg::F_OFD_SETLK(&range)) {
        Ok(_) => false,
        Err(nix::errno::Errno::EAGAIN | nix::errno::Errno::EACCES) => true,
        Err(e) => panic!("probing the ledger: {e}"),
    }
}

#[test]
fn a_port_is_held_while_its_run_lives_and_freed_when_runws_dies() {
    let env = Env::new();
    let ledger = env.root.join("store/ports.ledger");
    let live = |id: &str| {
        let c = env.cmd(&["run", "--run-id", id, "--ports", "2", "--", "sleep", "30"]).spawn().unwrap();
        let path = env.run_dir(id).join("manifest.json");
        // A deadline, not a count: a loaded machine is slow to start a run.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while std::time::Instant::now() < deadline {
            if std::fs::read(&path).is_ok_and(|b| serde_json::from_slice::<serde_json::Value>(&b).is_ok()) {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let ports: Vec<u16> = env.manifest(id)["ports"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["port"].as_u64().unwrap() as u16)
            .collect();
        assert_eq!(ports.len(), 2);
        for p in &ports {
            assert!(held(&ledger, *p), "port {p} of live run {id} is not held in the ledger");
        }
        (c, ports)
    };

    // SIGKILLed runws: the kernel drops its locks with its last descriptor.
    let (mut killed, ports) = live("killed");
    let child = env.manifest("killed")["child"]["pgid"].as_i64().unwrap() as i32;
    killed.kill().unwrap();
    killed.wait().unwrap();
    // Its last descriptor may be a copy in its child, when the child has
    // not executed the command yet: that child ends as soon as runws is
    // gone (its start gate closes), a moment later.
    for p in &ports {
        let freed = (0..1000).any(|_| {
            let free = !held(&ledger, *p);
            if !free {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            free
        });
        assert!(freed, "port {p} stayed held after its runws was killed");
    }
    let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(child), nix::sys::signal::Signal::SIGKILL);

    // A run that ends gives its ports back; the command never held them.
    let (mut ended, ports) = live("ended");
    let child = env.manifest("ended")["child"]["pgid"].as_i64().unwrap() as i32;
    // The child is recorded before it has made its group (it does so on its
    // way to the start gate): wait for the group, within a deadline.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        match nix::sys::signal::killpg(nix::unistd::Pid::from_raw(child), nix::sys::signal::Signal::SIGTERM) {
            Err(nix::errno::Errno::ESRCH) if std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(5))
            }
            r => break r.unwrap(),
        }
    }
    assert_eq!(ended.wait().unwrap().code(), Some(143));
    for p in &ports {
        assert!(!held(&ledger, *p), "port {p} stayed held after its run ended");
    }
}

#[test]
fn listen_refuses_more_sockets_than_fit_below_runws_own_descriptors() {
    let env = Env::new();
    env.run(&["run", "--listen", "--ports", "61", "--", "true"])
        .code(125)
        .one_line_error()
        .stderr_has("at most 60");
    assert!(env.run_ids().is_empty());
    env.run(&["run", "--listen", "--ports", "60", "--", "sh", "-c", "test $LISTEN_FDS = 60"]).ok();
}
