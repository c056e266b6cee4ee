//! Integration tests: every test drives the real `runws` binary.
// Some tests act as the command would, through raw system calls (a seccomp
// filter installed before exec, a byte-range lock); runws's own `unsafe`
// stays in its `sys` module.
#![allow(unsafe_code)]

mod harness;

mod absurd_values;
mod allow_import;
mod audit;
mod bad_input;
mod broker_memory;
mod build;
mod cache;
mod concurrency;
mod egress;
mod egress_attack;
mod egress_tools;
mod environment;
mod examples;
mod exit_codes;
mod final_record;
mod fleet;
mod git_safety;
mod guard;
mod guard_membership;
mod help;
mod hostile_index;
mod inputs;
mod landlock;
mod lane;
mod lease;
mod limits;
mod listing;
mod machine;
mod many_inputs;
mod monitoring;
mod names;
mod pg_tls;
mod ports;
mod privacy;
mod progress;
mod reading;
mod reap;
mod reap_crowded;
mod reap_forged;
mod reap_git;
mod reap_leftovers;
mod reap_procs;
mod reap_race;
mod record_growth;
mod records;
mod replay;
mod restore;
mod run_index;
mod s3;
mod sandbox;
mod sandbox_host;
mod sandbox_init;
mod sandbox_lease;
mod says_why;
mod scan_archives;
mod scan_recall;
mod seal;
mod seal_large;
mod source_rules;
mod untrusted_manifest;
mod where_it_runs;
mod worktree;
