//! Rules about runws's own source that its build alone does not show.

use std::path::{Path, PathBuf};

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Every `unsafe` of runws is in `src/sys`, behind safe functions: no other
/// file so much as names it (Cargo.toml denies `unsafe_code` elsewhere, but
/// an `#[allow]` would get past that).
#[test]
fn unsafe_code_lives_only_in_the_sys_module() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let sys = src.join("sys");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut found = Vec::new();
    for file in files.iter().filter(|f| !f.starts_with(&sys)) {
        let text = std::fs::read_to_string(file).unwrap();
        for (i, line) in text.lines().enumerate() {
            if line.contains("unsafe") {
                found.push(format!(
                    "{}:{}: {}",
                    file.strip_prefix(&src).unwrap().display(),
                    i + 1,
                    line.trim()
                ));
            }
        }
    }
    assert!(found.is_empty(), "`unsafe` outside src/sys:\n{}", found.join("\n"));
    // And the lints that hold it so stay in place.
    let manifest = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml")).unwrap();
    assert!(manifest.contains("unsafe_code = \"deny\""), "Cargo.toml no longer denies unsafe_code");
    assert!(
        manifest.contains("undocumented_unsafe_blocks = \"deny\""),
        "Cargo.toml no longer requires SAFETY comments"
    );
    let sys_root = std::fs::read_to_string(sys.join("mod.rs")).unwrap();
    assert!(sys_root.contains("#![allow(unsafe_code)]"));
}

/// ROOT's layout is named in one place, `workspace::Root`: no other file
/// joins one of its directory names onto a path (tests build their own).
#[test]
fn root_layout_is_named_only_in_workspace() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let names = ["runs", "store", "archive", "lanes", "restores", "quarantine", "locks", "ports.ledger"];
    let mut found = Vec::new();
    for file in &files {
        let rel = file.strip_prefix(&src).unwrap();
        // Unit tests (a `tests.rs` beside its module) build their own.
        if rel == Path::new("workspace.rs") || rel.components().any(|c| c.as_os_str() == "tests.rs") {
            continue;
        }
        let text = std::fs::read_to_string(file).unwrap();
        for (i, line) in text.lines().enumerate() {
            if names
                .iter()
                .any(|n| line.contains(&format!("join(\"{n}\")")) || line.contains("\"ports.ledger\""))
            {
                found.push(format!("{}:{}: {}", rel.display(), i + 1, line.trim()));
            }
        }
    }
    assert!(found.is_empty(), "ROOT's layout spelled outside workspace.rs:\n{}", found.join("\n"));
}

/// The modules of the crate (each top-level file or directory of `src/`)
/// import one another without a circle: no module uses one that uses it
/// back, directly or through others. Read from the `crate::` paths of the
/// code outside comments and unit tests.
#[test]
fn no_module_imports_one_that_imports_it_back() {
    use std::collections::{BTreeMap, BTreeSet};
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut uses: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in &files {
        let rel = file.strip_prefix(&src).unwrap();
        let top = rel
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_string_lossy()
            .trim_end_matches(".rs")
            .to_string();
        if matches!(top.as_str(), "lib" | "main") || rel.components().any(|c| c.as_os_str() == "tests.rs") {
            continue;
        }
        let text = std::fs::read_to_string(file).unwrap();
        let code = text.split("#[cfg(test)]").next().unwrap();
        for line in code.lines().map(|l| l.split("//").next().unwrap()) {
            for (at, _) in line.match_indices("crate::") {
                let name: String =
                    line[at + 7..].chars().take_while(|c| c.is_ascii_lowercase() || *c == '_').collect();
                if !name.is_empty() && name != top {
                    uses.entry(top.clone()).or_default().insert(name);
                }
            }
        }
    }
    // A depth-first search; a module met again on the current path closes a circle.
    fn visit(
        m: &str,
        uses: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|p| p == m) {
            let mut circle = path[at..].to_vec();
            circle.push(m.to_string());
            return Some(circle);
        }
        if !done.insert(m.to_string()) {
            return None;
        }
        path.push(m.to_string());
        for next in uses.get(m).into_iter().flatten() {
            if let Some(c) = visit(next, uses, path, done) {
                return Some(c);
            }
        }
        path.pop();
        None
    }
    let mut done = BTreeSet::new();
    for m in uses.keys() {
        if let Some(circle) = visit(m, &uses, &mut Vec::new(), &mut done) {
            panic!("modules import each other in a circle: {}", circle.join(" -> "));
        }
    }
    assert!(uses.len() > 20, "read too few modules: {uses:?}");
}
