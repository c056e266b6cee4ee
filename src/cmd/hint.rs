//! The hint after a failed run whose arguments name files where runws was
//! started, not where the command ran (`runws run -- python3 agent.py`).

use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use crate::shown;

/// How many arguments are looked at: a long argument list is not a
/// mistyped invocation.
const MAX_ARGS: usize = 64;

/// The hint line (without `runws: `) for the first relative argument of
/// `command` that exists in `invoked_from` but not in `cwd`, the command's
/// working directory; `None` when there is none, or when the command ran
/// where runws was started.
pub fn misplaced(command: &[OsString], invoked_from: &Path, cwd: &Path, in_work: bool) -> Option<String> {
    if invoked_from == cwd {
        return None;
    }
    let arg = command.iter().skip(1).take(MAX_ARGS).find(|arg| {
        let bytes = arg.as_bytes();
        let p = Path::new(arg);
        !bytes.is_empty()
            && !bytes.starts_with(b"-")
            && p.is_relative()
            && invoked_from.join(p).symlink_metadata().is_ok()
            && cwd.join(p).symlink_metadata().is_err()
    })?;
    let place = if in_work { "the run's work/".to_string() } else { shown::path(cwd) };
    Some(format!(
        "hint: {} is in {}; the command runs in {place}: use --cwd . or --input",
        shown::os(arg),
        shown::path(invoked_from)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_relative_arguments_missing_where_the_command_ran() {
        let from = tempfile::tempdir().unwrap();
        let work = tempfile::tempdir().unwrap();
        std::fs::write(from.path().join("agent.py"), "").unwrap();
        std::fs::write(from.path().join("both"), "").unwrap();
        std::fs::write(work.path().join("both"), "").unwrap();
        let cmd = |args: &[&str]| args.iter().map(OsString::from).collect::<Vec<_>>();
        let hint = misplaced(&cmd(&["python3", "agent.py"]), from.path(), work.path(), true).unwrap();
        assert!(hint.starts_with("hint: agent.py is in "), "{hint}");
        assert!(hint.ends_with("the command runs in the run's work/: use --cwd . or --input"), "{hint}");
        assert_eq!(misplaced(&cmd(&["python3", "both", "-x", "nope"]), from.path(), work.path(), true), None);
        assert_eq!(misplaced(&cmd(&["agent.py"]), from.path(), work.path(), true), None);
        assert_eq!(misplaced(&cmd(&["python3", "agent.py"]), from.path(), from.path(), false), None);
    }
}
