//! The command's environment is built from empty.

use std::collections::BTreeSet;

use crate::harness::*;

const DOCUMENTED: [&str; 25] = [
    "PATH",
    "HOME",
    "TMPDIR",
    "TMP",
    "TEMP",
    "XDG_CACHE_HOME",
    "XDG_CONFIG_HOME",
    "XDG_DATA_HOME",
    "XDG_STATE_HOME",
    "XDG_RUNTIME_DIR",
    "GIT_CONFIG_GLOBAL",
    "GIT_CONFIG_SYSTEM",
    "GIT_CONFIG_NOSYSTEM",
    "npm_config_cache",
    "PNPM_HOME",
    "LANG",
    "PORT",
    "RUN_ID",
    "RUNWS_RUN_ID",
    "RUNWS_DIR",
    "RUNWS_ROOT",
    "RUNWS_JOB",
    "RUNWS_PREFIX",
    "PORT_1",
    "PORT_2",
];

fn names(env_output: &str) -> BTreeSet<String> {
    env_output
        .split('\0')
        .filter(|l| !l.is_empty())
        .map(|l| l.split('=').next().unwrap().to_string())
        .collect()
}

#[test]
fn the_environment_is_exactly_the_documented_set() {
    let env = Env::new();
    // /usr/bin/env -0 prints exactly what exec gave it (a shell would add PWD).
    let out = env.run(&["run", "--run-id", "e", "--ports", "3", "--", "env", "-0"]);
    out.ok();
    let want: BTreeSet<String> = DOCUMENTED.iter().map(|s| s.to_string()).collect();
    assert_eq!(names(&out.stdout), want);
    let vars: std::collections::BTreeMap<&str, &str> =
        out.stdout.split('\0').filter(|l| !l.is_empty()).filter_map(|l| l.split_once('=')).collect();
    let dir = env.run_dir("e").display().to_string();
    assert_eq!(vars["HOME"], format!("{dir}/home"));
    assert_eq!(vars["TMPDIR"], format!("{dir}/tmp"));
    assert_eq!(vars["XDG_RUNTIME_DIR"], format!("{dir}/run"));
    assert_eq!(vars["GIT_CONFIG_GLOBAL"], format!("{dir}/home/.gitconfig"));
    assert_eq!(vars["GIT_CONFIG_SYSTEM"], "/dev/null");
    assert_eq!(vars["PATH"], format!("{dir}/bin:/usr/local/bin:/usr/bin:/bin"));
    assert_eq!(vars["RUNWS_RUN_ID"], "e");
    assert_eq!(vars["RUN_ID"], "e");
    assert_eq!(vars["RUNWS_JOB"], "env");
    assert!(vars["RUNWS_PREFIX"].starts_with("rw-") && vars["RUNWS_PREFIX"].len() == 13);
    // The manifest lists the names, all set by runws, and no values.
    let m = env.manifest("e");
    let recorded: BTreeSet<String> =
        m["env"].as_array().unwrap().iter().map(|e| e["name"].as_str().unwrap().to_string()).collect();
    assert_eq!(recorded, want);
    assert!(m["env"].as_array().unwrap().iter().all(|e| e["granted"] == false));
    // The run directory layout: exactly the ten entries, no temp file left.
    for d in ["inputs", "outputs", "work", "logs", "home", "tmp", "cache", "run", "bin"] {
        assert!(env.run_dir("e").join(d).is_dir(), "{d} missing");
    }
    let entries: BTreeSet<String> = std::fs::read_dir(env.run_dir("e"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    let layout = ["bin", "cache", "home", "inputs", "logs", "manifest.json", "outputs", "run", "tmp", "work"];
    assert_eq!(entries, layout.iter().map(|s| s.to_string()).collect::<BTreeSet<_>>());
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(env.run_dir("e").join("run")).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o700);
    assert!(std::fs::read_link(env.run_dir("e").join("bin/runws")).is_ok());
}

#[test]
fn planted_secrets_reach_neither_child_nor_grandchild_nor_manifest() {
    let env = Env::new();
    let aws = fake_secret("aws-fake");
    let gh = fake_secret("gh-fake");
    let granted = fake_secret("granted-fake");
    let out = Out::from(
        env.cmd(&[
            "run",
            "--run-id",
            "s",
            "--env",
            &format!("MY_TOKEN={granted}"),
            "--pass",
            "ABSENT_ONE",
            "--",
            "sh",
            "-c",
            "env; sh -c 'env; cat /proc/$PPID/environ | tr \"\\0\" \"\\n\"'",
        ])
        .env("AWS_SECRET_ACCESS_KEY", &aws)
        .env("GITHUB_TOKEN", &gh)
        .output()
        .unwrap(),
    );
    out.ok();
    assert!(!out.stdout.contains(&aws) && !out.stdout.contains("AWS_SECRET_ACCESS_KEY"), "{}", out.stdout);
    assert!(!out.stdout.contains(&gh) && !out.stdout.contains("GITHUB_TOKEN"));
    assert!(out.stdout.contains(&format!("MY_TOKEN={granted}")), "the grant did not arrive");
    assert!(!out.stdout.contains("ABSENT_ONE"));
    let manifest = std::fs::read_to_string(env.run_dir("s").join("manifest.json")).unwrap();
    assert!(!manifest.contains(&granted) && !manifest.contains(&aws) && !manifest.contains(&gh));
    let m = env.manifest("s");
    let rec = m["env"].as_array().unwrap();
    let my = rec.iter().find(|e| e["name"] == "MY_TOKEN").unwrap();
    assert_eq!(my["granted"], true);
    let absent = rec.iter().find(|e| e["name"] == "ABSENT_ONE").unwrap();
    assert_eq!(absent["present"], false);
}

#[test]
fn pass_copies_from_runws_environment_and_env_file_is_read() {
    let env = Env::new();
    let file = env.path("grants.env");
    std::fs::write(&file, "# comment\nFROM_FILE='file value'\nexport OTHER=2\n").unwrap();
    let out = Out::from(
        env.cmd(&[
            "run",
            "--pass",
            "DEPLOY_ENV",
            "--env-file",
            file.to_str().unwrap(),
            "--",
            "sh",
            "-c",
            "echo $DEPLOY_ENV/$FROM_FILE/$OTHER",
        ])
        .env("DEPLOY_ENV", "staging")
        .output()
        .unwrap(),
    );
    out.ok().stdout_has("staging/file value/2");
    env.run(&["run", "--env", "HOME=/root", "--", "true"])
        .code(125)
        .one_line_error()
        .stderr_has("`HOME` is set by runws");
    env.run(&["run", "--env", "NOEQUALS", "--", "true"]).code(125).one_line_error();
    env.run(&["run", "--pass", "BAD-NAME", "--", "true"]).code(125).one_line_error();
    env.run(&["run", "--env-file", "/nonexistent/file", "--", "true"]).code(125).one_line_error();
    // Refused invocations created no run.
    assert_eq!(env.run_ids().len(), 1);
}

#[test]
fn git_config_global_lands_in_the_run_not_in_the_real_home() {
    let env = Env::new();
    if std::process::Command::new("git").arg("--version").output().is_err() {
        eprintln!("skipped: git is not installed");
        return;
    }
    env.run(&["run", "--run-id", "g", "--", "git", "config", "--global", "user.name", "Run Scoped"]).ok();
    let cfg = std::fs::read_to_string(env.run_dir("g").join("home/.gitconfig")).unwrap();
    assert!(cfg.contains("Run Scoped"));
    assert!(!env.home.join(".gitconfig").exists(), "the outer HOME got a gitconfig");
    // A second run starts from an empty config.
    env.run(&["run", "--", "git", "config", "--global", "user.name"]).code(1);
}

/// The command cannot read runws's own environment (which holds the
/// parent's secrets) through /proc: runws is not dumpable. Checked as an
/// ordinary user, since root may read any process's environ.
#[test]
fn proc_environ_of_runws_is_unreadable_for_a_non_root_child() {
    let env = Env::new();
    let secret = fake_secret("parent-only");
    let mut cmd = env.cmd(&[
        "run",
        "--",
        "sh",
        "-c",
        // Control: its own environ is readable; runws's (its parent's) is not.
        "cat /proc/self/environ >/dev/null && echo SELF_OK; cat /proc/$PPID/environ && echo PARENT_READ || echo PARENT_DENIED",
    ]);
    cmd.env("AWS_SECRET_ACCESS_KEY", &secret);
    if is_root() {
        // Run as `nobody`, with a root and a binary that user can reach.
        use std::os::unix::fs::PermissionsExt;
        use std::os::unix::process::CommandExt;
        let open = |p: &std::path::Path| {
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o777)).unwrap()
        };
        open(env.tmp.path());
        std::fs::create_dir_all(&env.root).unwrap();
        open(&env.root);
        open(&env.home);
        let bin = env.path("runws-copy");
        std::fs::copy(BIN, &bin).unwrap();
        std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
        let mut c = std::process::Command::new(&bin);
        c.args(["run", "--", "sh", "-c", "cat /proc/self/environ >/dev/null && echo SELF_OK; cat /proc/$PPID/environ && echo PARENT_READ || echo PARENT_DENIED"])
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .env("HOME", &env.home)
            .env("RUNWS_ROOT", &env.root)
            .env("AWS_SECRET_ACCESS_KEY", &secret)
            .current_dir(env.tmp.path())
            .uid(65534)
            .gid(65534);
        cmd = c;
    }
    let out = Out::from(crate::sandbox::Retry::output_retrying(&mut cmd));
    out.ok().stdout_has("SELF_OK").stdout_has("PARENT_DENIED");
    assert!(!out.stdout.contains(&secret));
}

#[test]
fn pass_globs_over_runws_environment_and_tz_is_passed() {
    let env = Env::new();
    let out = Out::from(
        env.cmd(&["run", "--run-id", "g", "--pass", "GITHUB_*", "--pass", "NONE_?", "--", "env", "-0"])
            .env("GITHUB_SHA", "abc")
            .env("GITHUB_REF", "refs/heads/main")
            .env("GITHUBX", "not matched")
            .env("TZ", "Europe/Paris")
            .output()
            .unwrap(),
    );
    out.ok();
    let vars: std::collections::BTreeMap<&str, &str> =
        out.stdout.split('\0').filter(|l| !l.is_empty()).filter_map(|l| l.split_once('=')).collect();
    assert_eq!(vars.get("GITHUB_SHA"), Some(&"abc"));
    assert_eq!(vars.get("GITHUB_REF"), Some(&"refs/heads/main"));
    assert_eq!(vars.get("GITHUBX"), None);
    assert_eq!(vars.get("TZ"), Some(&"Europe/Paris"));
    // Each matched variable is its own record, by name; the glob too, and a
    // glob that matched nothing is recorded as absent.
    let m = env.manifest("g");
    let rec = |name: &str| m["env"].as_array().unwrap().iter().find(|e| e["name"] == name).cloned();
    for name in ["GITHUB_SHA", "GITHUB_REF"] {
        let r = rec(name).unwrap_or_else(|| panic!("{name} not recorded: {}", m["env"]));
        assert_eq!(
            (r["granted"].clone(), r["source"].clone(), r["present"].clone()),
            (true.into(), "pass".into(), true.into())
        );
    }
    assert_eq!(rec("GITHUB_*").unwrap()["present"], true);
    assert_eq!(rec("NONE_?").unwrap()["present"], false);
    assert_eq!(rec("GITHUBX"), None);
    let tz = rec("TZ").unwrap();
    assert_eq!((tz["granted"].clone(), tz["source"].clone()), (false.into(), "runws".into()));
    assert!(!serde_json::to_string(&m).unwrap().contains("refs/heads/main"), "a value was recorded");
    // A glob never passes what runws sets itself, and takes only name characters.
    let out = Out::from(env.cmd(&["run", "--pass", "HO*", "--", "sh", "-c", "echo $HOME"]).output().unwrap());
    out.ok().stdout_has("/home\n");
    env.run(&["run", "--pass", "GIT-*", "--", "true"]).code(125).one_line_error();
}
