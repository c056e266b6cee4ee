//! The AWS shared configuration files, read the way the AWS CLI reads them
//! for a profile with static keys: `AWS_PROFILE` (else `default`) in
//! `AWS_SHARED_CREDENTIALS_FILE` (else `~/.aws/credentials`, sections
//! `[NAME]`) and `AWS_CONFIG_FILE` (else `~/.aws/config`, sections
//! `[profile NAME]` or `[default]`); the credentials file wins for a key
//! both name. Profiles that get their keys from a process, SSO or a role
//! are refused with a sentence, not half-used.

use std::collections::HashMap;
use std::path::PathBuf;

use crate::error::{Error, Result};

/// The settings of one profile runws uses.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Profile {
    pub access_key_id: Option<String>,
    pub secret_access_key: Option<String>,
    pub session_token: Option<String>,
    pub region: Option<String>,
    pub endpoint_url: Option<String>,
}

/// The profile the environment selects, if either file holds it. A profile
/// named by `AWS_PROFILE` that neither file holds is an error; a missing
/// `default` is not.
pub fn load() -> Result<Option<Profile>> {
    let named = std::env::var("AWS_PROFILE").ok().filter(|s| !s.is_empty());
    let name = named.clone().unwrap_or_else(|| "default".to_string());
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let file = |var: &str, rel: &str| {
        std::env::var_os(var).map(PathBuf::from).or_else(|| home.as_ref().map(|h| h.join(rel)))
    };
    let read = |p: Option<PathBuf>| p.and_then(|p| std::fs::read_to_string(p).ok()).unwrap_or_default();
    let credentials = read(file("AWS_SHARED_CREDENTIALS_FILE", ".aws/credentials"));
    let config = read(file("AWS_CONFIG_FILE", ".aws/config"));
    let from_credentials = section(&credentials, &name);
    let config_header = if name == "default" { "default".to_string() } else { format!("profile {name}") };
    let from_config = section(&config, &config_header);
    if from_credentials.is_none() && from_config.is_none() {
        return match named {
            Some(n) => Err(Error::Usage(format!(
                "AWS_PROFILE names the profile `{}`, which neither the AWS credentials nor config file holds",
                crate::shown::line(&n)
            ))),
            None => Ok(None),
        };
    }
    let mut keys = from_config.unwrap_or_default();
    keys.extend(from_credentials.unwrap_or_default());
    let take = |k: &str| keys.get(k).filter(|v| !v.is_empty()).cloned();
    let profile = Profile {
        access_key_id: take("aws_access_key_id"),
        secret_access_key: take("aws_secret_access_key"),
        session_token: take("aws_session_token"),
        region: take("region"),
        endpoint_url: take("endpoint_url"),
    };
    if profile.access_key_id.is_none()
        && let Some(how) = ["credential_process", "sso_session", "sso_start_url", "role_arn"]
            .iter()
            .find(|k| keys.contains_key(**k))
    {
        return Err(Error::Usage(format!(
            "the AWS profile `{}` gets its keys through `{how}`, which runws does not run; export them \
             (`aws configure export-credentials --format env`) or use a profile with static keys",
            crate::shown::line(&name)
        )));
    }
    Ok(Some(profile))
}

/// The `key = value` pairs of the section `[header]`, if the text has it.
/// Indented lines (a nested service section's settings) are skipped.
fn section(text: &str, header: &str) -> Option<HashMap<String, String>> {
    let mut found = None::<HashMap<String, String>>;
    let mut inside = false;
    for line in text.lines() {
        if line.starts_with([' ', '\t']) {
            continue;
        }
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(h) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            let h = h.split_whitespace().collect::<Vec<_>>().join(" ");
            inside = h == header;
            if inside && found.is_none() {
                found = Some(HashMap::new());
            }
            continue;
        }
        if !inside {
            continue;
        }
        if let (Some(map), Some((k, v))) = (found.as_mut(), line.split_once('=')) {
            map.insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sections_are_read_as_the_cli_reads_them() {
        let text = "# c\n[default]\nregion = eu-west-1\n[profile ci]\naws_access_key_id=AK\n  s3 =\n    endpoint_url = x\nendpoint_url = http://127.0.0.1:9000\n[other]\nregion=us\n";
        let d = section(text, "default").unwrap();
        assert_eq!(d.get("region").map(String::as_str), Some("eu-west-1"));
        let ci = section(text, "profile ci").unwrap();
        assert_eq!(ci.get("aws_access_key_id").map(String::as_str), Some("AK"));
        assert_eq!(ci.get("endpoint_url").map(String::as_str), Some("http://127.0.0.1:9000"));
        assert!(section(text, "missing").is_none());
    }
}
