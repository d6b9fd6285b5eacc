//! Writes a plan's file updates to disk: the only place `tagpilot apply` touches the work tree
//! when no git repository is configured.
//!
//! Each file is replaced atomically (a temporary file in the same directory, then a rename), so a
//! crash leaves either the old or the new file, never half of one. A file that changed on disk
//! since it was planned is not overwritten: the plan was made for other bytes.

use std::io::Write;
use std::path::{Path, PathBuf};

use crate::plan::FileUpdate;

#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    #[error("{path}: changed on disk since it was planned; run tagpilot again")]
    Changed { path: PathBuf },
    #[error("cannot write {path}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// Writes every update under `root`; returns the files written. Stops at the first failure: the
/// files already written are complete, the rest untouched.
pub fn write_files(root: &Path, files: &[FileUpdate]) -> Result<Vec<PathBuf>, ApplyError> {
    let mut written = Vec::new();
    for f in files {
        let path = root.join(&f.path);
        write_one(&path, f)?;
        written.push(f.path.clone());
    }
    Ok(written)
}

fn write_one(path: &Path, f: &FileUpdate) -> Result<(), ApplyError> {
    let io = |source| ApplyError::Write {
        path: path.to_path_buf(),
        source,
    };
    if !holds(path, f.original.as_bytes()).map_err(io)? {
        return Err(ApplyError::Changed {
            path: path.to_path_buf(),
        });
    }
    let dir = path.parent().unwrap_or(Path::new("."));
    let permissions = std::fs::metadata(path).map_err(io)?.permissions();
    let mut tmp = tempfile::NamedTempFile::new_in(dir).map_err(io)?;
    tmp.write_all(f.updated.as_bytes()).map_err(io)?;
    tmp.as_file().sync_all().map_err(io)?;
    tmp.as_file().set_permissions(permissions).map_err(io)?;
    tmp.persist(path).map_err(|e| io(e.error))?;
    Ok(())
}

/// Whether the file at `path` holds exactly `expected`, compared a block at a time: reading it
/// whole would hold a third copy of a large file beside the plan's two.
fn holds(path: &Path, expected: &[u8]) -> std::io::Result<bool> {
    use std::io::Read;
    let mut file = std::fs::File::open(path)?;
    if file.metadata()?.len() != expected.len() as u64 {
        return Ok(false);
    }
    let mut block = vec![0u8; 64 * 1024];
    let mut rest = expected;
    loop {
        let n = file.read(&mut block)?;
        if n == 0 {
            return Ok(rest.is_empty());
        }
        match rest.split_at_checked(n) {
            Some((head, tail)) if head == &block[..n] => rest = tail,
            _ => return Ok(false),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn update(path: &str, original: &str, updated: &str) -> FileUpdate {
        FileUpdate {
            path: path.into(),
            original: original.into(),
            updated: updated.into(),
            edits: Vec::new(),
        }
    }

    #[test]
    fn replaces_files_and_keeps_permissions() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a.yaml");
        std::fs::write(&p, "image: app:1\n").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o640)).unwrap();
        write_files(
            dir.path(),
            &[update("a.yaml", "image: app:1\n", "image: app:2\n")],
        )
        .unwrap();
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "image: app:2\n");
        assert_eq!(
            std::fs::metadata(&p).unwrap().permissions().mode() & 0o777,
            0o640
        );
        // No temporary files left behind.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn a_file_changed_since_planning_is_not_overwritten() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a.yaml");
        std::fs::write(&p, "image: app:1 # edited by a human\n").unwrap();
        let err = write_files(
            dir.path(),
            &[update("a.yaml", "image: app:1\n", "image: app:2\n")],
        )
        .unwrap_err();
        assert!(matches!(err, ApplyError::Changed { .. }), "{err}");
        // Same length, one byte different, past the first block.
        let mut original = vec![b'#'; 200 * 1024];
        original.push(b'\n');
        std::fs::write(&p, &original).unwrap();
        let mut changed = original.clone();
        changed[150 * 1024] = b'!';
        let as_text = |b: Vec<u8>| String::from_utf8(b).unwrap();
        assert!(holds(&p, &original).unwrap());
        assert!(!holds(&p, &changed).unwrap());
        assert!(!holds(&p, &original[1..]).unwrap());
        let err =
            write_files(dir.path(), &[update("a.yaml", &as_text(changed), "x\n")]).unwrap_err();
        assert!(matches!(err, ApplyError::Changed { .. }), "{err}");
        std::fs::write(&p, "image: app:1 # edited by a human\n").unwrap();
        assert!(err.to_string().contains("a.yaml"));
        assert_eq!(
            std::fs::read_to_string(&p).unwrap(),
            "image: app:1 # edited by a human\n"
        );
    }
}
