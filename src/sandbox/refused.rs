//! A protection the sandbox could not set up: the one error of its setup
//! steps, which `--sandbox=try` records and `--sandbox` refuses the run for.

use std::io;

/// A failure to set up one protection, named the way the user asked for it.
#[derive(Debug)]
pub struct Refused {
    /// What could not be set up: "user namespace", "network namespace", ...
    pub protection: &'static str,
    pub why: String,
}

impl Refused {
    pub fn new(protection: &'static str, why: impl Into<String>) -> Refused {
        Refused { protection, why: why.into() }
    }

    pub(super) fn io(protection: &'static str, what: &str, e: io::Error) -> Refused {
        Refused::new(protection, format!("{what}: {e}"))
    }
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "cannot set up the {}: {}", self.protection, self.why)
    }
}
