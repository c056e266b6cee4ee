//! The files under `examples/` run as written, with local stand-ins for
//! their schedulers: the command lines are taken from the crontab, the unit
//! file and the CI files themselves and run with the built binary. Only the
//! paths of an installation are swapped for this checkout's
//! (`/usr/local/bin/runws`, `/opt/runws/`, the state directory, the
//! healthchecks server's address).

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::harness::{BIN, Env, Out};
use crate::monitoring::{Answer, Server};
use crate::sandbox::{Who, skip};

fn checkout() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn example(name: &str) -> String {
    std::fs::read_to_string(checkout().join("examples").join(name)).unwrap()
}

/// `text` with an installation's paths swapped for this checkout's.
fn localize(text: &str) -> String {
    text.replace("/usr/local/bin/runws", BIN).replace("/opt/runws/", &format!("{}/", checkout().display()))
}

/// The directory of the built binary, first on PATH, as a CI image has it.
fn path_with_runws() -> String {
    format!("{}:/usr/local/bin:/usr/bin:/bin", Path::new(BIN).parent().unwrap().display())
}

/// Each command of a crontab: the line without its five time fields.
fn crontab_commands(text: &str) -> Vec<String> {
    let mut commands = Vec::new();
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')) {
        let first = line.split_whitespace().next().unwrap();
        if first.contains('=') {
            continue; // SHELL=/bin/sh
        }
        let mut rest = line;
        for _ in 0..5 {
            rest = rest.trim_start();
            rest = &rest[rest.find(char::is_whitespace).unwrap()..];
        }
        commands.push(rest.trim().to_string());
    }
    commands
}

/// `sh -c COMMAND` as cron runs it: a bare environment, in HOME.
fn as_cron(home: &Path, command: &str) -> Out {
    let out = Command::new("/bin/sh")
        .args(["-c", command])
        .env_clear()
        .env("HOME", home)
        .env("LOGNAME", "root")
        .env("SHELL", "/bin/sh")
        .env("PATH", "/usr/bin:/bin")
        .current_dir(home)
        .output()
        .unwrap();
    Out::from(out)
}

fn runs_under(root: &Path) -> Vec<PathBuf> {
    match std::fs::read_dir(root.join("runs")) {
        Ok(rd) => rd.map(|e| e.unwrap().path()).collect(),
        Err(_) => Vec::new(),
    }
}

fn manifest(run: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(run.join("manifest.json")).unwrap()).unwrap()
}

#[test]
fn the_crontab_runs_the_job_with_its_lease_and_ping_and_the_nightly_reap() {
    let env = Env::new();
    let server = Server::start(Answer::Status(200));
    let text = localize(&example("crontab")).replace("127.0.0.1:8000", &format!("127.0.0.1:{}", server.port));
    let commands = crontab_commands(&text);
    assert_eq!(commands.len(), 2, "{commands:?}");
    let (job, reap) = (&commands[0], &commands[1]);
    assert!(job.starts_with(BIN) && job.contains("--lease") && job.contains("--ping"), "{job}");
    assert!(reap.ends_with("reap --keep 14d"), "{reap}");
    // The default root of the crontab's user.
    let root = env.home.join(".local/state/runws");

    as_cron(&env.home, job).ok().stdout_has("wrote report.json for run");
    let runs = runs_under(&root);
    assert_eq!(runs.len(), 1);
    let m = manifest(&runs[0]);
    assert_eq!(m["status"], "succeeded");
    let id = m["run_id"].as_str().unwrap();
    let lines: Vec<String> = server.seen().into_iter().map(|s| s.line).collect();
    assert_eq!(
        lines,
        [
            format!("POST /ping/CHECK-UUID/start?rid={id} HTTP/1.1"),
            format!("POST /ping/CHECK-UUID?rid={id} HTTP/1.1")
        ]
    );

    // The next start while the lease is held (a run still going) is skipped.
    let held =
        Command::new(BIN).args(["lease", "acquire", "nightly"]).env_clear().env("HOME", &env.home).output();
    assert!(held.unwrap().status.success());
    as_cron(&env.home, job).code(75);
    assert_eq!(runs_under(&root).len(), 1);

    // The nightly reap keeps a run finished minutes ago.
    as_cron(&env.home, reap).ok();
    assert_eq!(runs_under(&root).len(), 1);
}

/// `KEY` of each `KEY=VALUE` line of a unit file's section, in order.
fn unit_values<'a>(unit: &'a str, key: &str) -> Vec<&'a str> {
    unit.lines().filter_map(|l| l.strip_prefix(key)?.strip_prefix('=')).collect()
}

#[test]
fn the_systemd_service_runs_the_job_and_its_timer_is_valid() {
    let env = Env::new();
    let service = localize(&example("systemd/runws-nightly.service"));
    let timer = example("systemd/runws-nightly.timer");
    let state = env.path("state");
    let service = service.replace("/var/lib/runws", &state.join("runws").display().to_string());
    // StateDirectory=runws: systemd makes it before the start.
    assert_eq!(unit_values(&service, "StateDirectory"), ["runws"]);
    std::fs::create_dir_all(state.join("runws")).unwrap();

    let exec = unit_values(&service, "ExecStart");
    assert_eq!(exec.len(), 1);
    let words: Vec<&str> = exec[0].split_whitespace().collect();
    // No shell: systemd runs ExecStart's words as they are, from /.
    let mut cmd = Command::new(words[0]);
    cmd.args(&words[1..])
        .env_clear()
        .env("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
        .current_dir("/");
    for kv in unit_values(&service, "Environment") {
        let (k, v) = kv.split_once('=').unwrap();
        cmd.env(k, v);
    }
    Out::from(cmd.output().unwrap()).ok();
    let runs = runs_under(&state.join("runws"));
    assert_eq!(runs.len(), 1);
    assert_eq!(manifest(&runs[0])["outputs"][0]["name"], "report.json");
    assert_eq!(unit_values(&service, "SuccessExitStatus"), ["75"]);

    let calendar = unit_values(&timer, "OnCalendar");
    assert_eq!(calendar, ["*-*-* 03:00:00"]);
    // systemd's own checks, where systemd's tools are installed.
    let Ok(analyze) = which("systemd-analyze") else {
        eprintln!("skipped systemd-analyze checks: not installed");
        return;
    };
    let ok = Command::new(&analyze).args(["calendar", calendar[0]]).output().unwrap();
    assert!(ok.status.success(), "{}", String::from_utf8_lossy(&ok.stderr));
    let units = env.path("units");
    std::fs::create_dir(&units).unwrap();
    std::fs::write(units.join("runws-nightly.service"), &service).unwrap();
    std::fs::write(units.join("runws-nightly.timer"), &timer).unwrap();
    let verify = Command::new(&analyze)
        .arg("verify")
        .arg(units.join("runws-nightly.service"))
        .arg(units.join("runws-nightly.timer"))
        .output()
        .unwrap();
    assert!(verify.status.success(), "systemd-analyze verify: {}", String::from_utf8_lossy(&verify.stderr));
}

fn which(name: &str) -> Result<PathBuf, ()> {
    ["/usr/bin", "/bin", "/usr/local/bin"]
        .iter()
        .map(|d| Path::new(d).join(name))
        .find(|p| p.exists())
        .ok_or(())
}

/// A git repository with this checkout's `examples/agent.sh` committed, as a
/// CI job checks a project out.
fn project(env: &Env) -> PathBuf {
    let repo = env.path("project");
    std::fs::create_dir_all(repo.join("examples")).unwrap();
    std::fs::copy(checkout().join("examples/agent.sh"), repo.join("examples/agent.sh")).unwrap();
    let git = |args: &[&str]| {
        let out = Command::new("git")
            .args(args)
            .current_dir(&repo)
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_AUTHOR_NAME", "ci")
            .env("GIT_AUTHOR_EMAIL", "ci@example.invalid")
            .env("GIT_COMMITTER_NAME", "ci")
            .env("GIT_COMMITTER_EMAIL", "ci@example.invalid")
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    };
    git(&["init", "-q", "-b", "main"]);
    git(&["add", "."]);
    git(&["commit", "-q", "-m", "project"]);
    repo
}

/// The agent's run under `root` did its work: a commit on its own branch of
/// `repo`, the patch as its output, inside the sandbox.
fn check_agent_run(root: &Path, repo: &Path) {
    let runs = runs_under(root);
    assert_eq!(runs.len(), 1, "{runs:?}");
    let m = manifest(&runs[0]);
    assert_eq!(m["status"], "succeeded");
    assert!(m["sandbox"].is_object(), "{m}");
    assert_eq!(m["outputs"][0]["name"], "change.patch");
    let id = m["run_id"].as_str().unwrap();
    let log = Command::new("git")
        .args(["log", "-1", "--format=%s", &format!("runws/{id}")])
        .current_dir(repo)
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&log.stdout).trim(), format!("agent: notes of run {id}"));
}

/// The block scalar of `run: |` in the step named `step`, dedented.
fn step_run_block(yaml: &str, step: &str) -> String {
    let lines: Vec<&str> = yaml.lines().collect();
    let at = lines.iter().position(|l| l.trim() == format!("- name: {step}")).expect("the step");
    let run = (at..lines.len()).find(|&i| lines[i].trim() == "run: |").expect("its run: |");
    let indent = |l: &str| l.len() - l.trim_start().len();
    let base = indent(lines[run]);
    let body: Vec<&str> =
        lines[run + 1..].iter().copied().take_while(|l| l.trim().is_empty() || indent(l) > base).collect();
    let cut = body.iter().filter(|l| !l.trim().is_empty()).map(|l| indent(l)).min().unwrap_or(0);
    body.iter().map(|l| l.get(cut..).unwrap_or("")).collect::<Vec<_>>().join("\n")
}

#[test]
fn the_github_actions_step_runs_the_agent_in_its_worktree_and_sandbox() {
    if skip(Who::Me, "the_github_actions_step_runs_the_agent_in_its_worktree_and_sandbox") {
        return;
    }
    let env = Env::new();
    let repo = project(&env);
    let yaml = example("github-actions.yml");
    let script = step_run_block(&yaml, "Agent, in its own worktree and sandbox");
    assert!(script.contains("--sandbox --worktree ."), "{script}");
    let runner_temp = env.path("runner-temp");
    std::fs::create_dir(&runner_temp).unwrap();
    // The job's env, with `${{ runner.temp }}` as the runner expands it.
    let root_line = yaml.lines().find_map(|l| l.trim().strip_prefix("RUNWS_ROOT: ")).unwrap();
    let root = root_line.replace("${{ runner.temp }}", &runner_temp.display().to_string());
    // As the runner runs a `run:` step: bash -e, in the checkout.
    let out = Command::new("bash")
        .args(["--noprofile", "--norc", "-eo", "pipefail", "-c", &script])
        .env_clear()
        .env("PATH", path_with_runws())
        .env("HOME", &env.home)
        .env("RUNNER_TEMP", &runner_temp)
        .env("RUNWS_ROOT", &root)
        .current_dir(&repo)
        .output()
        .unwrap();
    Out::from(out).ok().stdout_has("committed on runws/");
    check_agent_run(Path::new(&root), &repo);
}

#[test]
fn the_gitlab_ci_job_runs_the_agent_in_its_worktree_and_sandbox() {
    if skip(Who::Me, "the_gitlab_ci_job_runs_the_agent_in_its_worktree_and_sandbox") {
        return;
    }
    let env = Env::new();
    let repo = project(&env);
    let yaml = example("gitlab-ci.yml");
    let lines: Vec<&str> = yaml.lines().collect();
    let section = |name: &str| -> Vec<&str> {
        let at = lines.iter().position(|l| l.trim() == format!("{name}:")).expect(name);
        lines[at + 1..].iter().copied().take_while(|l| l.starts_with("    ")).map(str::trim).collect()
    };
    let project_dir = repo.display().to_string();
    let mut cmd_env: Vec<(String, String)> = vec![("CI_PROJECT_DIR".into(), project_dir.clone())];
    for v in section("variables") {
        let (k, v) = v.split_once(": ").unwrap();
        cmd_env.push((k.into(), v.trim_matches('"').replace("$CI_PROJECT_DIR", &project_dir)));
    }
    let scripts: Vec<&str> = section("script").into_iter().filter_map(|l| l.strip_prefix("- ")).collect();
    assert!(scripts.iter().any(|s| s.contains("--sandbox --worktree .")), "{scripts:?}");
    for script in scripts {
        let out = Command::new("sh")
            .args(["-e", "-c", script])
            .env_clear()
            .env("PATH", path_with_runws())
            .env("HOME", &env.home)
            .envs(cmd_env.iter().map(|(k, v)| (k, v)))
            .current_dir(&repo)
            .output()
            .unwrap();
        Out::from(out).ok().stdout_has("committed on runws/");
    }
    let root = cmd_env.iter().find(|(k, _)| k == "RUNWS_ROOT").unwrap().1.clone();
    check_agent_run(Path::new(&root), &repo);
    // The artifacts' path holds the run.
    let artifacts = section("artifacts");
    assert!(artifacts.contains(&"- .runws/runs/"), "{artifacts:?}");
}
