//! Reading runs back: ls and show.

use crate::harness::*;

#[test]
fn ls_and_show_list_runs_with_job_filter_and_last() {
    let env = Env::new();
    env.run(&["run", "--run-id", "a1", "--job", "alpha", "--", "true"]).ok();
    env.run(&["run", "--run-id", "b1", "--job", "beta", "--", "false"]).code(1);
    env.run(&["run", "--run-id", "a2", "--job", "alpha", "--", "true"]).ok();
    let all = env.run(&["ls", "--json"]);
    all.ok();
    let rows: serde_json::Value = serde_json::from_str(&all.stdout).unwrap();
    let ids: Vec<&str> = rows.as_array().unwrap().iter().map(|r| r["run_id"].as_str().unwrap()).collect();
    // Newest first.
    assert_eq!(ids, ["a2", "b1", "a1"]);
    let alpha = env.run(&["ls", "--job", "alpha", "--json"]);
    let rows: serde_json::Value = serde_json::from_str(&alpha.stdout).unwrap();
    assert_eq!(rows.as_array().unwrap().len(), 2);
    env.run(&["ls"]).ok().stdout_has("beta").stdout_has("failed");
    let last = env.run(&["show", "last", "--json"]);
    last.ok();
    let m: serde_json::Value = serde_json::from_str(&last.stdout).unwrap();
    assert_eq!(m["run_id"], "a2");
    env.run(&["show", "b1"]).ok().stdout_has("status:    failed");
    env.run(&["show", "nope"]).code(125).one_line_error().stderr_has("no run `nope`");
    env.run(&["run", "--job", "bad/job", "--", "true"]).code(125).one_line_error();
}

#[test]
fn a_run_whose_runws_died_shows_as_stale() {
    let env = Env::new();
    let marker = env.path("up");
    let mut child = env
        .cmd(&[
            "run",
            "--run-id",
            "dead",
            "--lease-ttl",
            "0.2",
            "--",
            "sh",
            "-c",
            &format!("touch '{}'; sleep 2", marker.display()),
        ])
        .spawn()
        .unwrap();
    while !marker.exists() {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(400));
    let out = env.run(&["ls", "--json"]);
    let rows: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(rows[0]["status"], "stale");
}
