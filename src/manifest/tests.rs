//! Manifests as earlier versions wrote them still read, every record typed.

use std::path::Path;

use serde_json::Value;

use super::*;

/// A manifest as runws wrote it before its records were typed, with every
/// record present; made by real runs of that version (this machine's paths
/// and host name replaced, and `missing`, which a root runws never lacks,
/// added in the shape `--sandbox=try` records it).
const EVERY_RECORD: &str = include_str!("../../tests/fixtures/manifest_every_record.json");

fn parsed(text: &str) -> Result<Manifest> {
    parse(text.as_bytes(), Path::new("manifest.json"))
}

#[test]
fn a_manifest_with_every_record_reads_typed_and_writes_back_the_same() {
    let m = parsed(EVERY_RECORD).unwrap();
    assert!(m.extra.is_empty(), "untyped: {:?}", m.extra.keys().collect::<Vec<_>>());

    let lease = m.lease.as_ref().unwrap();
    assert!(lease.lost_at.is_some() && lease.token == 1 && lease.extra.is_empty());
    let worktree = m.worktree.as_ref().unwrap();
    assert!(worktree.branch == "runws/r-full" && worktree.extra.is_empty());
    let sandbox = m.sandbox.as_ref().unwrap();
    assert!(!sandbox.layout.is_empty() && sandbox.missing.len() == 2 && sandbox.extra.is_empty());
    assert_eq!(sandbox.allow_import.as_deref(), Some(&["r-producer".to_string()][..]));
    assert_eq!(m.allow_import.as_deref(), Some(&["r-producer".to_string()][..]));
    assert_eq!(m.audit.as_ref().unwrap().changes.len(), 1);
    let checkpoint = m.checkpoint.as_ref().unwrap();
    assert!(checkpoint.source == Source::Receipt && checkpoint.extra.is_empty());
    assert_eq!(m.held, Some(false));
    let refused = m.refused.as_ref().unwrap();
    assert!(refused.len() == 1 && refused[0].call == "import" && refused[0].extra.is_empty());
    let restored = m.restored.as_ref().unwrap();
    assert!(restored[0].why.is_some() && !restored[1].dropped.is_empty() && restored[1].fields == ["job"]);
    assert!(m.truncated.as_ref().unwrap()["outputs"] > 0);
    let kinds: Vec<&ClaimKind> = m.claims.iter().map(|c| &c.kind).collect();
    assert_eq!(kinds, [&ClaimKind::Worktree, &ClaimKind::Branch, &ClaimKind::Path, &ClaimKind::Pgid]);

    let again: Value = serde_json::from_slice(&m.to_json()).unwrap();
    let before: Value = serde_json::from_str(EVERY_RECORD).unwrap();
    assert_eq!(again, before);
}

/// What a newer version adds, at the top or inside a record, is kept by a
/// rewrite of this one.
#[test]
fn fields_of_a_newer_version_are_kept_where_they_were() {
    let mut v: Value = serde_json::from_str(EVERY_RECORD).unwrap();
    v["future"] = 1.into();
    for record in ["lease", "worktree", "sandbox", "checkpoint"] {
        v[record]["future"] = 2.into();
    }
    v["refused"][0]["future"] = 3.into();
    v["restored"][0]["future"] = 4.into();
    v["checkpoint"]["source"] = "elsewhere".into();
    let m = parsed(&v.to_string()).unwrap();
    assert_eq!(m.extra.keys().collect::<Vec<_>>(), ["future"]);
    assert!(m.lease.as_ref().unwrap().extra.contains_key("future"));
    assert_eq!(m.checkpoint.as_ref().unwrap().source, Source::Other("elsewhere".into()));
    let again: Value = serde_json::from_slice(&m.to_json()).unwrap();
    assert_eq!(again, v);
}

/// A record that does not read as its type refuses the manifest, and the
/// error names it; a claim of an unknown kind is named as before.
#[test]
fn a_forged_record_is_named() {
    let base: Value = serde_json::from_str(EVERY_RECORD).unwrap();
    let cases: [(&str, Value); 10] = [
        ("lease", 5.into()),
        ("worktree", "x".into()),
        ("sandbox", serde_json::json!({"kind": "jail"})),
        ("allow_import", serde_json::json!([5])),
        ("audit", serde_json::json!([])),
        ("checkpoint", serde_json::json!({"source": 1})),
        ("held", "yes".into()),
        ("refused", serde_json::json!([5])),
        ("restored", serde_json::json!({})),
        ("truncated", serde_json::json!({"outputs": -1})),
    ];
    for (field, forged) in cases {
        let mut v = base.clone();
        v[field] = forged;
        let e = parsed(&v.to_string()).unwrap_err().to_string();
        assert!(e.contains(&format!("field `{field}`: ")), "{field}: {e}");
        assert!(!e.contains('\n'), "{e}");
    }
    let mut v = base.clone();
    v["claims"][2]["kind"] = "device".into();
    let e = parsed(&v.to_string()).unwrap_err().to_string();
    assert!(e.contains("field `claims[2].kind`: `device` is not path, branch, worktree or pgid"), "{e}");
    // A null record reads as none.
    let mut v = base;
    v["lease"] = Value::Null;
    assert!(parsed(&v.to_string()).unwrap().lease.is_none());
}
