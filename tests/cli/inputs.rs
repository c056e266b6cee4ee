//! Inputs are copied and fingerprinted.

use crate::harness::*;

fn fp(env: &Env, id: &str) -> String {
    env.manifest(id)["input_fingerprint"].as_str().unwrap().to_string()
}

#[test]
fn inputs_are_copied_hashed_and_fingerprinted_independently_of_order() {
    let env = Env::new();
    std::fs::write(env.path("a.txt"), "alpha").unwrap();
    std::fs::create_dir_all(env.path("dir/sub")).unwrap();
    std::fs::write(env.path("dir/sub/b.bin"), [0u8, 1, 2, 3]).unwrap();
    std::os::unix::fs::symlink("sub/b.bin", env.path("dir/link")).unwrap();
    env.run(&["run", "--run-id", "i1", "--input", "a.txt", "--input", "dir", "--", "true"]).ok();
    env.run(&["run", "--run-id", "i2", "--input", "dir", "--input", "a.txt", "--", "true"]).ok();
    assert_eq!(fp(&env, "i1"), fp(&env, "i2"));
    let m = env.manifest("i1");
    let paths: Vec<&str> =
        m["inputs"].as_array().unwrap().iter().map(|i| i["path"].as_str().unwrap()).collect();
    assert_eq!(paths, ["a.txt", "dir/link", "dir/sub/b.bin"]);
    // sha256("alpha")
    assert_eq!(m["inputs"][0]["sha256"], "8ed3f6ad685b959ead7022518e1af76cd816f8e8ec7ccdda1ed4018e8f2223f8");
    assert_eq!(m["inputs"][0]["bytes"], 5);
    assert_eq!(m["inputs"][1]["kind"], "symlink");
    assert_eq!(std::fs::read(env.run_dir("i1").join("inputs/dir/sub/b.bin")).unwrap(), [0u8, 1, 2, 3]);
    assert_eq!(
        std::fs::read_link(env.run_dir("i1").join("inputs/dir/link")).unwrap().to_str().unwrap(),
        "sub/b.bin"
    );

    // One byte changed: another fingerprint.
    std::fs::write(env.path("a.txt"), "alphA").unwrap();
    env.run(&["run", "--run-id", "i3", "--input", "a.txt", "--input", "dir", "--", "true"]).ok();
    assert_ne!(fp(&env, "i1"), fp(&env, "i3"));
    // Same bytes under another name: another fingerprint.
    std::fs::write(env.path("c.txt"), "alpha").unwrap();
    env.run(&["run", "--run-id", "i4", "--input", "c.txt", "--input", "dir", "--", "true"]).ok();
    assert_ne!(fp(&env, "i1"), fp(&env, "i4"));
    // Timestamps do not matter.
    std::fs::write(env.path("a.txt"), "alpha").unwrap();
    env.run(&["run", "--run-id", "i5", "--input", "a.txt", "--input", "dir", "--", "true"]).ok();
    assert_eq!(fp(&env, "i1"), fp(&env, "i5"));
}

#[test]
fn external_fingerprint_is_recorded_and_bad_inputs_are_refused() {
    let env = Env::new();
    env.run(&["run", "--run-id", "f", "--fingerprint", "git:abc123", "--", "true"]).ok();
    assert_eq!(env.manifest("f")["fingerprint"], "git:abc123");
    env.run(&["run", "--input", "missing.txt", "--", "true"])
        .code(125)
        .one_line_error()
        .stderr_has("missing.txt");
    std::fs::create_dir_all(env.path("x")).unwrap();
    std::fs::write(env.path("x/same"), "1").unwrap();
    std::fs::create_dir_all(env.path("y")).unwrap();
    std::fs::write(env.path("y/same"), "2").unwrap();
    env.run(&["run", "--run-id", "dup", "--input", "x/same", "--input", "y/same", "--", "true"])
        .code(125)
        .stderr_has("two inputs are named `same`");
    assert_eq!(env.manifest("dup")["status"], "failed");
    nix::unistd::mkfifo(&env.path("fifo"), nix::sys::stat::Mode::from_bits_truncate(0o644)).unwrap();
    env.run(&["run", "--input", "fifo", "--", "true"]).code(125).stderr_has("not a regular file");
}
