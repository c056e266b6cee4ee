//! What a sandboxed command asks of runws over the guard socket costs runws
//! bounded memory, however large the outputs and however many the calls.

use std::process::Stdio;
use std::time::Duration;

use crate::harness::*;
use crate::sandbox::{Who, skip};

/// The most resident memory process `pid` has used, in KiB.
fn peak_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).expect("VmHWM in /proc/PID/status");
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// A sandboxed command writes a 24 MB output, then reads it back with
/// three `get`s at once: each reaches it whole, and runws's resident
/// memory grows by far less than one copy of it.
#[test]
fn concurrent_gets_of_a_large_output_do_not_grow_runws_memory() {
    if skip(Who::Me, "concurrent_gets_of_a_large_output_do_not_grow_runws_memory") {
        return;
    }
    const SIZE: u64 = 24_000_000;
    let env = Env::new();
    let script = format!(
        "head -c {SIZE} /dev/zero | runws put big && touch \"$RUNWS_DIR/work/put\" && \
         for i in 1 2 3; do runws get big | wc -c > \"$RUNWS_DIR/work/got$i\" & done; wait; \
         touch \"$RUNWS_DIR/work/got\"; \
         while [ ! -e \"$RUNWS_DIR/work/end\" ]; do sleep 0.02; done"
    );
    let child = env
        .cmd(&["run", "--sandbox", "--run-id", "m", "--", "sh", "-c", &script])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let work = env.run_dir("m").join("work");
    let put = wait_until(Duration::from_secs(60), || work.join("put").exists());
    let base = put.then(|| peak_kib(child.id()));
    let got = put && wait_until(Duration::from_secs(60), || work.join("got").exists());
    let peak = got.then(|| peak_kib(child.id()));
    std::fs::write(work.join("end"), "").unwrap();
    let out = Out::from(child.wait_with_output().unwrap());
    assert!(put && got, "the command did not get that far: {out:?}");
    out.ok();
    for i in 1..=3 {
        let n = std::fs::read_to_string(work.join(format!("got{i}"))).unwrap();
        assert_eq!(n.trim(), SIZE.to_string(), "get {i} printed {n} bytes");
    }
    let (base, peak) = (base.unwrap(), peak.unwrap());
    let grown_mib = (peak.saturating_sub(base)) / 1024;
    assert!(grown_mib < 12, "runws grew by {grown_mib} MiB serving three gets of {SIZE} bytes");
}
