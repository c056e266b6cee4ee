//! File names are bytes: names that are not UTF-8, wherever a run's files
//! appear, are handled and shown escaped.

use crate::harness::*;

/// `caf\xe9` (Latin-1), made by the shell so no test source holds it.
const LATIN1: &str = "$(printf 'caf\\351')";

/// A name that is not UTF-8, left in the scratch directories, never stops
/// the reap of that run.
#[test]
fn a_name_that_is_not_utf8_in_scratch_is_reaped() {
    let env = Env::new();
    let script = format!(
        "printf x > \"$TMPDIR/{LATIN1}\"; mkdir -p \"$HOME/{LATIN1}/d\"; printf y > \"$HOME/{LATIN1}/d/{LATIN1}\""
    );
    env.sh("latin", &script).ok();
    let dir = env.run_dir("latin");
    assert_eq!(std::fs::read_dir(dir.join("tmp")).unwrap().count(), 1);
    env.run(&["reap", "--dry-run"]).ok().stdout_has("would remove scratch");
    let out = env.run(&["reap", "--json"]);
    out.ok();
    assert!(!out.stdout.contains("\"failed\""), "{}", out.stdout);
    for s in ["home", "tmp"] {
        assert!(!dir.join(s).exists(), "{s} was kept");
    }
    assert_eq!(env.manifest("latin")["reap"]["completed"], true);
}

/// `caf\xe9` as bytes, for the test's own checks.
fn latin1() -> std::ffi::OsString {
    std::os::unix::ffi::OsStringExt::from_vec(b"caf\xe9".to_vec())
}

/// `--input` of a file and of a directory whose names (and a name inside)
/// are not UTF-8: the run starts, every byte and name is copied as it is,
/// the manifest records the names so that they read back exactly, and the
/// fingerprint tells them from any other name.
#[test]
fn inputs_whose_names_are_not_utf8_are_copied_and_fingerprinted() {
    let env = Env::new();
    let name = latin1();
    let src = env.path("src");
    let dir = src.join(&name);
    std::fs::create_dir_all(dir.join("sub")).unwrap();
    std::fs::write(dir.join(&name), b"inner\xff bytes").unwrap();
    std::fs::write(dir.join("sub").join("plain.txt"), b"plain").unwrap();
    let file = src.join("f");
    std::fs::create_dir_all(&file).unwrap();
    let file = file.join(std::ffi::OsStr::from_bytes(b"top\xfe"));
    std::fs::write(&file, b"top").unwrap();
    let run = |id: &str, input_dir: &std::path::Path| {
        Out::from(
            env.cmd(&["run", "--run-id", id])
                .arg("--input")
                .arg(input_dir)
                .arg("--input")
                .arg(&file)
                .args(["--", "true"])
                .output()
                .unwrap(),
        )
    };
    run("a", &dir).ok();
    let inputs = env.run_dir("a").join("inputs");
    assert_eq!(std::fs::read(inputs.join(&name).join(&name)).unwrap(), b"inner\xff bytes");
    assert_eq!(std::fs::read(inputs.join(&name).join("sub/plain.txt")).unwrap(), b"plain");
    assert_eq!(std::fs::read(inputs.join(std::ffi::OsStr::from_bytes(b"top\xfe"))).unwrap(), b"top");
    let m = env.manifest("a");
    let paths: Vec<&serde_json::Value> = m["inputs"].as_array().unwrap().iter().map(|i| &i["path"]).collect();
    assert!(paths.contains(&&serde_json::json!({ "hex": "746f70fe" })), "{paths:?}");
    assert!(paths.contains(&&serde_json::json!({ "hex": "636166e92f636166e9" })), "{paths:?}");
    assert!(
        paths.contains(&&serde_json::json!({ "hex": "636166e92f7375622f706c61696e2e747874" })),
        "{paths:?}"
    );
    // `show --json` reads the manifest back and writes it out the same.
    let shown: serde_json::Value =
        serde_json::from_str(&env.run(&["show", "a", "--json"]).ok().stdout).unwrap();
    assert_eq!(shown["inputs"], m["inputs"]);
    assert_eq!(shown["input_fingerprint"], m["input_fingerprint"]);
    // Another byte in the name is another fingerprint; the same is the same.
    let other = src.join(std::ffi::OsStr::from_bytes(b"caf\xe8"));
    std::fs::rename(&dir, &other).unwrap();
    run("b", &other).ok();
    std::fs::rename(&other, &dir).unwrap();
    run("c", &dir).ok();
    let fp = |id: &str| env.manifest(id)["input_fingerprint"].clone();
    assert_ne!(fp("a"), fp("b"));
    assert_eq!(fp("a"), fp("c"));
}

use std::os::unix::ffi::OsStrExt;

/// The guard script: put, has, get and a second put of the same bytes of
/// a name that is not UTF-8.
const GUARD_CALLS: &str = "n=$(printf 'caf\\351'); printf 'b\\377' | runws put \"$n\" && runws has \"$n\" \
    && test \"$(runws get \"$n\" | od -An -tx1 | tr -d ' ')\" = 62ff && printf 'b\\377' | runws put -v \"$n\"";

/// `put`, `get`, `has` and `import` of a name that is not UTF-8, in a
/// plain run: stamped as `<name>.<run_id>` byte for byte, recorded, read
/// back, imported, and shown escaped by `show`.
#[test]
fn put_get_has_and_import_take_names_that_are_not_utf8() {
    let env = Env::new();
    env.sh("maker", GUARD_CALLS).ok().stderr_has("unchanged caf\\xe9.maker");
    let mut stamped = latin1();
    stamped.push(".maker");
    assert_eq!(std::fs::read(env.run_dir("maker").join("outputs").join(&stamped)).unwrap(), b"b\xff");
    let m = env.manifest("maker");
    assert_eq!(m["outputs"][0]["name"], serde_json::json!({ "hex": "636166e9" }));
    assert_eq!(m["outputs"][0]["file"], serde_json::json!({ "hex": "636166e92e6d616b6572" }));
    env.run(&["show", "maker"]).ok().stdout_has("output:    caf\\xe9 (2 bytes");
    env.sh("user", "runws import maker \"$(printf 'caf\\351')\"").ok();
    let copied = env.run_dir("user").join("inputs/maker").join(latin1());
    assert_eq!(std::fs::read(copied).unwrap(), b"b\xff");
    let input = &env.manifest("user")["inputs"][0];
    assert_eq!(input["path"], serde_json::json!({ "hex": "6d616b65722f636166e9" }));
    assert_eq!(input["from_output"], serde_json::json!({ "hex": "636166e9" }));
}

/// The same calls from inside a sandbox, whose broker carries the name's
/// bytes over the run's socket; as root and as an ordinary user.
#[test]
fn a_sandboxed_guard_call_carries_a_name_that_is_not_utf8() {
    use crate::sandbox::{Retry, everyone, runws_as, skip};
    for who in everyone() {
        if skip(who, "sandboxed names") {
            continue;
        }
        let env = Env::new();
        let args = ["run", "--sandbox", "--net", "none", "--run-id", "boxed", "--", "sh", "-c", GUARD_CALLS];
        Out::from(runws_as(&env, who, &args).output_retrying()).ok().stderr_has("unchanged caf\\xe9.boxed");
        let mut stamped = latin1();
        stamped.push(".boxed");
        let out = env.run_dir("boxed").join("outputs").join(&stamped);
        assert_eq!(std::fs::read(out).unwrap(), b"b\xff", "as {who:?}");
        assert_eq!(env.manifest("boxed")["outputs"][0]["name"], serde_json::json!({ "hex": "636166e9" }));
    }
}

/// Every line `reap` prints is one line of its own: a claimed path whose
/// name holds a newline is shown escaped and cannot forge a step.
#[test]
fn reap_shows_a_claimed_name_with_a_newline_escaped() {
    let env = Env::new();
    let script =
        "d=\"$RUNWS_DIR/work/$(printf 'x\\nremoved path /etc')\"; mkdir -p \"$d\"; runws claim path \"$d\"";
    env.sh("nl", script).ok();
    let out = env.run(&["reap"]);
    out.ok().stdout_has("x\\nremoved path /etc");
    for line in out.stdout.lines() {
        assert!(!line.starts_with("removed path"), "a forged line:\n{}", out.stdout);
    }
    assert!(!env.run_dir("nl").join("work").join("x\nremoved path /etc").exists());
}

/// A secret found in a file whose name holds a newline is reported on one
/// line, the name escaped, by `seal` and by `restore` from quarantine; a
/// name that is not UTF-8 is sealed and restored byte for byte.
#[test]
fn seal_and_restore_show_names_escaped_and_keep_their_bytes() {
    let env = Env::new();
    // The token is put together by the command, so its command line holds none.
    let rest: String = "R4nd0mT0k3nV4lu3".repeat(3).chars().take(36).collect();
    let script = format!(
        "printf 'token: %s%s\\n' ghp_ {rest} > \"$(printf 'a\\nrunws: secret found: forged')\"; printf 'b\\377' > \"$(printf 'caf\\351')\""
    );
    let out = Out::from(
        env.cmd(&["run", "--run-id", "s", "--job", "j", "--seal", "--", "sh", "-c", &script])
            .output()
            .unwrap(),
    );
    out.code(80).stderr_has("work/a\\nrunws: secret found: forged:1:github-token");
    let found: Vec<&str> = out.stderr.lines().filter(|l| l.contains("secret found")).collect();
    assert_eq!(found.len(), 1, "{}", out.stderr);
    let q = env.root.join("archive/j/quarantine/s.tar.zst");
    let to = env.path("back");
    let out = Out::from(env.cmd(&["restore"]).arg(&q).arg("--to").arg(&to).output().unwrap());
    out.ok().stderr_has("work/a\\nrunws: secret found: forged:1:github-token");
    let found: Vec<&str> = out.stderr.lines().filter(|l| l.contains("secret found")).collect();
    assert_eq!(found.len(), 1, "{}", out.stderr);
    assert_eq!(std::fs::read(to.join("work").join(latin1())).unwrap(), b"b\xff");
}

/// An error naming a file whose name holds a newline is one line.
#[test]
fn an_error_naming_a_file_with_a_newline_is_one_line() {
    let env = Env::new();
    let out = Out::from(env.cmd(&["run", "--input", "x\nrunws: forged", "--", "true"]).output().unwrap());
    out.code(125).stderr_has("x\\nrunws: forged");
    assert_eq!(out.stderr.lines().count(), 1, "{}", out.stderr);
}

/// A name in `{"hex": ...}` form is held to the same checks as any other:
/// one whose bytes are `..` or hold a `/` makes the manifest unreadable.
#[test]
fn a_hex_name_a_run_wrote_is_checked_like_any_name() {
    let env = Env::new();
    env.sh("h", "printf x | runws put o").ok();
    let path = env.run_dir("h").join("manifest.json");
    let clean = std::fs::read_to_string(&path).unwrap();
    for (name, file) in [("2e2e", "2e2e2e68"), ("612f62", "612f622e68")] {
        let mut m: serde_json::Value = serde_json::from_str(&clean).unwrap();
        m["outputs"][0]["name"] = serde_json::json!({ "hex": name });
        m["outputs"][0]["file"] = serde_json::json!({ "hex": file });
        std::fs::write(&path, serde_json::to_vec(&m).unwrap()).unwrap();
        env.run(&["show", "h"]).code(125).stderr_has("field `outputs[0].name`");
    }
}
