//! A failed command whose relative arguments name files where runws was
//! started, not where the command ran, gets one hint line.

use crate::harness::Env;

const HINT: &str = "the command runs in the run's work/: use --cwd . or --input";

#[test]
fn a_failed_command_with_an_argument_left_behind_gets_a_hint() {
    let env = Env::new();
    std::fs::write(env.path("agent.py"), "exit 3\n").unwrap();
    let out = env.run(&["run", "--", "sh", "agent.py"]);
    assert_ne!(out.code, Some(0), "{out:?}");
    let from = env.tmp.path().display().to_string();
    out.stderr_has(&format!("runws: hint: agent.py is in {from}; {HINT}\n"));
    assert_eq!(out.stderr.matches("runws: hint:").count(), 1, "{out:?}");

    // Where the command ran it exists: the command's own failure, no hint.
    let out = env.run(&["run", "--cwd", ".", "--", "sh", "agent.py"]);
    out.code(3);
    assert!(!out.stderr.contains("hint"), "{out:?}");
    // A command that succeeded needs none.
    let out = env.run(&["run", "--", "sh", "-c", "exit 0", "sh", "agent.py"]);
    out.ok();
    assert!(!out.stderr.contains("hint"), "{out:?}");
    // Absolute paths and options are not looked at.
    let abs = env.path("agent.py").display().to_string();
    let out = env.run(&["run", "--", "sh", "-c", "exit 4", "sh", &abs, "-agent.py"]);
    out.code(4);
    assert!(!out.stderr.contains("hint"), "{out:?}");
}

#[test]
fn the_hint_escapes_the_name() {
    let env = Env::new();
    std::fs::write(env.path("a\nb.py"), "").unwrap();
    let out = env.run(&["run", "--", "sh", "-c", "exit 5", "sh", "a\nb.py"]);
    out.code(5);
    out.stderr_has("runws: hint: a\\nb.py is in ");
}
