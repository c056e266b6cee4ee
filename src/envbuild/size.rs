//! The kernel's limits on what `execve` takes, checked before the fork, so
//! a variable too large for them is named instead of the command failing
//! with "Argument list too long".

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::Path;

use crate::error::{Error, Result};
use crate::manifest::EnvRecord;

/// The longest single argument or `KEY=VALUE` string the kernel takes
/// (`MAX_ARG_STRLEN`: 32 pages of 4 KiB), its NUL included.
pub const MAX_ARG_STRLEN: usize = 32 * 4096;

/// The least total the kernel ever allows (`ARG_MAX`), whatever the stack limit.
const MIN_TOTAL: u64 = 32 * 4096;

/// The most it ever allows: three quarters of the 8 MiB `_STK_LIM`.
const MAX_TOTAL: u64 = 6 << 20;

/// Refuses an environment that `execve` would refuse with E2BIG: one
/// variable over [`MAX_ARG_STRLEN`], or arguments and environment together
/// over a quarter of the stack limit, as Linux counts them.
pub fn check(
    vars: &BTreeMap<String, OsString>,
    record: &[EnvRecord],
    program: &Path,
    argv: &[OsString],
) -> Result<()> {
    let entry = |k: &String, v: &OsString| k.len() + 1 + v.len() + 1;
    for (k, v) in vars {
        let len = entry(k, v);
        if len > MAX_ARG_STRLEN {
            return Err(Error::Usage(format!(
                "variable `{k}`{} is {len} bytes; the kernel takes at most {MAX_ARG_STRLEN} bytes for one variable",
                from(record, k)
            )));
        }
    }
    let strings: usize = program.as_os_str().len()
        + 1
        + argv.iter().map(|a| a.len() + 1).sum::<usize>()
        + vars.iter().map(|(k, v)| entry(k, v)).sum::<usize>();
    let total = (strings + (argv.len() + vars.len()) * std::mem::size_of::<usize>()) as u64;
    let limit = total_limit();
    if total <= limit {
        return Ok(());
    }
    let largest = record
        .iter()
        .filter(|r| r.granted)
        .filter_map(|r| vars.get_key_value(&r.name))
        .max_by_key(|(k, v)| entry(k, v));
    let named = match largest {
        Some((k, v)) => {
            format!("; the largest variable granted is `{k}`{} ({} bytes)", from(record, k), entry(k, v))
        }
        None => String::new(),
    };
    Err(Error::Usage(format!(
        "the command's arguments and environment are {total} bytes, more than the kernel's limit of {limit}{named}"
    )))
}

/// ` (from --OPTION)` for a granted variable.
fn from(record: &[EnvRecord], key: &str) -> String {
    match record.iter().find(|r| r.name == key && r.granted) {
        Some(r) => format!(" (from `--{}`)", r.source),
        None => String::new(),
    }
}

/// Linux's limit on arguments and environment together: a quarter of the
/// stack's soft limit, within [`MIN_TOTAL`] and [`MAX_TOTAL`].
fn total_limit() -> u64 {
    let stack = rustix::process::getrlimit(rustix::process::Resource::Stack).current;
    stack.map_or(MAX_TOTAL, |s| (s / 4).min(MAX_TOTAL)).max(MIN_TOTAL)
}
