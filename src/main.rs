//! The `runws` binary. Rust's own start-up makes sure descriptors 0 to 2
//! are open (on /dev/null when the caller closed them), so nothing runws
//! opens later lands there and is mistaken for one, and ignores SIGPIPE, so
//! a closed pipe is an error runws reports, not a death.

fn main() {
    // A panic is runws failing: report it as such (the panic message is
    // already on stderr) instead of Rust's 101.
    let code = std::panic::catch_unwind(runws::cmd::main).unwrap_or(runws::exit::FAILURE);
    // std's exit flushes stdout only if no thread holds it (a capture tee
    // left writing to a stalled reader must not hang runws here).
    std::process::exit(i32::from(code))
}
