//! The child's environment, built from empty.
//!
//! Nothing of runws's own environment reaches the child except what the user
//! grants by name (`--pass`) or by value (`--env`, `--env-file`). The manifest
//! records each variable's name and source, never a value. Grants may not
//! replace the variables that make the run private (HOME, TMPDIR, PATH, ...);
//! `LANG` is the one preference a grant may change.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
use std::path::Path;

pub mod size;

use crate::error::{Error, IoContext, Result};
use crate::manifest::{EnvRecord, PortRecord};

/// What runws itself puts in the child's environment.
pub struct RunPaths<'a> {
    pub run_id: &'a str,
    pub run_dir: &'a Path,
    pub root: &'a Path,
    pub job: &'a str,
    pub prefix: &'a str,
    pub path_tail: &'a str,
    pub ports: &'a [PortRecord],
}

/// A grant the user asked for.
pub enum Grant {
    Value {
        key: String,
        value: OsString,
        source: &'static str,
    },
    Pass {
        key: String,
    },
    /// A `--pass` glob, recorded by itself: whether it matched anything (the
    /// variables it matched are [`Grant::Pass`] grants of their own).
    Glob {
        pattern: String,
        matched: bool,
    },
}

/// Whether `--pass` was given a glob (`GITHUB_*`, `AWS_?`) rather than a name.
pub fn is_glob(key: &str) -> bool {
    key.contains(['*', '?'])
}

/// Expands a `--pass` glob over `names` (runws's own environment): `*`
/// matches any run of characters, `?` one; every other character itself.
/// Variables runws sets for every run are never matched. The names matched,
/// sorted, and the grants: each name its own, then the glob's.
pub fn expand_glob(pattern: &str, names: impl Iterator<Item = OsString>) -> Result<Vec<Grant>> {
    let ok = pattern.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'*' | b'?'))
        && !pattern.is_empty();
    if !ok {
        return Err(Error::Usage(format!(
            "`{}` is not a variable name or glob (letters, digits, `_`, `*` and `?`)",
            pattern.escape_debug()
        )));
    }
    let mut keys: Vec<String> = names
        .filter_map(|n| n.into_string().ok())
        .filter(|n| glob_matches(pattern.as_bytes(), n.as_bytes()) && check_key(n).is_ok())
        .collect();
    keys.sort();
    let matched = !keys.is_empty();
    let mut grants: Vec<Grant> = keys.into_iter().map(|key| Grant::Pass { key }).collect();
    grants.push(Grant::Glob { pattern: pattern.to_string(), matched });
    Ok(grants)
}

/// `*` and `?` over bytes, as the shell's patterns without brackets.
fn glob_matches(pattern: &[u8], name: &[u8]) -> bool {
    let (mut p, mut n) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while n < name.len() {
        if p < pattern.len() && (pattern[p] == b'?' || pattern[p] == name[n]) {
            p += 1;
            n += 1;
        } else if p < pattern.len() && pattern[p] == b'*' {
            star = Some((p, n));
            p += 1;
        } else if let Some((sp, sn)) = star {
            p = sp + 1;
            n = sn + 1;
            star = Some((sp, sn + 1));
        } else {
            return false;
        }
    }
    pattern[p..].iter().all(|&b| b == b'*')
}

/// The environment, ordered by name, and its record for the manifest.
pub struct ChildEnv {
    pub vars: BTreeMap<String, OsString>,
    pub record: Vec<EnvRecord>,
}

/// Names runws owns: a grant cannot set them.
fn reserved(name: &str) -> bool {
    const OWNED: [&str; 17] = [
        "PATH",
        "HOME",
        "TMPDIR",
        "TMP",
        "TEMP",
        "XDG_CACHE_HOME",
        "XDG_CONFIG_HOME",
        "XDG_DATA_HOME",
        "XDG_STATE_HOME",
        "XDG_RUNTIME_DIR",
        "GIT_CONFIG_GLOBAL",
        "GIT_CONFIG_SYSTEM",
        "GIT_CONFIG_NOSYSTEM",
        "npm_config_cache",
        "PNPM_HOME",
        "PORT",
        "RUN_ID",
    ];
    OWNED.contains(&name)
        || name.starts_with("RUNWS_")
        || name.starts_with("LISTEN_")
        || (name.starts_with("PORT_") && name[5..].bytes().all(|b| b.is_ascii_digit()))
}

/// Checks an environment variable name: `[A-Za-z_][A-Za-z0-9_]*`.
pub fn check_key(key: &str) -> Result<()> {
    let mut bytes = key.bytes();
    let ok = matches!(bytes.next(), Some(b) if b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_');
    if !ok {
        return Err(Error::Usage(format!("`{}` is not a variable name", key.escape_debug())));
    }
    if reserved(key) {
        return Err(Error::Usage(format!(
            "`{key}` is set by runws for every run and cannot be granted (use --path for PATH)"
        )));
    }
    Ok(())
}

/// Parses `--env KEY=VALUE`.
pub fn parse_env_arg(arg: &str) -> Result<Grant> {
    let Some((key, value)) = arg.split_once('=') else {
        return Err(Error::Usage(format!("--env takes KEY=VALUE, not `{}`", arg.escape_debug())));
    };
    check_key(key)?;
    Ok(Grant::Value { key: key.to_string(), value: value.into(), source: "env" })
}

/// Reads an env file: `KEY=VALUE` lines, `#` comments, blank lines, an
/// optional `export ` prefix; a value wrapped in matching single or double
/// quotes loses them; nothing is expanded.
pub fn read_env_file(path: &Path) -> Result<Vec<Grant>> {
    let bytes = std::fs::read(path).ctx("cannot read env file", path)?;
    let text = String::from_utf8(bytes)
        .map_err(|_| Error::Usage(format!("env file `{}` is not UTF-8", path.display())))?;
    let mut grants = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim_start();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let line = line.strip_prefix("export ").unwrap_or(line);
        let Some((key, value)) = line.split_once('=') else {
            return Err(Error::Usage(format!(
                "env file `{}` line {}: expected KEY=VALUE",
                path.display(),
                n + 1
            )));
        };
        let key = key.trim_end();
        check_key(key)
            .map_err(|e| Error::Usage(format!("env file `{}` line {}: {e}", path.display(), n + 1)))?;
        let value = unquote(value);
        grants.push(Grant::Value { key: key.to_string(), value: value.into(), source: "env-file" });
    }
    Ok(grants)
}

fn unquote(v: &str) -> &str {
    let b = v.as_bytes();
    if b.len() >= 2 && (b[0] == b'"' || b[0] == b'\'') && b[b.len() - 1] == b[0] {
        &v[1..v.len() - 1]
    } else {
        v
    }
}

fn s(p: &Path) -> OsString {
    p.as_os_str().to_owned()
}

/// Builds the environment from empty.
pub fn build(paths: &RunPaths<'_>, grants: Vec<Grant>) -> Result<ChildEnv> {
    let d = paths.run_dir;
    let home = d.join("home");
    let mut vars: BTreeMap<String, OsString> = BTreeMap::new();
    let mut path = d.join("bin").into_os_string().into_vec();
    if !paths.path_tail.is_empty() {
        path.push(b':');
        path.extend_from_slice(paths.path_tail.as_bytes());
    }
    let own: Vec<(&str, OsString)> = vec![
        ("PATH", OsString::from_vec(path)),
        ("HOME", s(&home)),
        ("TMPDIR", s(&d.join("tmp"))),
        ("TMP", s(&d.join("tmp"))),
        ("TEMP", s(&d.join("tmp"))),
        ("XDG_CACHE_HOME", s(&d.join("cache"))),
        ("XDG_CONFIG_HOME", s(&home.join(".config"))),
        ("XDG_DATA_HOME", s(&home.join(".local/share"))),
        ("XDG_STATE_HOME", s(&home.join(".local/state"))),
        ("XDG_RUNTIME_DIR", s(&d.join("run"))),
        ("GIT_CONFIG_GLOBAL", s(&home.join(".gitconfig"))),
        ("GIT_CONFIG_SYSTEM", "/dev/null".into()),
        ("GIT_CONFIG_NOSYSTEM", "1".into()),
        ("npm_config_cache", s(&d.join("cache/npm"))),
        ("PNPM_HOME", s(&home.join(".local/share/pnpm"))),
        ("LANG", "C.UTF-8".into()),
        ("RUN_ID", paths.run_id.into()),
        ("RUNWS_RUN_ID", paths.run_id.into()),
        ("RUNWS_DIR", s(d)),
        ("RUNWS_ROOT", s(paths.root)),
        ("RUNWS_JOB", paths.job.into()),
        ("RUNWS_PREFIX", paths.prefix.into()),
    ];
    for (k, v) in own {
        vars.insert(k.to_string(), v);
    }
    for p in paths.ports {
        vars.insert(p.var.clone(), p.port.to_string().into());
    }
    let mut record: Vec<EnvRecord> = vars
        .keys()
        .map(|k| EnvRecord { name: k.clone(), granted: false, source: "runws".into(), present: true })
        .collect();

    // The time zone is no secret, and cron users rely on it: passed when set.
    if let Some(tz) = std::env::var_os("TZ") {
        vars.insert("TZ".into(), tz);
        record.push(EnvRecord { name: "TZ".into(), granted: false, source: "runws".into(), present: true });
    }

    for grant in grants {
        let (key, value, source) = match grant {
            Grant::Glob { pattern, matched } => {
                record.push(EnvRecord {
                    name: pattern,
                    granted: true,
                    source: "pass".into(),
                    present: matched,
                });
                continue;
            }
            Grant::Value { key, value, source } => (key, Some(value), source),
            Grant::Pass { key } => {
                check_key(&key)?;
                let value = std::env::var_os(&key);
                (key, value, "pass")
            }
        };
        record.retain(|r| r.name != key);
        record.push(EnvRecord {
            name: key.clone(),
            granted: true,
            source: source.into(),
            present: value.is_some(),
        });
        match value {
            Some(v) => {
                vars.insert(key, v);
            }
            None => {
                if key != "LANG" {
                    vars.remove(&key);
                }
            }
        }
    }
    record.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(ChildEnv { vars, record })
}

/// The names of the variables runws adds after fork (`--listen`).
pub const LISTEN_VARS: [&str; 3] = ["LISTEN_FDS", "LISTEN_FDNAMES", "LISTEN_PID"];

pub fn listen_record() -> Vec<EnvRecord> {
    LISTEN_VARS
        .iter()
        .map(|k| EnvRecord { name: k.to_string(), granted: false, source: "runws".into(), present: true })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs() {
        for (p, n, want) in [
            ("GITHUB_*", "GITHUB_SHA", true),
            ("GITHUB_*", "GITHUB_", true),
            ("GITHUB_*", "XGITHUB_SHA", false),
            ("A?C", "ABC", true),
            ("A?C", "AC", false),
            ("*_TOKEN", "CI_JOB_TOKEN", true),
            ("*", "ANY", true),
            ("A*B*C", "AxxBxxC", true),
            ("A*B*C", "AxxBxx", false),
        ] {
            assert_eq!(glob_matches(p.as_bytes(), n.as_bytes()), want, "{p} {n}");
        }
        let names = ["GITHUB_SHA", "GITHUB_REF", "HOME", "PATH", "OTHER"].map(OsString::from);
        let got = expand_glob("*", names.clone().into_iter()).unwrap();
        let keys: Vec<&str> = got
            .iter()
            .filter_map(|g| match g {
                Grant::Pass { key } => Some(key.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(keys, ["GITHUB_REF", "GITHUB_SHA", "OTHER"]);
        assert!(expand_glob("GIT-*", names.into_iter()).is_err());
    }

    #[test]
    fn keys() {
        check_key("FOO_1").unwrap();
        check_key("_x").unwrap();
        check_key("LANG").unwrap();
        for bad in ["", "1A", "A-B", "A=B", "HOME", "PATH", "RUNWS_DIR", "PORT", "PORT_3", "LISTEN_FDS"] {
            assert!(check_key(bad).is_err(), "{bad:?}");
        }
        check_key("PORTAL").unwrap();
    }

    #[test]
    fn env_file() {
        let tmp = tempfile::tempdir().unwrap();
        let f = tmp.path().join("e");
        std::fs::write(&f, "# c\n\nA=1\nexport B='two words'\nC=\"q\"\nD=x=y\n").unwrap();
        let g = read_env_file(&f).unwrap();
        let got: Vec<(String, String)> = g
            .into_iter()
            .map(|g| match g {
                Grant::Value { key, value, .. } => (key, value.into_string().unwrap()),
                Grant::Pass { .. } | Grant::Glob { .. } => unreachable!(),
            })
            .collect();
        assert_eq!(
            got,
            vec![
                ("A".into(), "1".into()),
                ("B".into(), "two words".into()),
                ("C".into(), "q".into()),
                ("D".into(), "x=y".into())
            ]
        );
        std::fs::write(&f, "HOME=/x\n").unwrap();
        assert!(read_env_file(&f).is_err());
        std::fs::write(&f, "novalue\n").unwrap();
        assert!(read_env_file(&f).is_err());
    }
}
