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
