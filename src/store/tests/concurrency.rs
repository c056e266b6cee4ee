//! Many holders, one key: tokens strictly increase, holds never overlap, and
//! the sink never goes back to an older token.

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use super::{Fixture, Rng, assert_stale};
use crate::store::PublishOutcome;

const THREADS: usize = 4;
const ROUNDS: usize = 20;

/// One grant as its holder saw it: from the moment acquire returned to just
/// before release was called, which lies inside the lease.
struct Hold {
    token: u64,
    from: Instant,
    to: Instant,
}

pub(super) fn concurrent_holders_never_overlap(f: &dyn Fixture) {
    let key = f.key("contended");
    let holds = Mutex::new(Vec::new());
    // Workers still running; each one's guard counts it out even when it
    // panics, so the watcher always stops and the failure is reported.
    let running = AtomicUsize::new(THREADS);
    std::thread::scope(|scope| {
        let watcher = scope.spawn(|| {
            let mut store = f.open();
            let mut last = 0;
            let mut reads = 0;
            while running.load(Ordering::Acquire) > 0 {
                if let Some((fence, bytes)) = store.read_published(&key).unwrap() {
                    assert!(fence >= last, "the sink went back from fence {last} to {fence}");
                    assert!(
                        String::from_utf8(bytes).unwrap().ends_with(&format!("-{fence}")),
                        "bytes of another fence"
                    );
                    last = fence;
                }
                reads += 1;
            }
            reads
        });
        let workers: Vec<_> = (0..THREADS)
            .map(|i| {
                let (key, holds, running) = (&key, &holds, &running);
                scope.spawn(move || {
                    let _counted = CountsOut(running);
                    let mut store = f.open();
                    let mut rng = Rng::new(i as u64);
                    let holder = format!("worker-{i}");
                    let mut mine = Vec::new();
                    for _ in 0..ROUNDS {
                        let lease = store.acquire(key, &holder, Duration::from_secs(5), Duration::from_secs(60)).unwrap();
                        let from = Instant::now();
                        // The previous holder published with a lower token.
                        if let Some((fence, _)) = store.read_published(key).unwrap() {
                            assert!(fence < lease.token, "fence {fence} already at or past token {}", lease.token);
                        }
                        let payload = format!("{holder}-{}", lease.token);
                        assert_eq!(store.publish(key, lease.token, payload.as_bytes()).unwrap(), PublishOutcome::Written);
                        std::thread::sleep(rng.millis(3));
                        let to = Instant::now();
                        store.release(key, &holder).unwrap();
                        // Once released, the same token with other bytes is refused
                        // whether or not someone else has published since.
                        let e = store.publish(key, lease.token, b"late-0").unwrap_err();
                        assert!(matches!(e, crate::error::Error::StaleFence { offered, .. } if offered == lease.token));
                        mine.push(Hold { token: lease.token, from, to });
                        std::thread::sleep(rng.millis(2));
                    }
                    assert!(mine.windows(2).all(|w| w[0].token < w[1].token), "{holder}'s tokens did not increase");
                    holds.lock().unwrap().extend(mine);
                })
            })
            .collect();
        for w in workers {
            w.join().unwrap();
        }
        assert!(watcher.join().unwrap() > 0);
    });

    let mut holds = holds.into_inner().unwrap();
    holds.sort_by_key(|h| h.token);
    let tokens: Vec<u64> = holds.iter().map(|h| h.token).collect();
    let expected: Vec<u64> = (1..=(THREADS * ROUNDS) as u64).collect();
    assert_eq!(tokens, expected, "tokens were skipped or issued twice");
    for w in holds.windows(2) {
        assert!(
            w[0].to <= w[1].from,
            "token {} was granted while token {} was still held",
            w[1].token,
            w[0].token
        );
    }
    let mut store = f.open();
    let last = (THREADS * ROUNDS) as u64;
    assert_eq!(store.show(&key).unwrap().token, last);
    assert_eq!(store.read_published(&key).unwrap().map(|(fence, _)| fence), Some(last));
    assert_stale(store.publish(&key, last - 1, b"old").unwrap_err(), last - 1, last);
}

struct CountsOut<'a>(&'a AtomicUsize);

impl Drop for CountsOut<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Release);
    }
}
