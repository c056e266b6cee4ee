//! runws: one execution, its own world.
//!
//! The binary's subcommands live in `cli` and [`cmd`]; the library modules
//! below hold the mechanisms, and [`guard`] is the public API a child uses
//! from Rust. Only what the binary, the examples and that API need is
//! public, so code nothing uses is reported as dead.

mod allowlist;
mod archive_store;
mod cache;
mod capture;
mod cgroup;
mod child;
mod cli;
pub mod cmd;
mod duration;
mod egress;
mod envbuild;
pub mod error;
pub mod exit;
mod fingerprint;
mod fleet;
mod fsx;
mod git;
pub mod guard;
mod hex;
mod lane;
mod leftovers;
pub mod manifest;
mod metrics;
mod osname;
mod pgroup;
mod ping;
mod ports;
mod procinfo;
mod progress;
mod reap;
mod replay;
mod restore;
mod restores;
mod run;
mod runindex;
mod sandbox;
mod seal;
mod shown;
mod spool;
pub mod store;
mod sys;
mod workspace;
mod worktree;
