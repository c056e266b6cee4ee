//! Integration tests: every test drives the real `runws` binary.

mod harness;

mod audit;
mod bad_input;
mod cache;
mod concurrency;
mod environment;
mod exit_codes;
mod git_safety;
mod guard;
mod inputs;
mod lane;
mod lease;
mod listing;
mod ports;
mod reap;
mod reap_git;
mod sandbox;
mod sandbox_init;
mod seal;
mod worktree;
