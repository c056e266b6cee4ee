//! The run's final record: written whatever the command did to the disk.

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::Command;

use crate::harness::*;
use crate::sandbox::{Retry, Who, everyone, runws_as};

/// A small tmpfs mounted on ROOT for the life of the value (as root only).
pub struct SmallDisk<'a> {
    at: &'a Path,
}

impl<'a> SmallDisk<'a> {
    /// Mounts a tmpfs of `size` on `at`, writable by everyone; `None` (after
    /// saying why) when the tests do not run as root or it cannot be mounted.
    pub fn mount(at: &'a Path, size: &str, test: &str) -> Option<SmallDisk<'a>> {
        if !is_root() {
            eprintln!("skipped {test}: mounting a small tmpfs needs root");
            return None;
        }
        std::fs::create_dir_all(at).unwrap();
        let mounted = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size},mode=0777"), "tmpfs"])
            .arg(at)
            .status()
            .is_ok_and(|s| s.success());
        if !mounted {
            eprintln!("skipped {test}: cannot mount a small tmpfs here");
            return None;
        }
        Some(SmallDisk { at })
    }

    /// Fills what is left of the disk with one file.
    pub fn fill(&self) {
        let _ = Command::new("sh")
            .arg("-c")
            .arg("head -c 100000000 /dev/zero > \"$1\"/filler 2>/dev/null; true")
            .arg("sh")
            .arg(self.at)
            .status();
    }
}

impl Drop for SmallDisk<'_> {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(self.at).status();
    }
}

/// `show --json` of run `id`, as `who`.
fn show_json(env: &Env, who: Who, id: &str) -> serde_json::Value {
    let out = Out::from(runws_as(env, who, &["show", id, "--json"]).output_retrying());
    out.ok();
    serde_json::from_str(&out.stdout).expect("show --json prints JSON")
}

/// A command that fills the disk, then exits 0 or 3: runws exits with the
/// command's status and the record says how it ended.
#[test]
fn a_command_that_fills_the_disk_still_gets_its_end_recorded() {
    for who in everyone() {
        for code in [0, 3] {
            let env = Env::new();
            if who == Who::Nobody {
                std::fs::set_permissions(env.tmp.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
            }
            let Some(_disk) = SmallDisk::mount(&env.root, "4m", "fills_the_disk") else { return };
            let id = format!("full-{code}");
            let script = format!(
                "printf kept | runws put early || exit 9
                 head -c 100000000 /dev/zero > \"$RUNWS_DIR/work/fill\" 2>/dev/null
                 head -c 100000000 /dev/zero > \"$RUNWS_DIR/logs/more\" 2>/dev/null
                 exit {code}"
            );
            let out = Out::from(
                runws_as(&env, who, &["run", "--run-id", &id, "--capture", "--", "sh", "-c", &script])
                    .output_retrying(),
            );
            out.code(code);
            let m = show_json(&env, who, &id);
            let want = if code == 0 { "succeeded" } else { "failed" };
            assert_eq!(m["status"], want, "as {who:?}: {m}");
            assert_eq!(m["exit_code"], code, "as {who:?}: {m}");
            assert_eq!(m["outputs"][0]["name"], "early", "as {who:?}: {m}");
            assert!(m["finished_at"].is_string(), "as {who:?}: {m}");
        }
    }
}

/// A disk that is full before the run: refused with one line, and no run
/// that could not be recorded is left behind.
#[test]
fn a_run_on_a_full_disk_is_refused_before_it_starts() {
    for who in everyone() {
        let env = Env::new();
        if who == Who::Nobody {
            std::fs::set_permissions(env.tmp.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
        }
        let Some(disk) = SmallDisk::mount(&env.root, "1m", "full_at_start") else { return };
        std::fs::create_dir_all(env.root.join("runs")).unwrap();
        std::fs::set_permissions(env.root.join("runs"), std::fs::Permissions::from_mode(0o777)).unwrap();
        disk.fill();
        let marker = env.path("ran");
        let script = format!("touch {}", marker.display());
        let out = Out::from(
            runws_as(&env, who, &["run", "--run-id", "never", "--", "sh", "-c", &script]).output_retrying(),
        );
        out.code(125).one_line_error().stderr_has("No space left on device");
        assert!(!marker.exists(), "as {who:?}: the command ran");
        assert!(!env.run_dir("never").exists(), "as {who:?}: a run that could not be recorded was left");
    }
}

/// A command that writes thousands of entries into its own manifest, then
/// fills the disk: the end is still recorded, with the entries that did not
/// fit the reserved space cut and the cut said under `truncated`.
#[test]
fn a_record_grown_past_its_reservation_is_cut_to_fit_a_full_disk() {
    let env = Env::new();
    let Some(_disk) = SmallDisk::mount(&env.root, "4m", "cut_to_fit") else { return };
    let script = r#"python3 - <<'EOF'
import json, os
p = os.path.join(os.environ["RUNWS_DIR"], "manifest.json")
m = json.load(open(p))
rid = m["run_id"]
m["outputs"] = [{"name": "o%05d" % i, "file": "o%05d.%s" % (i, rid), "bytes": 1,
                 "sha256": "0" * 64, "written_at": m["started_at"]} for i in range(3000)]
open(p + ".new", "w").write(json.dumps(m))
os.rename(p + ".new", p)
EOF
head -c 100000000 /dev/zero > "$RUNWS_DIR/work/fill" 2>/dev/null
exit 0"#;
    env.sh("cut", script).ok();
    let m = env.manifest("cut");
    assert_eq!(m["status"], "succeeded", "{m}");
    let kept = m["outputs"].as_array().unwrap().len() as u64;
    let cut = m["truncated"]["outputs"].as_u64().expect("the cut is recorded");
    assert!(cut > 0 && kept + cut == 3000, "kept {kept}, cut {cut}");
    assert_eq!(m["outputs"][0]["name"], "o00000", "the first entries are kept");
}

/// runws killed at every moment of a run that fills the disk: every record
/// left is readable (running, or the end), never torn or lost, and a run
/// runws reported as ended is recorded as ended.
#[test]
fn runws_killed_at_any_moment_on_a_full_disk_leaves_a_readable_record() {
    let env = Env::new();
    let Some(_disk) = SmallDisk::mount(&env.root, "4m", "killed_on_a_full_disk") else { return };
    let script = "head -c 100000000 /dev/zero > \"$RUNWS_DIR/work/fill\" 2>/dev/null; exit 0";
    for i in 0..24u64 {
        // Room for this run, once the command left behind by a
        // killed runws has stopped writing.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            for run in env.run_ids() {
                let _ = std::fs::remove_file(env.run_dir(&run).join("work/fill"));
            }
            if free_bytes(&env.root) > 512 << 10 {
                break;
            }
            assert!(std::time::Instant::now() < deadline, "iteration {i}: the disk stayed full");
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let id = format!("k{i}");
        let mut child = env.cmd(&["run", "--run-id", &id, "--", "sh", "-c", script]).spawn().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(3 * i));
        let _ = child.kill();
        let status = child.wait().unwrap();
        let out = env.run(&["show", &id, "--json"]);
        if status.code() == Some(125) {
            // The command a killed runws left behind filled the disk again
            // before this run started: refused, and nothing left, or (once
            // its record had room) recorded as failed.
            if env.run_dir(&id).exists() {
                let m: serde_json::Value = serde_json::from_str(&out.stdout).unwrap_or_default();
                assert_eq!(m["status"], "failed", "iteration {i}: a refused run was left: {m}");
                assert!(m["error"].is_string(), "iteration {i}: {m}");
            }
        } else if status.signal().is_none() {
            // It ended before the kill: with the command's status.
            assert!(status.success(), "iteration {i}: runws exited {status:?}\n{}", out.stdout);
        }
        if status.code() == Some(125) {
            // Checked above.
        } else if out.code == Some(0) {
            let m: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
            let s = m["status"].as_str().unwrap();
            assert!(s == "running" || s == "succeeded", "iteration {i}: {m}");
            if status.success() {
                assert_eq!(s, "succeeded", "iteration {i}: runws exited 0 but the record says {m}");
            }
        } else {
            assert!(!status.success(), "iteration {i}: runws exited 0 with no record: {}", out.stderr);
        }
    }
}

/// Free bytes on the file system holding `p`.
fn free_bytes(p: &Path) -> u64 {
    let st = nix::sys::statvfs::statvfs(p).unwrap();
    st.blocks_available() * st.fragment_size()
}

/// A manifest as runws wrote it before its records were typed, with every
/// record present, reads, and shows as it was written.
#[test]
fn a_manifest_with_every_record_shows_as_written() {
    let env = Env::new();
    let fixture =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/manifest_every_record.json");
    let bytes = std::fs::read(&fixture).unwrap();
    let dir = env.run_dir("r-full");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("manifest.json"), &bytes).unwrap();
    let out = env.run(&["show", "r-full", "--json"]);
    let shown: serde_json::Value = serde_json::from_str(&out.ok().stdout).unwrap();
    assert_eq!(shown, serde_json::from_slice::<serde_json::Value>(&bytes).unwrap());
    env.run(&["ls"]).ok().stdout_has("r-full").stdout_has("succeeded");
    env.run(&["show", "r-full"]).ok().stdout_has("truncated: outputs (");
}
