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

/// A command that removes its whole run directory: runws cannot record the
/// end anywhere, says so in one line and exits, instead of retrying a temp
/// file in a directory that is gone, forever.
#[test]
fn a_command_that_removes_its_run_directory_does_not_make_runws_spin() {
    let env = Env::new();
    let mut child = env
        .cmd(&["run", "--run-id", "gone", "--", "sh", "-c", "rm -rf \"$RUNWS_DIR\"; exit 3"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("runws was still running 30 s after its command removed the run directory");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let out = Out::from(child.wait_with_output().unwrap());
    out.code(125).one_line_error().stderr_has("cannot record the end of run `gone`");
}
