//! The local directory written in place ([`crate::apply::write_files`]: each file replaced
//! atomically, and only if it is still as it was planned).

use std::path::Path;

use crate::error_chain::Failure;
use crate::plan::{FileUpdate, Problem, ProblemReason};

/// Writes `files` under `root`: the number of files written, and the problem that stopped it
/// if one did (reported like a failing repository: the rest of the cycle goes on).
pub fn write_local(root: &Path, files: &[FileUpdate]) -> (usize, Option<Problem>) {
    match crate::apply::write_files(root, files) {
        Ok(written) => (written.len(), None),
        Err(e) => (
            0,
            Some(Problem::new(ProblemReason::WriteFailed(Failure::new(e)))),
        ),
    }
}
