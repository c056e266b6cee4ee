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
