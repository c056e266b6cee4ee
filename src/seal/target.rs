//! What a seal seals and where its archive goes, shared by the seal into a
//! directory and the seal into a bucket.

use std::path::Path;

use crate::archive_store::Place;

/// What is sealed, for the receipt: a run of a job, or a promotion lane.
#[derive(Debug, Clone, Copy)]
pub enum Subject<'a> {
    Run { run_id: &'a str, job: &'a str },
    Lane { lane: &'a str },
}

/// One directory to seal and where its archive goes.
#[derive(Debug, Clone, Copy)]
pub struct Target<'a> {
    /// The directory whose `include`d entries are packed.
    pub src: &'a Path,
    /// Where the archive, its checksum file and receipt go.
    pub dest: &'a Place,
    /// A directory on this disk a seal to a bucket stages under
    /// (`ROOT/uploads`).
    pub scratch: &'a Path,
    /// The archive's name without its extension.
    pub stem: &'a str,
    pub subject: Subject<'a>,
}

impl Target<'_> {
    /// What a taken archive name means, for the refusal.
    pub fn sealed_already(&self) -> String {
        match self.subject {
            Subject::Run { run_id, .. } => format!("run `{run_id}` is sealed"),
            Subject::Lane { lane } => format!("lane `{lane}` is sealed"),
        }
    }
}
