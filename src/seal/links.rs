//! Where a symlink really leads, decided without asking the kernel to follow it.
//!
//! Both the seal and the restore must know whether a symlink stays inside a
//! tree (the run directory, the restore target). A purely textual check is
//! not enough: with `a/b/l -> ../..` (inside), `x -> a/b/l/..` looks like
//! `a/b` but the kernel reads it as the parent of the root. So the target is
//! walked one component at a time, and every component that is itself a
//! symlink (as `lookup` reports) is expanded in place, exactly as path
//! resolution does; the walk fails as soon as `..` would climb above the root
//! or an absolute target appears. Components that do not exist are taken as
//! plain names: a dangling symlink that would stay inside is accepted.

/// Symlinks expanded before giving up, as the kernel's `ELOOP` limit.
const MAX_HOPS: usize = 40;

/// Splits a path into its components, dropping empty ones and `.`.
pub fn components(path: &[u8]) -> impl DoubleEndedIterator<Item = &[u8]> {
    path.split(|b| *b == b'/').filter(|c| !c.is_empty() && *c != b".")
}

/// Joins components with `/`.
pub fn join(parts: &[Vec<u8>]) -> Vec<u8> {
    parts.join(&b'/')
}

/// True when the symlink target `target`, of a link living in the directory
/// `parent` (components below the root), resolves to a place inside the
/// root. `lookup` receives the components of a path below the root and
/// returns the target of the symlink there, or `None` if it is not one.
pub fn stays_inside(
    parent: &[Vec<u8>],
    target: &[u8],
    mut lookup: impl FnMut(&[Vec<u8>]) -> Option<Vec<u8>>,
) -> bool {
    if target.is_empty() || target.starts_with(b"/") {
        return false;
    }
    let mut at: Vec<Vec<u8>> = parent.to_vec();
    let mut pending: Vec<Vec<u8>> = components(target).rev().map(<[u8]>::to_vec).collect();
    let mut hops = 0;
    while let Some(part) = pending.pop() {
        if part == b".." {
            if at.pop().is_none() {
                return false;
            }
            continue;
        }
        at.push(part);
        if let Some(next) = lookup(&at) {
            hops += 1;
            if hops > MAX_HOPS || next.is_empty() || next.starts_with(b"/") {
                return false;
            }
            // A symlink's target is read from the directory that holds it.
            at.pop();
            pending.extend(components(&next).rev().map(<[u8]>::to_vec));
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn check(links: &[(&str, &str)], parent: &str, target: &str) -> bool {
        let map: HashMap<Vec<u8>, Vec<u8>> =
            links.iter().map(|(k, v)| (k.as_bytes().to_vec(), v.as_bytes().to_vec())).collect();
        let parent: Vec<Vec<u8>> = components(parent.as_bytes()).map(<[u8]>::to_vec).collect();
        stays_inside(&parent, target.as_bytes(), |p| map.get(&join(p)).cloned())
    }

    #[test]
    fn plain_targets() {
        assert!(check(&[], "", "a/b"));
        assert!(check(&[], "a/b", "../c"));
        assert!(check(&[], "a/b", "../.."));
        assert!(check(&[], "", "./x/./y"));
        assert!(!check(&[], "", ".."));
        assert!(!check(&[], "a", "../.."));
        assert!(!check(&[], "a", "/etc/passwd"));
        assert!(!check(&[], "a", ""));
        assert!(!check(&[], "", "a/../../b"));
    }

    #[test]
    fn chained_symlinks_are_followed() {
        // `a/b/l` is inside on its own, but `a/b/l/..` is above the root.
        let links = [("a/b/l", "../..")];
        assert!(check(&links, "a/b", "../.."));
        assert!(!check(&links, "", "a/b/l/.."));
        assert!(check(&links, "", "a/b/l/c"));
        // A link to a deep directory makes `..` land deep too.
        let links = [("l", "d1/d2")];
        assert!(check(&links, "", "l/.."));
        assert!(!check(&[("l", "/")], "", "l/x"));
    }

    #[test]
    fn loops_are_refused() {
        assert!(!check(&[("a", "b"), ("b", "a")], "", "a"));
        assert!(!check(&[("a", "a/x")], "", "a"));
    }
}
