//! The names a seal never packs, whatever the run wrote.
//!
//! A sealed archive is kept, copied and restored by people who never saw the
//! run; a credential the child left behind must not travel with it. These
//! names are dropped before a byte of them is read, whether or not the secret
//! scanner would have caught their content, and the seal reports each one.
//! Matching is by path component and ignores ASCII case, so `.ENV` and
//! `Server.PEM` are dropped too: leaving out a harmless file costs less than
//! archiving a key.

/// True when `rel_path` (relative to the run directory, `/`-separated) or any
/// directory above it is on the never-packed list.
#[cfg(test)]
fn is_never_packed(rel_path: &str) -> bool {
    let mut parent: Option<&str> = None;
    for part in rel_path.split('/').filter(|p| !p.is_empty() && *p != ".") {
        if is_never_packed_name(parent, part) {
            return true;
        }
        parent = Some(part);
    }
    false
}

/// True when the entry `name`, inside a directory named `parent`, is on the
/// never-packed list. The walk calls this once per entry, since it never
/// descends into a directory that is itself excluded.
pub fn is_never_packed_name(parent: Option<&str>, name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    let name = lower.as_str();
    const EXACT: [&str; 8] =
        [".env", "kubeconfig", "credentials.json", ".netrc", ".git-credentials", ".ssh", ".npmrc", ".pypirc"];
    EXACT.contains(&name)
        || name.starts_with(".env.")
        || name.ends_with(".pem")
        || name.contains("id_rsa")
        || name.contains("id_ed25519")
        || (name == "config.json" && parent.is_some_and(|p| p.eq_ignore_ascii_case(".docker")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listed_names_are_never_packed() {
        for rel in [
            ".env",
            ".env.local",
            "work/.env.production",
            "a/server.pem",
            "a/Server.PEM",
            ".ssh",
            ".ssh/known_hosts",
            "home/.ssh/config",
            "work/id_rsa",
            "work/id_rsa.pub",
            "work/backup_id_ed25519_old",
            "kubeconfig",
            "home/.kube/kubeconfig",
            "credentials.json",
            "home/.netrc",
            "home/.git-credentials",
            ".docker/config.json",
            "home/.docker/config.json",
            "home/.npmrc",
            "home/.pypirc",
            "x/.env/anything",
        ] {
            assert!(is_never_packed(rel), "{rel} would be packed");
        }
    }

    #[test]
    fn ordinary_names_are_packed() {
        for rel in [
            "manifest.json",
            "outputs/report.json",
            "work/.envrc",
            "work/environment.txt",
            "work/pem",
            "work/pem.txt",
            "config.json",
            "work/config.json",
            "docker/config.json",
            ".docker/daemon.json",
            "work/ssh/notes",
            "work/kubeconfig.md",
            "work/credentials.json.bak",
            "outputs/env",
        ] {
            assert!(!is_never_packed(rel), "{rel} would be dropped");
        }
    }
}
