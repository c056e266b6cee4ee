//! runws: one execution, its own world.
//!
//! The binary's subcommands live in [`cli`] and `cmd`; the library modules
//! below hold the mechanisms, and [`guard`] is the public API a child uses
//! from Rust.

pub mod error;
pub mod duration;
pub mod exit;
pub mod fsx;
pub mod manifest;
pub mod procinfo;
pub mod store;
pub mod workspace;
