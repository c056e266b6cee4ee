//! How runws is built: a position-independent binary, whose code lands at a
//! new random address at every start (an attacker feeding it a crafted
//! archive cannot count on where anything is), and a lean build without
//! PostgreSQL that says so when a store asks for it.

use std::io::Read;

use crate::harness::*;

/// The ELF header's type: ET_EXEC is a binary linked at a fixed address,
/// ET_DYN a position-independent one (dynamically linked or static-pie).
#[test]
fn the_binary_is_position_independent() {
    let mut header = [0u8; 18];
    std::fs::File::open(BIN).unwrap().read_exact(&mut header).unwrap();
    assert_eq!(&header[..4], b"\x7fELF");
    let e_type = match header[5] {
        1 => u16::from_le_bytes([header[16], header[17]]),
        _ => u16::from_be_bytes([header[16], header[17]]),
    };
    assert_eq!(e_type, 3, "runws is linked at a fixed address (ELF type {e_type}, want 3, ET_DYN)");
}

/// runws maps no libm: it would be one more shared library mapped and
/// bound at every start, for the one function runws used from it (see
/// BENCHMARKS.md, "Start-up by build"). Seen from the command it runs.
#[test]
fn runws_maps_no_math_library() {
    let env = Env::new();
    let out = env.sh("nolibm", "grep -c 'libm[.-]' /proc/$PPID/maps; grep -c ' /.*runws$' /proc/$PPID/maps");
    let counts: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(counts.len(), 2, "{}\n{}", out.stdout, out.stderr);
    assert_ne!(counts[1], "0", "runws's own mapping not found: the check would see nothing");
    assert_eq!(counts[0], "0", "runws maps libm (a floating-point function of the C library's is used)");
}

/// Where runws's own code is mapped, as seen by the command it runs (its
/// parent): the first mapping of the executable in /proc/PPID/maps.
fn runws_load_address(env: &Env, id: &str) -> String {
    let out = env.sh(id, "grep -m1 ' /.*runws$' /proc/$PPID/maps | cut -d- -f1");
    out.ok();
    let addr = out.stdout.trim().to_string();
    assert!(!addr.is_empty(), "runws's mapping not found in its maps\n{}", out.stderr);
    addr
}

/// The command, the adversary here, looks where runws is mapped: two starts
/// must not put runws's code at the same address.
#[test]
fn runws_is_mapped_at_a_new_address_each_start() {
    let randomised = std::fs::read_to_string("/proc/sys/kernel/randomize_va_space").unwrap_or_default();
    if randomised.trim() == "0" {
        eprintln!("skipped: address space randomisation is off on this host");
        return;
    }
    let env = Env::new();
    let mut seen = std::collections::HashSet::new();
    for i in 0..4 {
        seen.insert(runws_load_address(&env, &format!("aslr-{i}")));
    }
    // Four starts at one address by chance: about 2^-84 with 28 bits of entropy.
    assert!(seen.len() > 1, "runws was mapped at {seen:?} at every start");
}

/// A build without the `postgres` feature refuses a PostgreSQL store in one
/// line that names the feature, and never shows the URL's password.
#[cfg(not(feature = "postgres"))]
#[test]
fn a_lean_build_refuses_a_postgres_store_naming_the_feature() {
    let env = Env::new();
    let secret = fake_secret("pw");
    for url in [format!("postgres://u:{secret}@127.0.0.1:1/db"), format!("postgresql://u:{secret}@h/db")] {
        let out = env.run(&["--store", &url, "lease", "show", "k"]);
        out.code(125).one_line_error().stderr_has("`postgres` feature");
        assert!(!out.stderr.contains(&secret), "{}", out.stderr);
        // A store this build cannot use is a mistake, not an outage: a
        // publish does not fall back to the directory's own fences.
        let sink = env.path("sink");
        let out = env
            .cmd(&["--store", &url, "publish", "k", "-", "--fence", "5", "--to"])
            .arg(&sink)
            .output()
            .unwrap();
        Out::from(out).code(125).one_line_error().stderr_has("`postgres` feature");
        assert!(!sink.join("k").exists(), "a refused store still published");
    }
}

/// Built without the `s3` feature, runws refuses every `s3://` place in one
/// line that names the feature, before anything is packed or read; a
/// directory as the archive store still works.
#[cfg(not(feature = "s3"))]
#[test]
fn a_lean_build_refuses_an_s3_archive_store_naming_the_feature() {
    let env = Env::new();
    env.run(&["run", "--run-id", "r1", "--", "true"]).ok();
    for args in [
        &["seal", "r1", "--to", "s3://bucket-one/p"][..],
        &["seal", "r1", "--archive-store", "s3://bucket-one/p"][..],
        &["verify", "s3://bucket-one/p/r1.tar.zst"][..],
        &["archives", "--archive-store", "s3://bucket-one/p"][..],
    ] {
        env.run(args).code(125).one_line_error().stderr_has("`s3` cargo feature");
    }
    assert_eq!(env.manifest("r1")["checkpoint"], serde_json::Value::Null, "nothing recorded");
    let dir = env.path("share");
    env.run(&["seal", "r1", "--archive-store", dir.to_str().unwrap()]).ok();
    assert!(dir.join("true/r1.tar.zst").is_file());
}
