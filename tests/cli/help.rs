//! `--help` teaches: every command opens with its own description, every
//! option and argument says what it is for, and a usage error keeps clap's
//! tip and points at the help of the command it was made in.

use crate::harness::*;

/// The first paragraph of a help text (its opening lines, up to the first
/// blank one), with the wrapping undone.
fn opening(help: &str) -> String {
    let lines: Vec<&str> = help.lines().take_while(|l| !l.trim().is_empty()).collect();
    lines.iter().map(|l| l.trim()).collect::<Vec<_>>().join(" ")
}

/// The lines of section `title` (`Commands:`, `Options:`) of a help text.
fn section<'a>(help: &'a str, title: &str) -> Vec<&'a str> {
    help.lines().skip_while(|l| *l != title).skip(1).take_while(|l| !l.trim().is_empty()).collect()
}

/// Each subcommand `-h` lists, with the description it shows for it (its
/// wrapped lines joined).
fn subcommands(help: &str) -> Vec<(String, String)> {
    let mut found: Vec<(String, String)> = Vec::new();
    for line in section(help, "Commands:") {
        let indent = line.len() - line.trim_start().len();
        if indent <= 2 {
            let (name, about) = line.trim().split_once("  ").unwrap_or((line.trim(), ""));
            found.push((name.to_string(), about.trim().to_string()));
        } else if let Some(last) = found.last_mut() {
            last.1 = format!("{} {}", last.1, line.trim());
        }
    }
    found
}

/// Every subcommand's path below `path`, with the description its parent
/// shows for it; clap's own `help` is left out.
fn walk(env: &Env, path: Vec<String>, into: &mut Vec<(Vec<String>, String)>) {
    let mut args: Vec<&str> = path.iter().map(String::as_str).collect();
    args.push("-h");
    let out = env.run(&args);
    out.ok();
    for (name, about) in subcommands(&out.stdout) {
        if name == "help" {
            continue;
        }
        let mut sub = path.clone();
        sub.push(name);
        into.push((sub.clone(), about));
        walk(env, sub, into);
    }
}

fn all_commands(env: &Env) -> Vec<(Vec<String>, String)> {
    let mut all = Vec::new();
    walk(env, Vec::new(), &mut all);
    assert!(all.len() > 20, "too few subcommands found: {all:?}");
    all
}

#[test]
fn every_command_opens_its_help_with_its_own_description() {
    let env = Env::new();
    for (path, about) in all_commands(&env) {
        let mut args: Vec<&str> = path.iter().map(String::as_str).collect();
        args.push("-h");
        let out = env.run(&args);
        out.ok();
        assert_eq!(opening(&out.stdout), about, "`runws {}` opens with the wrong text", path.join(" "));
        assert!(!about.is_empty(), "`runws {}` has no description", path.join(" "));
    }
    // The long help of the commands that flatten the seal's options.
    let long = env.run(&["run", "--help"]);
    long.ok();
    assert!(
        opening(&long.stdout).starts_with("Run COMMAND once, in a fresh run directory"),
        "{}",
        long.stdout
    );
    let via_help = env.run(&["help", "run"]);
    via_help.ok();
    assert_eq!(via_help.stdout, long.stdout);
    let audit = env.run(&["audit", "--help"]);
    audit.ok();
    assert!(
        opening(&audit.stdout).starts_with("Run COMMAND with every location outside"),
        "{}",
        audit.stdout
    );
    let seal = env.run(&["seal", "--help"]);
    seal.ok();
    assert!(opening(&seal.stdout).starts_with("Pack the run"), "{}", seal.stdout);
}

#[test]
fn every_option_and_argument_has_help_text() {
    let env = Env::new();
    let mut bare = Vec::new();
    for (path, _) in all_commands(&env) {
        let mut args: Vec<&str> = path.iter().map(String::as_str).collect();
        args.push("-h");
        let out = env.run(&args);
        out.ok();
        for title in ["Arguments:", "Options:"] {
            for line in section(&out.stdout, title) {
                let indent = line.len() - line.trim_start().len();
                // An argument's own line; deeper lines continue a help text.
                if indent > 6 {
                    continue;
                }
                let spec = line.trim();
                // clap's own notes (`[default: 1m]`, `[possible values: ...]`)
                // are not help.
                let help = spec.split_once("  ").map_or("", |(_, help)| help.trim());
                if help.is_empty() || help.starts_with('[') {
                    bare.push(format!("runws {}: {spec}", path.join(" ")));
                }
            }
        }
    }
    assert!(bare.is_empty(), "arguments without help:\n{}", bare.join("\n"));
}

#[test]
fn a_misspelt_option_keeps_the_tip_and_points_at_the_subcommands_help() {
    let env = Env::new();
    let cases: [(&[&str], &str, &str); 5] = [
        (&["run", "--captur", "--", "true"], "'--capture'", "`runws run --help`"),
        (&["--root", "run", "run", "--jobs", "x", "--", "true"], "'--job'", "`runws run --help`"),
        (&["lease", "acquire", "k", "--tt", "1s"], "'--ttl'", "`runws lease acquire --help`"),
        (&["lane", "stamp", "l", "approve", "--reviwer", "Cy"], "'--reviewer'", "`runws lane stamp --help`"),
        (&["ls", "--jsn"], "'--json'", "`runws ls --help`"),
    ];
    for (args, similar, help) in cases {
        let out = env.run(args);
        out.code(125).one_line_error();
        assert_eq!(out.stderr.lines().count(), 1, "{}", out.stderr);
        out.stderr_has("a similar argument exists").stderr_has(similar).stderr_has(&format!("(see {help})"));
    }
    // Errors without a tip still point at the subcommand's help.
    let out = env.run(&["run", "--ports", "many", "--", "true"]);
    out.code(125).one_line_error().stderr_has("(see `runws run --help`)");
    let out = env.run(&["lease", "release", "k", "--holder"]);
    out.code(125).one_line_error().stderr_has("(see `runws lease release --help`)");
    // A misspelt subcommand: the tip, and the list of commands.
    let out = env.run(&["lsx"]);
    out.code(125).one_line_error().stderr_has("'ls'").stderr_has("(see `runws --help`)");
}

#[test]
fn bare_runws_lists_the_commands_on_stderr_and_exits_125() {
    let env = Env::new();
    let out = env.run(&[]);
    out.code(125);
    assert!(out.stdout.is_empty(), "{}", out.stdout);
    out.stderr_has("Usage: runws").stderr_has("Commands:").stderr_has("\n  run ").stderr_has("\n  lane ");
    // As does a command group without its subcommand.
    let out = env.run(&["lease"]);
    out.code(125);
    out.stderr_has("Commands:").stderr_has("\n  acquire ").stderr_has("\n  release ");
}

#[test]
fn completions_parse_and_name_every_subcommand() {
    let env = Env::new();
    let commands = all_commands(&env);
    let bash = env.run(&["completions", "bash"]);
    bash.ok();
    let path = env.path("runws.bash");
    std::fs::write(&path, &bash.stdout).unwrap();
    let check = std::process::Command::new("bash").arg("-n").arg(&path).output().expect("bash");
    assert!(check.status.success(), "bash -n: {}", String::from_utf8_lossy(&check.stderr));
    // The script loads, and completes `runws le` to `lease`.
    let script = format!(
        "source {}; COMP_WORDS=(runws le); COMP_CWORD=1; COMP_LINE='runws le'; COMP_POINT=8; _runws runws le runws; echo \"${{COMPREPLY[@]}}\"",
        path.display()
    );
    let out = std::process::Command::new("bash").args(["--norc", "-c", &script]).output().expect("bash");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "lease",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for (path, _) in &commands {
        let name = path.last().unwrap();
        assert!(
            bash.stdout.contains(&format!("runws__subcmd__{}", path.join("__subcmd__"))),
            "bash: no {name}"
        );
    }
    let zsh = env.run(&["completions", "zsh"]);
    zsh.ok().stdout_has("#compdef runws");
    let fish = env.run(&["completions", "fish"]);
    fish.ok();
    for (path, _) in &commands {
        let name = path.last().unwrap();
        zsh.stdout_has(&format!("'{name}:"));
        fish.stdout_has(&format!("-a \"{name}\""));
    }
    env.run(&["completions", "tcsh"]).code(125).one_line_error().stderr_has("bash");
}

#[test]
fn the_man_page_covers_every_subcommand() {
    let env = Env::new();
    let man = env.run(&["man"]);
    man.ok().stdout_has(".TH runws 1").stdout_has(".SH COMMANDS");
    for (path, _) in all_commands(&env) {
        let heading = format!(".SS \"runws {}\"", path.join(" "));
        let bare = format!(".SS runws {}", path.join(" "));
        assert!(
            man.stdout.contains(&heading) || man.stdout.contains(&bare),
            "no section for `runws {}`",
            path.join(" ")
        );
    }
    // Every option of `run` is in it, with its help.
    man.stdout_has("\\-\\-kill\\-after").stdout_has("Send SIGTERM to the command");
    // It renders (when man is installed).
    let page = env.path("runws.1");
    std::fs::write(&page, &man.stdout).unwrap();
    if let Ok(out) = std::process::Command::new("man").arg("-l").arg(&page).env("MANPAGER", "cat").output() {
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        assert!(String::from_utf8_lossy(&out.stdout).contains("runws lease acquire"));
    }
}

#[test]
fn version_names_the_commit_it_was_built_from() {
    let env = Env::new();
    let want = match std::process::Command::new("git")
        .args(["-C", env!("CARGO_MANIFEST_DIR"), "rev-parse", "HEAD", "--show-toplevel"])
        .output()
    {
        Ok(out) if out.status.success() => {
            let text = String::from_utf8(out.stdout).unwrap();
            let mut lines = text.lines();
            let commit = lines.next().unwrap().to_string();
            let top = std::path::PathBuf::from(lines.next().unwrap());
            if top.canonicalize().unwrap()
                == std::path::Path::new(env!("CARGO_MANIFEST_DIR")).canonicalize().unwrap()
            {
                format!("runws {} (commit {})\n", env!("CARGO_PKG_VERSION"), &commit[..12])
            } else {
                format!("runws {}\n", env!("CARGO_PKG_VERSION"))
            }
        }
        _ => format!("runws {}\n", env!("CARGO_PKG_VERSION")),
    };
    for flag in ["--version", "-V"] {
        let out = env.run(&[flag]);
        out.ok();
        assert_eq!(out.stdout, want);
    }
}
