//! The `runws` binary. Its start-up is on the path of every job, so it skips
//! Rust's own runtime set-up (which reads /proc/self/maps to place a guard
//! page for the main thread and installs stack-overflow handlers) and does
//! here the two parts of it runws relies on: descriptors 0 to 2 are open
//! (on /dev/null when the caller closed them), and SIGPIPE is ignored so a
//! closed pipe is an error runws reports, not a death. Arguments and the
//! environment reach `std::env` as usual (glibc hands them over before
//! `main`). A stack overflow ends runws with SIGSEGV instead of a message.
// A test build of this crate keeps the test harness's own `main`.
#![cfg_attr(not(test), no_main)]

#[cfg(not(test))]
mod entry {
    use std::ffi::{c_char, c_int};

    use nix::libc;

    #[unsafe(no_mangle)]
    pub extern "C" fn main(_argc: c_int, _argv: *const *const c_char) -> c_int {
        open_standard_descriptors();
        // SAFETY: setting a signal's disposition to SIG_IGN installs no handler.
        unsafe {
            libc::signal(libc::SIGPIPE, libc::SIG_IGN);
        }
        // A panic is runws failing: report it as such (the panic message is
        // already on stderr) instead of unwinding out of a C entry point.
        let code = std::panic::catch_unwind(runws::cmd::main).unwrap_or(runws::exit::FAILURE);
        // std's exit flushes stdout only if no thread holds it (a capture
        // tee left writing to a stalled reader must not hang runws here).
        std::process::exit(i32::from(code))
    }

    /// Opens /dev/null on whichever of descriptors 0, 1 and 2 is closed, so
    /// that nothing runws opens later lands there and is mistaken for one.
    fn open_standard_descriptors() {
        let mut fds = [0, 1, 2].map(|fd| libc::pollfd { fd, events: 0, revents: 0 });
        // SAFETY: poll reads and writes only the three entries of `fds`.
        let polled = unsafe { libc::poll(fds.as_mut_ptr(), 3, 0) };
        for f in &fds {
            let closed = if polled >= 0 {
                f.revents & libc::POLLNVAL != 0
            } else {
                // SAFETY: F_GETFD only queries the descriptor's flags.
                unsafe { libc::fcntl(f.fd, libc::F_GETFD) == -1 }
            };
            // The lowest free descriptor is the closed one, as the
            // descriptors below it are open.
            // SAFETY: open of a constant path.
            if closed && unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDWR) } != f.fd {
                std::process::abort();
            }
        }
    }
}
