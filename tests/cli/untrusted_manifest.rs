//! Outside a sandbox the command can rewrite its own `manifest.json`. Every
//! value runws reads back from a manifest is checked as strictly as it was on
//! the command line before it names a path or a process: an edited manifest
//! is unreadable (and says which field), and `runws run` puts back the fields
//! it owns when it records the end.

use std::path::Path;

use crate::harness::*;

/// A shell snippet, run by the command, that rewrites its own manifest with
/// the Python statement `edit` (on `m`, the parsed manifest).
fn self_edit(edit: &str) -> String {
    format!(
        r#"python3 - <<'EOF'
import fcntl, json, os
# Under the run directory's lock, as runws changes the manifest: a renewal
# of runws's between this read and the rename would otherwise be lost, or
# replace this edit.
d = os.open(os.environ["RUNWS_DIR"], os.O_RDONLY)
fcntl.flock(d, fcntl.LOCK_EX)
p = os.path.join(os.environ["RUNWS_DIR"], "manifest.json")
m = json.load(open(p))
{edit}
open(p + ".new", "w").write(json.dumps(m))
os.rename(p + ".new", p)
fcntl.flock(d, fcntl.LOCK_UN)
EOF"#
    )
}

/// Rewrites a finished run's manifest as a process the command left behind
/// would (`edit` changes the parsed manifest).
fn edit_after(env: &Env, id: &str, edit: impl FnOnce(&mut serde_json::Value)) {
    let path = env.run_dir(id).join("manifest.json");
    let mut m: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    edit(&mut m);
    std::fs::write(&path, serde_json::to_vec_pretty(&m).unwrap()).unwrap();
}

/// Runs `script` as run `id` (which must succeed) with a 0.3s lease and
/// 0.5s more after the script, so runws renews the lease while what the
/// script did stands; the manifest at the end.
fn run_past_a_renewal(env: &Env, id: &str, script: &str) -> serde_json::Value {
    let command = format!("{script}\nsleep 0.5");
    env.run(&["run", "--run-id", id, "--lease-ttl", "0.3", "--", "sh", "-c", &command]).ok();
    env.manifest(id)
}

/// Everything under the test's directory that is not under ROOT, the
/// outer HOME or the binary copy: what a run must never create.
fn outside_root(env: &Env) -> Vec<String> {
    tree(env.tmp.path())
        .into_iter()
        .filter(|p| {
            !(p == "root" || p.starts_with("root/") || p.starts_with("outer-home") || p == "runws-copy")
        })
        .collect()
}

/// The job values a command might write: traversal, absolute, nested.
fn forged_jobs(env: &Env) -> Vec<String> {
    vec![
        "../../x".into(),
        "../x".into(),
        env.path("abs").display().to_string(),
        "a/../../../y".into(),
        "..".into(),
        "".into(),
    ]
}

#[test]
fn run_seal_takes_the_job_from_runws_not_from_the_edited_manifest() {
    let env = Env::new();
    for (i, job) in forged_jobs(&env).iter().enumerate() {
        let id = format!("r{i}");
        let script = self_edit(&format!("m['job'] = {job:?}"));
        let out = env.run(&["run", "--run-id", &id, "--job", "real", "--seal", "--", "sh", "-c", &script]);
        out.ok();
        assert_eq!(outside_root(&env), Vec::<String>::new(), "job {job:?} wrote outside ROOT");
        let archive = env.root.join("archive/real").join(format!("{id}.tar.zst"));
        assert!(archive.is_file(), "job {job:?}: no archive at {}\n{}", archive.display(), out.stderr);
        let m = env.manifest(&id);
        assert_eq!(m["job"], "real");
        assert_eq!(m["status"], "succeeded");
        let fields = m["restored"][0]["fields"].as_array().expect("the restoration is recorded");
        assert!(fields.iter().any(|f| f == "job"), "{m}");
    }
    let archives: Vec<String> = tree(&env.root.join("archive"));
    assert!(archives.iter().all(|p| p == "real" || p.starts_with("real/")), "{archives:?}");
}

#[test]
fn seal_refuses_a_manifest_edited_after_the_run() {
    let env = Env::new();
    for (i, job) in forged_jobs(&env).iter().enumerate() {
        let id = format!("s{i}");
        env.run(&["run", "--run-id", &id, "--job", "real", "--", "true"]).ok();
        edit_after(&env, &id, |m| m["job"] = job.as_str().into());
        let out = env.run(&["seal", &id]);
        out.code(125).stderr_has("`job`").one_line_error();
        assert_eq!(outside_root(&env), Vec::<String>::new(), "job {job:?} wrote outside ROOT");
        assert!(!env.root.join("archive").exists() || tree(&env.root.join("archive")).is_empty());
    }
}

#[test]
fn a_run_id_other_than_the_directory_is_refused() {
    let env = Env::new();
    env.run(&["run", "--run-id", "mine", "--", "true"]).ok();
    env.run(&["run", "--run-id", "other", "--", "true"]).ok();
    edit_after(&env, "mine", |m| m["run_id"] = "other".into());
    env.run(&["seal", "mine"]).code(125).stderr_has("`run_id`").stderr_has("`mine`");
    env.run(&["show", "mine"]).code(125).stderr_has("`run_id`");
    edit_after(&env, "mine", |m| m["run_id"] = "../other".into());
    env.run(&["seal", "mine"]).code(125).stderr_has("`run_id`");
    assert!(!env.root.join("archive").exists());
}

#[test]
fn ls_and_show_name_the_bad_field() {
    let env = Env::new();
    env.run(&["run", "--run-id", "p", "--", "sh", "-c", "echo x | runws put data"]).ok();
    env.run(&["run", "--run-id", "c", "--", "sh", "-c", "runws import p data"]).ok();
    type Edit = Box<dyn Fn(&mut serde_json::Value)>;
    let cases: Vec<(&str, Edit)> = vec![
        ("`job`", Box::new(|m| m["job"] = "../../x".into())),
        ("`inputs[0].from_run`", Box::new(|m| m["inputs"][0]["from_run"] = "../other".into())),
        ("`inputs[0].path`", Box::new(|m| m["inputs"][0]["path"] = "../../etc/passwd".into())),
        ("`child.pgid`", Box::new(|m| m["child"]["pgid"] = 1.into())),
        ("`child.pid`", Box::new(|m| m["child"]["pid"] = (-1).into())),
        ("`runws.pid`", Box::new(|m| m["runws"]["pid"] = 0.into())),
    ];
    let original = std::fs::read(env.run_dir("c").join("manifest.json")).unwrap();
    for (field, edit) in cases {
        std::fs::write(env.run_dir("c").join("manifest.json"), &original).unwrap();
        edit_after(&env, "c", edit);
        let out = env.run(&["ls", "--json"]);
        out.ok();
        let rows: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
        let row = rows.as_array().unwrap().iter().find(|r| r["run_id"] == "c").unwrap();
        assert_eq!(row["status"], "unreadable", "{field}: {row}");
        assert!(row["error"].as_str().unwrap().contains(field), "{field}: {row}");
        env.run(&["show", "c"]).code(125).stderr_has(field).one_line_error();
    }
}

#[test]
fn an_output_file_outside_outputs_is_never_read() {
    let env = Env::new();
    let secret = env.path("secret");
    std::fs::write(&secret, b"x\n").unwrap();
    // A process the producer left behind points its record of `data` at a
    // file four levels up, with that file's very bytes and sha256.
    env.run(&["run", "--run-id", "p", "--", "sh", "-c", "echo x | runws put data"]).ok();
    edit_after(&env, "p", |m| m["outputs"][0]["file"] = "../../../../secret".into());
    let out = env.sh("c", "runws import p data");
    out.code(125).stderr_has("`outputs[0].file`");
    assert!(!env.run_dir("c").join("inputs/p/data").exists());
    assert!(Path::new(&secret).exists());
}

#[test]
fn reap_skips_a_forged_manifest_and_signals_nothing() {
    let env = Env::new();
    for (i, (field, value)) in
        [("pgid", 1), ("pgid", 0), ("pgid", -1), ("pid", 1), ("pid", -1)].into_iter().enumerate()
    {
        let id = format!("f{i}");
        env.run(&["run", "--run-id", &id, "--", "true"]).ok();
        edit_after(&env, &id, |m| {
            m["status"] = "running".into();
            m["lease_until"] = "2000-01-01T00:00:00.000Z".into();
            m["child"][field] = value.into();
        });
        let before = std::fs::read(env.run_dir(&id).join("manifest.json")).unwrap();
        let out = env.run(&["reap", "--json"]);
        out.ok();
        let v: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
        let r = v.as_array().unwrap().iter().find(|r| r["run_id"] == id.as_str()).unwrap();
        assert_eq!(r["action"], "skipped", "{r}");
        assert!(r["reason"].as_str().unwrap().contains(&format!("`child.{field}`")), "{r}");
        assert!(r["steps"].as_array().unwrap().is_empty(), "{r}");
        assert_eq!(std::fs::read(env.run_dir(&id).join("manifest.json")).unwrap(), before);
        assert!(env.run_dir(&id).join("home").exists(), "a forged run was torn down");
    }
}

#[test]
fn a_corrupted_manifest_still_gets_the_real_end() {
    let env = Env::new();
    // Not JSON at all.
    let out = env.run(&[
        "run",
        "--run-id",
        "garbage",
        "--",
        "sh",
        "-c",
        "printf '{ not json' > \"$RUNWS_DIR/manifest.json\"; exit 3",
    ]);
    out.code(3);
    let m = env.manifest("garbage");
    assert_eq!(m["status"], "failed");
    assert_eq!(m["exit_code"], 3);
    assert_eq!(m["run_id"], "garbage");
    assert!(m["restored"][0]["why"].as_str().unwrap().contains("not JSON"), "{m}");
    // A forged end: a reaper's takeover and another status, while runws
    // held its lease throughout.
    let script = self_edit(
        "m['status'] = 'abandoned'; m['reap'] = {'reaped_at': m['started_at'], 'reaped_by': 'x:1', \
         'was': 'running', 'completed': True}; m['exit_code'] = 0",
    );
    let out = env.run(&["run", "--run-id", "forged-end", "--", "sh", "-c", &format!("{script}\nexit 4")]);
    out.code(4);
    let m = env.manifest("forged-end");
    assert_eq!(m["status"], "failed", "{m}");
    assert_eq!(m["exit_code"], 4);
    // Fields runws owns are put back; what the guard recorded is kept.
    let script = format!(
        "echo kept | runws put data && {}",
        self_edit(
            "m['runws']['pid'] = 1; m['child']['pgid'] = 1; m['host'] = 'elsewhere'; \
             m['argv'] = ['forged']; m['lease'] = 5"
        )
    );
    let m = run_past_a_renewal(&env, "owned", &script);
    assert_eq!(m["status"], "succeeded");
    assert_ne!(m["runws"]["pid"], 1);
    assert_ne!(m["child"]["pgid"], 1);
    assert_ne!(m["host"], "elsewhere");
    assert_eq!(m["argv"][0], "sh");
    assert_eq!(m["outputs"][0]["name"], "data");
    env.run(&["show", "owned"]).ok();
}

#[test]
fn a_planted_final_temp_file_does_not_replace_the_final_record() {
    let env = Env::new();
    let script = r#"sleep 0.2
        printf '{ "forged": true }' > "$RUNWS_DIR/work/f"
        mv "$RUNWS_DIR/work/f" "$RUNWS_DIR/.manifest.json.final"
        exit 6"#;
    env.run(&["run", "--run-id", "planted", "--", "sh", "-c", script]).code(6);
    let m = env.manifest("planted");
    assert_eq!(m["status"], "failed", "{m}");
    assert_eq!(m["exit_code"], 6);
    env.run(&["show", "planted"]).ok();
}

/// A command that stops its runws past the lease (so it looks as if a
/// reaper could have taken the run over), writes a finished status into
/// the manifest and lets runws go on, does not get that status recorded:
/// only a reaper's own record (from another host) counts as a takeover.
#[test]
fn a_command_that_stops_runws_and_writes_succeeded_gets_its_real_end_recorded() {
    let env = Env::new();
    let script = r#"kill -STOP $PPID; sleep 1.5
        python3 - "$RUNWS_DIR/manifest.json" <<'PY'
import json, sys
p = sys.argv[1]; m = json.load(open(p))
m["status"] = "succeeded"; m["exit_code"] = 0
json.dump(m, open(p, "w"))
PY
        kill -CONT $PPID; exit 7"#;
    let out = env.run(&["run", "--run-id", "f", "--lease-ttl", "1s", "--", "sh", "-c", script]);
    out.code(7);
    let m = env.manifest("f");
    assert_eq!(m["status"], "failed", "{m}");
    assert_eq!(m["exit_code"], 7, "{m}");
}

/// A command that holds the run directory's lock cannot stall runws: the
/// lease renewal skips a turn instead of waiting, so `--timeout` still ends
/// the command on time, and the end is recorded.
#[test]
fn a_command_holding_the_run_lock_cannot_stall_the_timeout() {
    if std::process::Command::new("flock").arg("--version").output().is_err() {
        eprintln!("skipped: flock is not installed");
        return;
    }
    let env = Env::new();
    let started = std::time::Instant::now();
    let out = env.run(&[
        "run",
        "--run-id",
        "l",
        "--lease-ttl",
        "0.3s",
        "--timeout",
        "1s",
        "--",
        "sh",
        "-c",
        "flock -x \"$RUNWS_DIR\" sleep 20",
    ]);
    out.code(124);
    let took = started.elapsed();
    assert!(took < std::time::Duration::from_secs(10), "the timeout fired after {took:?}");
    assert_eq!(env.manifest("l")["status"], "timed_out");
}

/// An import the command forges under the path of one of runws's own
/// inputs does not replace runws's record of that input (nor its share of
/// the fingerprint).
#[test]
fn a_forged_import_does_not_replace_an_input_of_runws() {
    let env = Env::new();
    std::fs::write(env.path("data.csv"), "a,b\n").unwrap();
    let script = r#"python3 - "$RUNWS_DIR/manifest.json" <<'PY'
import json, sys
p = sys.argv[1]; m = json.load(open(p))
real = m["inputs"][0]
m["inputs"] = [dict(real, sha256="0" * 64, from_run="elsewhere", from_output="x")]
json.dump(m, open(p, "w"))
PY
        exit 0"#;
    let plain = env.run(&["run", "--run-id", "p", "--input", "data.csv", "--", "true"]);
    plain.ok();
    env.run(&["run", "--run-id", "f", "--input", "data.csv", "--lease-ttl", "1s", "--", "sh", "-c", script])
        .ok();
    let (p, f) = (env.manifest("p"), env.manifest("f"));
    assert_eq!(f["inputs"], p["inputs"], "{f}");
    assert_eq!(f["input_fingerprint"], p["input_fingerprint"]);
}

/// A forged record of runws's own (a checkpoint before any seal, a refusal
/// list of junk) never makes the run unreadable: runws's final record drops
/// what does not read as its type, entry by entry for the guard's list, and
/// says so under `restored`.
#[test]
fn a_forged_record_of_runws_is_dropped_from_the_final_record() {
    let env = Env::new();
    let script = self_edit(
        "m['checkpoint'] = 7; m['held'] = 'yes'; m['audit'] = 'none'; m['truncated'] = 'all'; \
         m['refused'] = [5, {'at': m['started_at'], 'call': 'import', 'name': 'n', 'run': 'r', 'why': 'w'}]",
    );
    let m = run_past_a_renewal(&env, "forged", &script);
    assert_eq!(m["status"], "succeeded", "{m}");
    for gone in ["checkpoint", "held", "audit", "truncated"] {
        assert!(m.get(gone).is_none(), "{gone}: {m}");
    }
    assert_eq!(m["refused"].as_array().unwrap().len(), 1, "{m}");
    let dropped = m["restored"][0]["dropped"].to_string();
    for named in ["refused[0]", "`checkpoint`", "`held`", "`audit`", "`truncated`"] {
        assert!(dropped.contains(named), "{named}: {dropped}");
    }
    env.run(&["show", "forged"]).ok();
}

/// After the run, a process it left can still forge a record: readers
/// refuse the manifest naming the record, as for any other field, and the
/// reaper leaves the run alone.
#[test]
fn ls_show_and_reap_name_a_forged_record_of_runws() {
    let env = Env::new();
    env.run(&["run", "--run-id", "r", "--", "true"]).ok();
    let original = std::fs::read(env.run_dir("r").join("manifest.json")).unwrap();
    let forged: [(&str, serde_json::Value); 5] = [
        ("lease", 5.into()),
        ("sandbox", serde_json::json!({"kind": "jail"})),
        ("held", "yes".into()),
        ("checkpoint", serde_json::json!([])),
        ("refused", serde_json::json!([{"at": 1}])),
    ];
    for (field, value) in forged {
        std::fs::write(env.run_dir("r").join("manifest.json"), &original).unwrap();
        edit_after(&env, "r", |m| m[field] = value);
        let named = format!("`{field}`");
        let out = env.run(&["ls", "--json"]);
        let rows: serde_json::Value = serde_json::from_str(&out.ok().stdout).unwrap();
        assert_eq!(rows[0]["status"], "unreadable", "{field}: {rows}");
        assert!(rows[0]["error"].as_str().unwrap().contains(&named), "{field}: {rows}");
        env.run(&["show", "r"]).code(125).stderr_has(&named).one_line_error();
        let out = env.run(&["reap", "--json"]);
        let v: serde_json::Value = serde_json::from_str(&out.ok().stdout).unwrap();
        assert_eq!(v[0]["action"], "skipped", "{v}");
        assert!(v[0]["reason"].as_str().unwrap().contains(&named), "{v}");
    }
}
