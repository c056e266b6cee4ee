//! Many runs at once: each keeps to itself.

use std::collections::BTreeSet;

use crate::harness::*;

#[test]
fn twenty_overlapping_runs_keep_their_own_outputs_ports_and_dirs() {
    let env = Env::new();
    let script = r#"
        printf "$RUN_ID" | runws put id || exit 1
        sleep 0.3
        printf "$RUN_ID" | runws put id || exit 2
        test "$(runws get id)" = "$RUN_ID" || exit 3
        echo "$RUN_ID $PORT $PORT_1"
    "#;
    let children: Vec<_> = (0..20)
        .map(|_| {
            env.cmd(&["run", "--ports", "2", "--", "sh", "-c", script])
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut ids = BTreeSet::new();
    let mut ports = BTreeSet::new();
    for c in children {
        let out = Out::from(c.wait_with_output().unwrap());
        out.ok();
        let f: Vec<&str> = out.stdout.split_whitespace().collect();
        assert!(ids.insert(f[0].to_string()), "run id shared");
        assert!(ports.insert(f[1].to_string()), "port {} shared", f[1]);
        assert!(ports.insert(f[2].to_string()), "port {} shared", f[2]);
    }
    assert_eq!(ids.len(), 20);
    assert_eq!(env.run_ids().into_iter().collect::<BTreeSet<_>>(), ids);
    for id in &ids {
        let m = env.manifest(id);
        assert_eq!(m["status"], "succeeded");
        let outs = m["outputs"].as_array().unwrap();
        assert_eq!(outs.len(), 1);
        assert_eq!(outs[0]["file"], format!("id.{id}"));
        assert_eq!(std::fs::read_to_string(env.run_dir(id).join(format!("outputs/id.{id}"))).unwrap(), *id);
        assert_eq!(std::fs::read_dir(env.run_dir(id).join("outputs")).unwrap().count(), 1);
    }
}

#[test]
fn concurrent_guard_calls_in_one_run_lose_no_write() {
    let env = Env::new();
    let out = env.sh(
        "many",
        r#"
        for i in $(seq 1 30); do (printf "$i" | runws put "o$i") & done
        wait
        "#,
    );
    out.ok();
    let m = env.manifest("many");
    let names: BTreeSet<String> =
        m["outputs"].as_array().unwrap().iter().map(|o| o["name"].as_str().unwrap().to_string()).collect();
    assert_eq!(names.len(), 30, "lost writes: {names:?}");
    assert_eq!(m["status"], "succeeded");
}

#[test]
fn the_lease_is_renewed_while_the_command_runs() {
    let env = Env::new();
    let out = env.run(&[
        "run",
        "--run-id",
        "lease",
        "--lease-ttl",
        "0.3",
        "--",
        "sh",
        "-c",
        r#"a=$(runws info --json | grep lease_until); sleep 0.6; b=$(runws info --json | grep lease_until); test "$a" != "$b" && echo RENEWED"#,
    ]);
    out.ok().stdout_has("RENEWED");
}
