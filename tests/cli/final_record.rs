//! A command without a sandbox owns its run directory, and with it the name
//! of the final record's temp file (`.manifest.json.final`): whatever it
//! puts under that name, or however it takes the name away, runws still
//! records the run's real end, writes through nothing the command planted,
//! and exits with the command's status.

use crate::harness::*;
use crate::sandbox::{Retry, everyone, runws_as};

const FINAL: &str = "\"$RUNWS_DIR/.manifest.json.final\"";

#[test]
fn whatever_the_command_puts_in_place_of_the_final_records_temp_file_the_end_is_recorded() {
    for who in everyone() {
        let env = Env::new();
        let outside = env.path("outside");
        std::fs::write(&outside, "the user's file\n").unwrap();
        if who == crate::sandbox::Who::Nobody {
            std::os::unix::fs::chown(&outside, Some(65534), Some(65534)).unwrap();
        }
        let forge = format!(
            "sed 's/\"status\": *\"running\"/\"status\": \"succeeded\"/; s/\"exit_code\": *null/\"exit_code\": 0/' \"$RUNWS_DIR/manifest.json\" > {FINAL}.new && mv {FINAL}.new {FINAL}"
        );
        let attacks = [
            ("removed", format!("rm -f {FINAL}")),
            ("a directory", format!("rm -f {FINAL} && mkdir {FINAL} && touch {FINAL}/x")),
            ("a symlink out", format!("rm -f {FINAL} && ln -s {} {FINAL}", outside.display())),
            ("a fifo", format!("rm -f {FINAL} && mkfifo {FINAL}")),
            ("unreadable", format!("chmod 000 {FINAL}")),
            ("a forged end", forge.clone()),
            // A guard call settles the forged end over manifest.json first.
            ("a forged end, then a put", format!("{forge} && {{ echo x | runws put o; true; }}")),
        ];
        for (what, attack) in attacks {
            let id = format!("r{}", what.len());
            let script = format!("{attack} || echo ATTACK-FAILED; exit 3");
            let out = Out::from(
                runws_as(&env, who, &["run", "--run-id", &id, "--", "sh", "-c", &script]).output_retrying(),
            );
            assert!(!out.stdout.contains("ATTACK-FAILED"), "as {who:?}, {what}: {out:?}");
            out.code(3);
            let m = Out::from(runws_as(&env, who, &["show", &id, "--json"]).output_retrying());
            m.ok();
            let m: serde_json::Value = serde_json::from_str(&m.stdout).unwrap();
            assert_eq!(m["status"], "failed", "as {who:?}, {what}: {m}");
            assert_eq!(m["exit_code"], 3, "as {who:?}, {what}: {m}");
            let on_disk = std::fs::symlink_metadata(env.run_dir(&id).join("manifest.json")).unwrap();
            assert!(on_disk.is_file(), "as {who:?}, {what}: manifest.json is not a regular file");
            assert_eq!(env.manifest(&id)["status"], "failed", "as {who:?}, {what}");
            assert_eq!(std::fs::read_to_string(&outside).unwrap(), "the user's file\n", "as {who:?}, {what}");
        }
    }
}
