//! Acquire+release round trips per second against a store.
//!
//!     cargo run --release --example store_bench -- URL [CLIENTS] [SECONDS] [same|distinct]
//!
//! Each client is a thread with its own store handle (its own connection for
//! PostgreSQL). `same` makes every client contend for one key; `distinct`
//! (the default) gives each client its own key.

use std::time::{Duration, Instant};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let url = args.first().ok_or("usage: store_bench URL [CLIENTS] [SECONDS] [same|distinct]")?.clone();
    let clients: usize = args.get(1).map(|s| s.parse()).transpose()?.unwrap_or(1);
    let seconds: f64 = args.get(2).map(|s| s.parse()).transpose()?.unwrap_or(5.0);
    let same = args.get(3).map(String::as_str) == Some("same");
    let run = uuid::Uuid::now_v7();
    let started = Instant::now();
    let until = started + Duration::from_secs_f64(seconds);
    let counts = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..clients)
            .map(|i| {
                let url = url.clone();
                scope.spawn(move || -> Result<u64, runws::error::Error> {
                    let mut store = runws::store::open(&url)?;
                    let key = if same { format!("bench/{run}") } else { format!("bench/{run}/{i}") };
                    let holder = format!("bench-{i}");
                    let mut n = 0;
                    while Instant::now() < until {
                        store.acquire(&key, &holder, Duration::from_secs(10), Duration::from_secs(60))?;
                        store.release(&key, &holder)?;
                        n += 1;
                    }
                    Ok(n)
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().expect("a bench client panicked"))
            .collect::<Result<Vec<u64>, _>>()
    })?;
    let elapsed = started.elapsed().as_secs_f64();
    let total: u64 = counts.iter().sum();
    println!(
        "{} clients on {}: {total} round trips in {elapsed:.2}s = {:.0}/s",
        clients,
        if same { "one shared key" } else { "distinct keys" },
        total as f64 / elapsed
    );
    Ok(())
}
