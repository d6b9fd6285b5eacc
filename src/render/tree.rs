//! A repository's files written out to a temporary directory for the tools to read, as the
//! base has them or with a change's files over them. Symbolic links are not followed (a
//! [`Files`] tree lists none as files).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::RenderError;
use crate::files::Files;

/// A tree on disk, removed when dropped.
#[derive(Debug)]
pub struct Materialised {
    dir: tempfile::TempDir,
}

impl Materialised {
    pub fn path(&self) -> &Path {
        self.dir.path()
    }
}

/// Writes every file of `files` into a new temporary directory, with `over` (path → new text)
/// replacing or adding files.
pub fn materialise(
    files: &dyn Files,
    over: &BTreeMap<PathBuf, String>,
) -> Result<Materialised, RenderError> {
    let dir = tempfile::Builder::new()
        .prefix("tagpilot-render-")
        .tempdir()
        .map_err(|source| RenderError::Write {
            path: std::env::temp_dir(),
            source,
        })?;
    let root = dir.path();
    let mut all: Vec<PathBuf> = files.manifests().to_vec();
    all.extend(files.other_files());
    for path in all {
        if over.contains_key(&path) || !files.is_file(&path) {
            continue;
        }
        let bytes = files.read(&path).map_err(|e| RenderError::Read {
            path: path.clone(),
            source: std::io::Error::other(e.to_string()),
        })?;
        write(root, &path, &bytes)?;
    }
    for (path, text) in over {
        write(root, path, text.as_bytes())?;
    }
    Ok(Materialised { dir })
}

fn write(root: &Path, relative: &Path, bytes: &[u8]) -> Result<(), RenderError> {
    let target = root.join(relative);
    let error = |source| RenderError::Write {
        path: relative.to_path_buf(),
        source,
    };
    if let Some(parent) = target.parent() {
        std::fs::create_dir_all(parent).map_err(error)?;
    }
    std::fs::write(&target, bytes).map_err(error)
}
