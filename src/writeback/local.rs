//! The local directory written in place ([`crate::apply::write_files`]: each file replaced
//! atomically, and only if it is still as it was planned).

use std::path::Path;

use crate::plan::{FileUpdate, Problem};

/// Writes `files` under `root`; the number of files written, or the problem that stopped it
/// (reported like a failing repository: the rest of the cycle goes on).
pub fn write_local(root: &Path, files: &[FileUpdate]) -> Result<usize, Problem> {
    crate::apply::write_files(root, files)
        .map(|written| written.len())
        .map_err(|e| Problem {
            message: crate::error_chain::chain(&e),
            ..Default::default()
        })
}
