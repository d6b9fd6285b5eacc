//! One process per state directory: an exclusive lock on a file in it, held for the process's
//! life. The operating system releases it when the process ends, however it ends, so a crash
//! never leaves a stale lock behind.

use std::fs::{File, OpenOptions, TryLockError};
use std::path::{Path, PathBuf};

/// The lock file's name inside the state directory.
pub const LOCK_FILE: &str = "tagpilot.lock";

#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error(
        "another tagpilot process is using the state directory {}: its lock {} is held; \
         give each process its own --state-dir",
        dir.display(),
        dir.join(LOCK_FILE).display()
    )]
    Held { dir: PathBuf },
    #[error("state directory {}", dir.display())]
    Io {
        dir: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// The held lock; dropping it releases the directory.
#[derive(Debug)]
pub struct StateLock {
    _file: File,
    dir: PathBuf,
}

impl StateLock {
    /// Creates `dir` if needed and takes its lock, or says who holds it.
    pub fn acquire(dir: &Path) -> Result<StateLock, LockError> {
        let io = |source| LockError::Io {
            dir: dir.to_path_buf(),
            source,
        };
        std::fs::create_dir_all(dir).map_err(io)?;
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(dir.join(LOCK_FILE))
            .map_err(io)?;
        match file.try_lock() {
            Ok(()) => Ok(StateLock {
                _file: file,
                dir: dir.to_path_buf(),
            }),
            Err(TryLockError::WouldBlock) => Err(LockError::Held {
                dir: dir.to_path_buf(),
            }),
            Err(TryLockError::Error(e)) => Err(io(e)),
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_lock_on_the_same_directory_is_refused_until_the_first_is_dropped() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("state");
        let first = StateLock::acquire(&dir).unwrap();
        let err = StateLock::acquire(&dir).unwrap_err();
        assert!(matches!(err, LockError::Held { .. }), "{err}");
        assert!(
            err.to_string().contains(&dir.display().to_string()),
            "{err}"
        );
        drop(first);
        StateLock::acquire(&dir).expect("released on drop");
    }
}
