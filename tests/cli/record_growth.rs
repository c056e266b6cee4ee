//! A command cannot grow its run's record through the guard without bound:
//! past 64 MiB no reader accepts a manifest, and the run's end would be
//! unreadable. Claims, the one guard entry whose size the command chose,
//! are bounded in size and number.

use crate::harness::*;
use crate::sandbox::{Who, skip};

/// From inside a sandbox, a claim of a 60 KiB path (which fits the socket's
/// request line) is refused, and the record does not grow.
#[test]
fn a_sandboxed_claim_longer_than_a_path_is_refused() {
    if skip(Who::Me, "a_sandboxed_claim_longer_than_a_path_is_refused") {
        return;
    }
    let env = Env::new();
    let script = "p=/$(head -c 60000 /dev/zero | tr '\\0' a); \
                  runws claim path \"$p\" 2>\"$RUNWS_DIR/work/err\"; echo $? > \"$RUNWS_DIR/work/code\"; \
                  runws claim path /short";
    env.run(&["run", "--sandbox", "--run-id", "c", "--", "sh", "-c", script]).ok();
    let work = env.run_dir("c").join("work");
    let code = std::fs::read_to_string(work.join("code")).unwrap();
    let err = std::fs::read_to_string(work.join("err")).unwrap();
    assert_eq!(code.trim(), "125", "the long claim was accepted: {err}");
    assert!(err.contains("4096 bytes") && err.lines().count() == 1, "{err}");
    let size = std::fs::metadata(env.run_dir("c").join("manifest.json")).unwrap().len();
    assert!(size < 16 << 10, "the record grew to {size} bytes");
    let m = env.manifest("c");
    let claims: Vec<&str> =
        m["claims"].as_array().unwrap().iter().map(|c| c["value"].as_str().unwrap()).collect();
    assert!(claims.contains(&"/short"), "{claims:?}");
}

/// A run that holds the most claims a run may hold (written into its own
/// manifest, as a command without a sandbox can) gets the next one refused;
/// a claim it already holds is still accepted.
#[test]
fn a_run_cannot_hold_more_than_the_most_claims() {
    let env = Env::new();
    let script = r#"python3 - "$RUNWS_DIR/manifest.json" <<'EOF' || exit 9
import json, sys
p = sys.argv[1]
m = json.load(open(p))
for i in range(1000):
    m.setdefault("claims", []).append({"kind": "path", "value": "/c%d" % i, "repo": None, "start_time": None,
                        "claimed_at": m["started_at"], "made_by_runws": False})
json.dump(m, open(p + ".new", "w"))
EOF
mv "$RUNWS_DIR/manifest.json.new" "$RUNWS_DIR/manifest.json"
runws claim path /c7 || exit 7
runws claim path /one-more 2>"$RUNWS_DIR/work/err"; echo $? > "$RUNWS_DIR/work/code""#;
    env.run(&["run", "--run-id", "c", "--", "sh", "-c", script]).ok();
    let work = env.run_dir("c").join("work");
    let code = std::fs::read_to_string(work.join("code")).unwrap();
    let err = std::fs::read_to_string(work.join("err")).unwrap();
    assert_eq!(code.trim(), "125", "a claim past the most was accepted: {err}");
    assert!(err.contains("1000 claims"), "{err}");
}
