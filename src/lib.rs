//! runws: one execution, its own world.
//!
//! The binary's subcommands live in [`cli`] and `cmd`; the library modules
//! below hold the mechanisms, and [`guard`] is the public API a child uses
//! from Rust.

pub mod allowlist;
pub mod cache;
pub mod capture;
pub mod child;
pub mod cli;
pub mod cmd;
pub mod duration;
pub mod envbuild;
pub mod error;
pub mod exit;
pub mod fingerprint;
pub mod fsx;
pub mod git;
pub mod guard;
pub mod lane;
pub mod leftovers;
pub mod manifest;
pub mod osname;
pub mod pgroup;
pub mod ports;
pub mod procinfo;
pub mod reap;
pub mod restore;
pub mod restores;
pub mod sandbox;
pub mod seal;
pub mod shown;
pub mod spool;
pub mod store;
mod sys;
pub mod workspace;
pub mod worktree;
