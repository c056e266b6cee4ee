//! Failures that say which option or value caused them.

use crate::harness::Env;

#[test]
fn a_variable_too_large_for_the_kernel_is_named() {
    let env = Env::new();
    let file = env.path("big.env");
    std::fs::write(&file, format!("SMALL=1\nHUGE={}\n", "x".repeat(200 * 1024))).unwrap();
    let f = file.to_str().unwrap();
    env.run(&["run", "--run-id", "one", "--env-file", f, "--", "true"])
        .code(125)
        .one_line_error()
        .stderr_has("variable `HUGE` (from `--env-file`) is ")
        .stderr_has("the kernel takes at most 131072 bytes for one variable");
    assert!(!env.run(&["show", "one"]).stdout.contains("Argument list too long"));
    assert_eq!(env.manifest("one")["status"], "failed");

    // Each under the limit for one, together over it (6 MiB at most).
    let mut many = String::new();
    for i in 0..70 {
        many.push_str(&format!("V{i}={}\n", "y".repeat(100 * 1024)));
    }
    many.push_str(&format!("LARGEST={}\n", "z".repeat(120 * 1024)));
    std::fs::write(&file, many).unwrap();
    env.run(&["run", "--env-file", f, "--", "true"])
        .code(125)
        .one_line_error()
        .stderr_has("the command's arguments and environment are ")
        .stderr_has("the largest variable granted is `LARGEST` (from `--env-file`)");
}

#[test]
fn ls_and_show_of_a_missing_root_say_so() {
    let env = Env::new();
    let missing = env.path("no-such-root");
    let m = missing.to_str().unwrap();
    env.run(&["ls", "--root", m]).code(125).one_line_error().stderr_has(&format!("no root at `{m}`"));
    env.run(&["show", "--root", m, "last"])
        .code(125)
        .one_line_error()
        .stderr_has(&format!("no root at `{m}`"));
    // A root that exists but holds no runs yet lists none.
    std::fs::create_dir(&missing).unwrap();
    env.run(&["ls", "--root", m]).ok();
}

#[test]
fn a_timeout_that_fires_says_so() {
    let env = Env::new();
    env.run(&["run", "--timeout", "200ms", "--", "sleep", "30"])
        .code(124)
        .stderr_has("runws: timed out after 200ms; sent SIGTERM to the command's group\n");
    env.run(&[
        "run",
        "--timeout",
        "0.2",
        "--kill-after",
        "300ms",
        "--",
        "sh",
        "-c",
        "trap '' TERM; while :; do sleep 0.05; done",
    ])
    .code(124)
    .stderr_has("runws: timed out after 200ms; sent SIGTERM to the command's group\n")
    .stderr_has("runws: the command's group outlived --kill-after 300ms; sent SIGKILL\n");
    // A command that ends in time: nothing said.
    let out = env.run(&["run", "--timeout", "30s", "--", "true"]);
    out.ok();
    assert!(!out.stderr.contains("timed out"), "{out:?}");
}
