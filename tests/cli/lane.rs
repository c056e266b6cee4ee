//! Promotion lanes through the real binary: the whole life of a lane, and
//! every step out of order or by the wrong person refused.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use crate::harness::*;

const LANE: &str = "lane-PROJ-42-abcd";

/// A token the scanner must find, built at run time.
fn github_token() -> String {
    format!("{}{}", "ghp_", "L4n3T0k3nV4lu3Xy".repeat(3).chars().take(36).collect::<String>())
}

pub(crate) fn claim(env: &Env) -> String {
    let out = env.run(&[
        "lane",
        "claim",
        "PROJ-42",
        "--claimant",
        "Ann",
        "--operator",
        "Bob",
        "--reviewer",
        "Cy",
        "--resetter",
        "Di",
        "--problem",
        "greet the world",
        "--done-when",
        "work/hello exists",
    ]);
    out.ok();
    out.stdout.trim().to_string()
}

fn lane_dir(env: &Env, lane: &str) -> PathBuf {
    env.root.join("lanes").join(lane)
}

fn card(env: &Env, lane: &str) -> serde_json::Value {
    let out = env.run(&["lane", "show", lane, "--json"]);
    out.ok();
    serde_json::from_str(&out.stdout).expect("card json")
}

fn write_exec(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// An eval that passes only when the work is there, and a real prompt.
pub(crate) fn edit_replay(env: &Env, lane: &str) {
    let replay = lane_dir(env, lane).join("replay");
    write_exec(&replay.join("eval.sh"), "#!/bin/sh\ntest \"$(cat hello)\" = hi\n");
    std::fs::write(replay.join("prompt.md"), "Write `hi` into work/hello and commit it.\n").unwrap();
}

/// `lane run LANE -- sh -c SCRIPT`
pub(crate) fn work(env: &Env, lane: &str, script: &str) -> Out {
    env.run(&["lane", "run", lane, "--", "sh", "-c", script])
}

pub(crate) fn seal(env: &Env, lane: &str) -> Out {
    env.run(&["lane", "seal", lane])
}

fn kit_path(env: &Env, stem: &str) -> PathBuf {
    env.root.join("archive/lanes").join(format!("{stem}.tar.zst"))
}

pub(crate) fn review(env: &Env, kit: &Path) -> Out {
    env.run(&["lane", "review", kit.to_str().unwrap()])
}

fn git(dir: &Path, args: &[&str]) -> String {
    let out = std::process::Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(["-c", "user.name=t", "-c", "user.email=t@t", "-c", "init.defaultBranch=main"])
        .args(args)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .output()
        .unwrap();
    assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Whether `pid` ended (or is a zombie) within 5s.
fn wait_gone(pid: i32) -> bool {
    wait_until(std::time::Duration::from_secs(5), || !alive(pid))
}

/// The work: `hi` in hello, committed; a `.env` left behind; a process
/// left running in the command's group, its pid written to `pidfile`.
fn do_the_work(env: &Env, lane: &str, pidfile: &Path) {
    let script = format!(
        "echo hi > hello && echo 'TOKEN=x' > .env && git add hello && git commit -qm hello \
         && (sleep 300 >/dev/null 2>&1 & echo $! > {})",
        pidfile.display()
    );
    work(env, lane, &script).ok();
}

#[test]
fn a_lane_goes_from_claim_to_reset() {
    let env = Env::new();
    let lane = claim(&env);
    assert_eq!(lane, LANE);
    let dir = lane_dir(&env, &lane);
    for f in ["TICKET", "card.json", "card.md", "replay/prompt.md", "replay/eval.sh", "work/.git", "logs"] {
        assert!(dir.join(f).exists(), "{f} missing after claim");
    }
    assert!(std::fs::metadata(dir.join("replay/eval.sh")).unwrap().permissions().mode() & 0o111 != 0);
    assert!(std::fs::read_to_string(dir.join("TICKET")).unwrap().starts_with("PROJ-42\n"));
    let c = card(&env, &lane);
    assert_eq!((c["state"].as_str(), c["reviewer"].as_str()), (Some("claimed"), Some("Cy")));
    assert_eq!(c["done_when"], "work/hello exists");

    let pidfile = env.path("bg.pid");
    do_the_work(&env, &lane, &pidfile);
    let bg: i32 = std::fs::read_to_string(&pidfile).unwrap().trim().parse().unwrap();
    assert!(alive(bg));
    let c = card(&env, &lane);
    let run_id = c["replay"]["runs"][0]["run_id"].as_str().unwrap().to_string();
    assert_eq!(env.manifest(&run_id)["cwd"], dir.join("work").display().to_string());
    assert_eq!(env.manifest(&run_id)["job"], LANE);
    assert!(c["replay"]["runs"][0]["pgid"].as_i64().is_some());

    edit_replay(&env, &lane);
    let out = seal(&env, &lane);
    out.ok().stderr_has("removed work/.env");
    let kit = PathBuf::from(out.stdout.trim());
    assert_eq!(kit, kit_path(&env, LANE));
    assert!(!dir.join("work/.env").exists());
    for side in ["tar.zst.sha256", "receipt.json"] {
        assert!(env.root.join(format!("archive/lanes/{LANE}.{side}")).exists(), "{side} missing");
    }
    let c = card(&env, &lane);
    assert_eq!(c["state"], "sealed");
    assert_eq!(c["checker"]["ok"], true);
    assert_eq!(c["checker"]["scan"], "clean");

    review(&env, &kit).ok().stdout_has("hello | 1 +").stdout_has("review pass");
    let c = card(&env, &lane);
    assert_eq!(c["review"]["result"], "pass");
    assert_eq!(c["review"]["kit_sha256"], c["kit"]["sha256"]);
    let eval_run = c["review"]["run_id"].as_str().unwrap().to_string();
    assert_eq!(env.manifest(&eval_run)["status"], "succeeded");

    env.run(&["lane", "stamp", &lane, "approve", "--reviewer", "Cy"]).ok();

    let repo = env.path("repo");
    std::fs::create_dir_all(&repo).unwrap();
    git(&repo, &["init", "-q"]);
    std::fs::write(repo.join("README"), "mine\n").unwrap();
    git(&repo, &["add", "README"]);
    git(&repo, &["commit", "-qm", "init"]);
    let out = env.run(&["lane", "promote", &lane, "--repo", repo.to_str().unwrap()]);
    out.ok();
    let wt = PathBuf::from(out.stdout.trim());
    assert_eq!(std::fs::read_to_string(wt.join("hello")).unwrap(), "hi\n");
    assert!(wt.join("README").exists());
    assert_eq!(git(&wt, &["status", "--porcelain"]), "?? hello\n", "the promoted files must be uncommitted");
    assert_eq!(git(&wt, &["rev-parse", "--abbrev-ref", "HEAD"]).trim(), "lane/PROJ-42");
    assert_eq!(
        git(&repo, &["rev-parse", "--abbrev-ref", "HEAD"]).trim(),
        "main",
        "the user's checkout moved"
    );
    assert_eq!(git(&repo, &["status", "--porcelain"]), "", "the user's checkout changed");
    env.run(&["lane", "promote", &lane, "--repo", repo.to_str().unwrap()]).code(90).one_line_error();

    env.run(&["lane", "reset", &lane, "--resetter", "Di"]).ok();
    assert!(wait_gone(bg), "the lane's background process survived the reset");
    assert!(!dir.exists(), "the lane directory survived the reset");
    assert!(kit.exists(), "the reset removed the kit");
    let c = card(&env, &lane);
    assert_eq!(c["state"], "reset");
    assert!(c["reset"]["at"].as_str().is_some());
    assert!(env.root.join(format!("archive/lanes/{LANE}.card.md")).exists());
    env.run(&["lane", "reset", &lane, "--resetter", "Di"]).code(125).one_line_error();
}

#[test]
fn each_step_out_of_order_or_by_the_wrong_person_is_refused() {
    let env = Env::new();
    let lane = claim(&env);
    let refused = |args: &[&str], needle: &str| {
        env.run(args).code(90).one_line_error().stderr_has("refused").stderr_has(needle);
    };
    refused(&["lane", "seal", &lane], "`seal` needs a `lane run` first");
    refused(&["lane", "stamp", &lane, "approve", "--reviewer", "Cy"], "`stamp` needs a review first");
    refused(&["lane", "promote", &lane, "--repo", "."], "`promote` needs an `approve` stamp");
    refused(&["lane", "reset", &lane, "--resetter", "Di"], "`reset` needs a stamp first");

    work(&env, &lane, "echo hi > hello").ok();
    let replay = lane_dir(&env, &lane).join("replay");
    write_exec(&replay.join("eval.sh"), "#!/bin/sh\necho not yet >&2\nexit 3\n");
    seal(&env, &lane).ok();
    refused(&["lane", "run", &lane, "--", "true"], "`run` is allowed only before the seal");
    refused(&["lane", "seal", &lane], "sealed already");
    refused(&["lane", "stamp", &lane, "scrap", "--reviewer", "Cy"], "`stamp` needs a review first");

    // A failing review cannot be approved.
    let kit1 = kit_path(&env, LANE);
    review(&env, &kit1).code(93).stdout_has("review fail");
    assert_eq!(card(&env, &lane)["review"]["eval_exit_code"], 3);
    env.run(&["lane", "stamp", &lane, "approve", "--reviewer", "Bob"])
        .code(91)
        .one_line_error()
        .stderr_has("names `Cy` as the reviewer");
    refused(&["lane", "stamp", &lane, "approve", "--reviewer", "Cy"], "review of its kit failed");
    refused(&["lane", "promote", &lane, "--repo", "."], "`promote` needs an `approve` stamp");

    // Returned: more work, a new kit, a passing review.
    env.run(&["lane", "stamp", &lane, "return", "--reviewer", "Cy"]).ok();
    refused(&["lane", "reset", &lane, "--resetter", "Di"], "returned for more work");
    edit_replay(&env, &lane);
    work(&env, &lane, "true").ok();
    seal(&env, &lane).ok();
    let kit2 = kit_path(&env, &format!("{LANE}.2"));
    assert_eq!(card(&env, &lane)["kit"]["path"], kit2.display().to_string());
    refused(&["lane", "review", kit1.to_str().unwrap()], "is not lane");
    review(&env, &kit2).ok();

    // The kit changed after the review: corrupt bytes, then a whole other
    // kit with a matching checksum file.
    let good = std::fs::read(&kit2).unwrap();
    let mut bad = good.clone();
    let last = bad.len() - 1;
    bad[last] ^= 1;
    std::fs::write(&kit2, &bad).unwrap();
    env.run(&["lane", "stamp", &lane, "approve", "--reviewer", "Cy"]).code(4).one_line_error();
    let sum2 = std::fs::read(kit2.with_extension("zst.sha256")).unwrap();
    std::fs::copy(&kit1, &kit2).unwrap();
    let sum1 = std::fs::read_to_string(kit1.with_extension("zst.sha256")).unwrap();
    let other_sum = sum1.replace(&format!("{LANE}.tar.zst"), &format!("{LANE}.2.tar.zst"));
    std::fs::write(kit2.with_extension("zst.sha256"), other_sum).unwrap();
    env.run(&["verify", kit2.to_str().unwrap()]).ok();
    refused(&["lane", "stamp", &lane, "approve", "--reviewer", "Cy"], "not the kit that was reviewed");
    std::fs::write(&kit2, &good).unwrap();
    std::fs::write(kit2.with_extension("zst.sha256"), sum2).unwrap();

    env.run(&["lane", "stamp", &lane, "approve", "--reviewer", " Cy "]).ok();
    refused(&["lane", "stamp", &lane, "scrap", "--reviewer", "Cy"], "stamped already");
    refused(&["lane", "reset", &lane, "--resetter", "Di"], "`reset` comes after `promote`");
    env.run(&["lane", "reset", &lane, "--resetter", "Cy"]).code(91).one_line_error().stderr_has("resetter");
    assert!(lane_dir(&env, &lane).exists());
}

#[test]
fn blank_names_bad_tickets_and_a_second_claim_are_refused() {
    let env = Env::new();
    let people = |op: &str| -> Vec<String> {
        ["--claimant", "Ann", "--operator", op, "--reviewer", "Cy", "--resetter", "Di"]
            .iter()
            .map(|s| s.to_string())
            .collect()
    };
    for (ticket, op, needle) in [
        ("T-1", "  ", "cannot be blank"),
        ("T-1", "", "cannot be blank"),
        ("T-1", "Bo\u{1b}[31m", "control characters"),
        ("../x", "Bob", "invalid name"),
        ("_x", "Bob", "invalid name"),
        ("a b", "Bob", "invalid name"),
    ] {
        let mut args = vec!["lane".to_string(), "claim".to_string(), ticket.to_string()];
        args.extend(people(op));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        env.run(&args).code(125).one_line_error().stderr_has(needle);
    }
    assert!(tree(&env.root.join("lanes")).is_empty(), "a refused claim left something");
    claim(&env);
    let out = env.run(&[
        "lane",
        "claim",
        "PROJ-42",
        "--claimant",
        "Al",
        "--operator",
        "Ben",
        "--reviewer",
        "Cid",
        "--resetter",
        "Dee",
    ]);
    out.code(90).one_line_error().stderr_has("exists already");
    env.run(&["lane", "show", "lane-nope-abcd"]).code(125).one_line_error().stderr_has("no lane");
    env.run(&["lane", "show", "../../etc"]).code(125).one_line_error();
}

#[test]
fn seal_checks_the_kit_and_removes_env_files() {
    let env = Env::new();
    let lane = claim(&env);
    let dir = lane_dir(&env, &lane);
    work(&env, &lane, "mkdir -p sub && echo A=1 > sub/.env.local && echo hi > hello").ok();
    std::fs::write(dir.join("replay/.env"), "B=2\n").unwrap();
    let check_fails = |needle: &str| {
        seal(&env, &lane).code(92).one_line_error().stderr_has(needle).stderr_has("nothing was sealed");
        assert!(!kit_path(&env, LANE).exists(), "a kit was sealed despite the failed check");
        assert_eq!(card(&env, &lane)["checker"]["ok"], false);
    };
    let eval = dir.join("replay/eval.sh");
    let eval_text = std::fs::read_to_string(&eval).unwrap();
    std::fs::remove_file(&eval).unwrap();
    check_fails("replay/eval.sh missing");
    std::fs::write(&eval, &eval_text).unwrap();
    std::fs::set_permissions(&eval, std::fs::Permissions::from_mode(0o644)).unwrap();
    check_fails("replay/eval.sh not executable");
    write_exec(&eval, &eval_text);
    std::fs::rename(dir.join("replay/prompt.md"), env.path("prompt.md")).unwrap();
    check_fails("replay/prompt.md missing");
    std::fs::rename(env.path("prompt.md"), dir.join("replay/prompt.md")).unwrap();
    std::fs::rename(dir.join("TICKET"), env.path("TICKET")).unwrap();
    check_fails("TICKET missing");
    std::fs::rename(env.path("TICKET"), dir.join("TICKET")).unwrap();
    std::fs::write(dir.join("work/sub/server.pem"), "not really a key\n").unwrap();
    check_fails("work/sub/server.pem");
    std::fs::remove_file(dir.join("work/sub/server.pem")).unwrap();

    seal(&env, &lane).ok().stderr_has("unedited template");
    assert!(!dir.join("work/sub/.env.local").exists() && !dir.join("replay/.env").exists());
    let c = card(&env, &lane);
    let removed = c["checker"]["removed"].to_string();
    assert!(removed.contains("replay/.env") && removed.contains("work/sub/.env.local"), "{removed}");
    let items = c["checker"]["items"].to_string();
    assert!(items.contains("checksum"), "{items}");
    let listed =
        std::process::Command::new("tar").args(["--zstd", "-tf"]).arg(kit_path(&env, LANE)).output().unwrap();
    let listed = String::from_utf8_lossy(&listed.stdout);
    for want in ["TICKET", "card.json", "card.md", "replay/eval.sh", "work/hello", "work/.git/HEAD"] {
        assert!(listed.lines().any(|l| l == want), "{want} not in the kit:\n{listed}");
    }
    assert!(!listed.contains(".env"), "an .env in the kit:\n{listed}");
}

#[test]
fn a_kit_holding_a_token_goes_to_quarantine_and_is_never_reviewed() {
    let env = Env::new();
    let lane = claim(&env);
    let token = github_token();
    work(&env, &lane, &format!("echo 'token: {token}' > config.yml")).ok();
    let out = seal(&env, &lane);
    out.code(80).stderr_has("quarantine").stderr_has("work/config.yml:1:github-token");
    assert!(!out.stderr.contains(&token), "the secret was printed");
    assert!(!kit_path(&env, LANE).exists(), "a secret-holding kit sits in the ordinary location");
    let q = env.root.join(format!("archive/lanes/quarantine/{LANE}.tar.zst"));
    assert!(q.exists());
    let c = card(&env, &lane);
    assert_eq!((c["state"].as_str(), c["checker"]["scan"].as_str()), (Some("working"), Some("quarantine")));
    env.run(&["lane", "review", q.to_str().unwrap()]).code(90).one_line_error().stderr_has("quarantine kit");

    // Copied out of quarantine, it is still refused: the restore is rescanned.
    let copies = env.path("copies");
    std::fs::create_dir_all(&copies).unwrap();
    for ext in ["tar.zst", "tar.zst.sha256"] {
        std::fs::copy(q.with_file_name(format!("{LANE}.{ext}")), copies.join(format!("{LANE}.{ext}")))
            .unwrap();
    }
    review(&env, &copies.join(format!("{LANE}.tar.zst"))).code(82).one_line_error();

    // Deleted but committed: the history still holds it.
    work(
        &env,
        &lane,
        "git add config.yml && git commit -qm oops && git rm -q config.yml && git commit -qm fix",
    )
    .ok();
    let out = seal(&env, &lane);
    out.code(80).stderr_has("work/.git/");
    assert!(!out.stderr.contains(&token));
    assert!(!kit_path(&env, LANE).exists());
}

#[test]
fn a_scrapped_lane_is_reset_its_background_process_ended_and_its_kit_kept() {
    let env = Env::new();
    let lane = claim(&env);
    let pidfile = env.path("bg.pid");
    do_the_work(&env, &lane, &pidfile);
    let bg: i32 = std::fs::read_to_string(&pidfile).unwrap().trim().parse().unwrap();
    seal(&env, &lane).ok();
    review(&env, &kit_path(&env, LANE)).ok();
    env.run(&["lane", "stamp", &lane, "scrap", "--reviewer", "Cy"]).ok();
    env.run(&["lane", "promote", &lane, "--repo", "."])
        .code(90)
        .stderr_has("scrapped lane is never promoted");
    assert!(alive(bg), "the background process ended before the reset");
    env.run(&["lane", "reset", &lane, "--resetter", "Ann"]).code(91);
    assert!(alive(bg));
    env.run(&["lane", "reset", &lane, "--resetter", "Di"]).ok().stderr_has("ended with SIG");
    assert!(wait_gone(bg), "the reset left the lane's process running");
    assert!(!lane_dir(&env, &lane).exists());
    assert!(kit_path(&env, LANE).exists());
    assert_eq!(card(&env, &lane)["stamp"]["verdict"], "scrap");
}

#[test]
fn concurrent_lane_runs_lose_no_card_update() {
    let env = Env::new();
    let lane = claim(&env);
    let children: Vec<_> = (0..6)
        .map(|i| {
            env.cmd(&["lane", "run", &lane, "--", "sh", "-c", &format!("echo {i} > f{i}")])
                .stdout(std::process::Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    for mut c in children {
        assert!(c.wait().unwrap().success());
    }
    let c = card(&env, &lane);
    let runs = c["replay"]["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 6, "{runs:?}");
    assert!(runs.iter().all(|r| r["exit_code"] == 0 && r["finished_at"].is_string()), "{runs:?}");
    for i in 0..6 {
        assert!(lane_dir(&env, &lane).join(format!("work/f{i}")).exists());
    }
}

/// The review runs the kit's eval itself, through the same run pipeline as
/// `runws run` (no second runws in between), with stdin from `/dev/null`;
/// `lane run` does too, with the lane's job and `work/`.
#[test]
fn lane_run_and_review_run_their_command_in_the_lane_process_itself() {
    let env = Env::new();
    let lane = claim(&env);
    let out = work(
        &env,
        &lane,
        "echo \"parent: $(tr '\\0' ' ' < /proc/$PPID/cmdline)\"; echo hi > hello && git add hello && git commit -qm hello",
    );
    out.ok().stdout_has(" lane run ").stdout_lacks(" run --run-id");
    let replay = lane_dir(&env, &lane).join("replay");
    write_exec(
        &replay.join("eval.sh"),
        "#!/bin/sh\necho \"parent: $(tr '\\0' ' ' < /proc/$PPID/cmdline)\"\n\
         echo \"stdin: $(readlink /proc/self/fd/0)\"\ntest \"$(cat hello)\" = hi\n",
    );
    let kit = PathBuf::from(seal(&env, &lane).ok().stdout.trim());
    review(&env, &kit)
        .ok()
        .stdout_has("review pass")
        .stdout_has(" lane review ")
        .stdout_lacks(" run --run-id")
        .stdout_has("stdin: /dev/null");
}

/// A kit whose eval runs `eval` (after touching `marker`), sealed.
fn kit_with_eval(env: &Env, lane: &str, eval: &str, marker: &Path) -> PathBuf {
    work(env, lane, "echo hi > hello && git add hello && git commit -qm hello").ok();
    let replay = lane_dir(env, lane).join("replay");
    write_exec(&replay.join("eval.sh"), &format!("#!/bin/sh\ntouch {}\n{eval}\n", marker.display()));
    PathBuf::from(seal(env, lane).ok().stdout.trim())
}

/// A review interrupted while its eval runs (^C, a `kill` of the review)
/// ends by that signal, as it would without the eval, and records nothing:
/// an eval stopped half-way says nothing of the kit.
#[test]
fn an_interrupted_review_ends_by_the_signal_and_records_nothing() {
    use std::os::unix::process::ExitStatusExt;
    let env = Env::new();
    let lane = claim(&env);
    let marker = env.path("eval-started");
    let kit = kit_with_eval(&env, &lane, "sleep 30", &marker);
    let mut review = env
        .cmd(&["lane", "review", kit.to_str().unwrap()])
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    assert!(wait_until(std::time::Duration::from_secs(30), || marker.exists()), "the eval never started");
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(review.id() as i32), nix::sys::signal::Signal::SIGTERM)
        .unwrap();
    let mut status = None;
    assert!(
        wait_until(std::time::Duration::from_secs(10), || {
            status = review.try_wait().unwrap();
            status.is_some()
        }),
        "the review went on"
    );
    assert_eq!(status.unwrap().signal(), Some(nix::libc::SIGTERM), "{status:?}");
    let c = card(&env, &lane);
    assert_eq!(c["state"], "sealed");
    assert!(c["review"].is_null(), "an interrupted review was recorded: {}", c["review"]);
}

/// Once its eval has run, a review can be stopped like any process, even
/// while it waits for the lane's lock, which the kit's eval left held by a
/// process of its own.
#[test]
fn a_review_waiting_for_a_lock_the_eval_left_held_can_be_stopped() {
    use std::os::unix::process::ExitStatusExt;
    let env = Env::new();
    let lane = claim(&env);
    let marker = env.path("eval-done");
    let holder = env.path("holder.pid");
    let eval = format!(
        "setsid sh -c 'echo $$ > {}; exec flock {} sleep 60' </dev/null >/dev/null 2>&1 &\n\
         while [ ! -s {} ]; do sleep 0.01; done; sleep 0.2",
        holder.display(),
        lane_dir(&env, &lane).display(),
        holder.display()
    );
    let kit = kit_with_eval(&env, &lane, &eval, &marker);
    let mut review = env
        .cmd(&["lane", "review", kit.to_str().unwrap()])
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    assert!(
        wait_until(std::time::Duration::from_secs(30), || holder.exists() && marker.exists()),
        "the eval never ran"
    );
    // The eval ends a moment later; the review then waits for the lane's lock.
    std::thread::sleep(std::time::Duration::from_millis(500));
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(review.id() as i32), nix::sys::signal::Signal::SIGTERM)
        .unwrap();
    let mut status = None;
    let stopped = wait_until(std::time::Duration::from_secs(10), || {
        status = review.try_wait().unwrap();
        status.is_some()
    });
    let pid: i32 = std::fs::read_to_string(&holder).unwrap().trim().parse().unwrap();
    let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL);
    assert!(stopped, "SIGTERM did not stop the review");
    assert_eq!(status.unwrap().signal(), Some(nix::libc::SIGTERM), "{status:?}");
    let _ = review.wait();
}
