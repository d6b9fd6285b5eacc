//! Unit tests of the state store over a temporary directory.

use super::*;

fn repo() -> Repository {
    Repository {
        registry: "127.0.0.1:5000".into(),
        path: "shop/api".into(),
    }
}

#[test]
fn metadata_and_first_seen_times_survive_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let t0: jiff::Timestamp = "2024-05-01T10:00:00Z".parse().unwrap();
    let t1: jiff::Timestamp = "2024-05-01T11:00:00Z".parse().unwrap();
    {
        let state = State::open(dir.path()).unwrap();
        state.put_manifest("sha256:aa", b"{}");
        state.put_config("sha256:bb", br#"{"created":null}"#);
        assert_eq!(state.first_seen(&repo(), &["1.0.0"], t0), vec![Some(t0)]);
        state.flush();
    }
    let state = State::open(dir.path()).unwrap();
    assert_eq!(state.manifest("sha256:aa").as_deref(), Some(&b"{}"[..]));
    assert!(state.config("sha256:bb").is_some());
    assert_eq!(state.manifest("sha256:cc"), None);
    assert_eq!(
        state.first_seen(&repo(), &["1.0.0", "1.1.0"], t1),
        vec![Some(t0), Some(t1)],
        "known tags keep their time, new ones start now"
    );
    assert_eq!(state.first_seen(&repo(), &["1.1.0"], t0), vec![Some(t1)]);
}

#[test]
fn a_delivery_is_seen_once_per_kind() {
    let dir = tempfile::tempdir().unwrap();
    let state = State::open(dir.path()).unwrap();
    assert!(!state.seen_delivery("distribution", "e1"));
    assert!(state.seen_delivery("distribution", "e1"));
    assert!(!state.seen_delivery("harbor", "e1"));
}

#[test]
fn proposals_are_kept_per_repository_and_group() {
    let dir = tempfile::tempdir().unwrap();
    let state = State::open(dir.path()).unwrap();
    let p = Proposal {
        changes: vec![ProposedChange {
            policy: "api".into(),
            file: "apps/api.yaml".into(),
            to: "1.3.0".into(),
        }],
        at: jiff::Timestamp::UNIX_EPOCH,
    };
    state.record_proposal("manifests", "api", &p);
    assert_eq!(state.last_proposal("manifests", "api"), Some(p));
    assert_eq!(state.last_proposal("manifests", "web"), None);
    assert_eq!(state.last_proposal("other", "api"), None);
    state.forget_proposal("manifests", "api");
    assert_eq!(state.last_proposal("manifests", "api"), None);
}

#[test]
fn a_corrupt_file_is_moved_aside_and_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(STATE_FILE);
    std::fs::write(&path, vec![0x5a; 64 * 1024]).unwrap();
    let state = State::open(dir.path()).expect("recovered");
    state.put_manifest("sha256:aa", b"{}");
    assert!(state.manifest("sha256:aa").is_some());
    let aside: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("state.redb.corrupt-"))
        .collect();
    assert_eq!(aside.len(), 1, "{aside:?}");
}

#[test]
fn a_truncated_database_is_moved_aside_and_replaced() {
    let dir = tempfile::tempdir().unwrap();
    {
        let state = State::open(dir.path()).unwrap();
        for i in 0..200 {
            state.put_manifest(&format!("sha256:{i}"), &[7; 2048]);
        }
        state.flush();
    }
    let path = dir.path().join(STATE_FILE);
    let len = std::fs::metadata(&path).unwrap().len();
    let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    file.set_len(len / 3).unwrap();
    drop(file);
    let state = State::open(dir.path()).expect("recovered");
    assert_eq!(state.manifest("sha256:1"), None, "a fresh database");
}

#[test]
fn a_second_open_of_one_database_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let _first = State::open(dir.path()).unwrap();
    let err = State::open(dir.path()).unwrap_err();
    assert!(matches!(err, StateError::Locked { .. }), "{err}");
    assert!(err.to_string().contains("--state-dir"), "{err}");
}

/// A small tmpfs of its own, unmounted on drop: a disk that really fills up.
struct SmallDisk {
    dir: tempfile::TempDir,
}

impl SmallDisk {
    /// `None`, with a message, where `mount` is not allowed (not root, no tmpfs).
    fn mount(bytes: u64) -> Option<SmallDisk> {
        let dir = tempfile::tempdir().unwrap();
        let out = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={bytes}"), "tmpfs"])
            .arg(dir.path())
            .output();
        match out {
            Ok(o) if o.status.success() => Some(SmallDisk { dir }),
            Ok(o) => {
                eprintln!(
                    "skipped: cannot mount a small tmpfs to fill ({})",
                    String::from_utf8_lossy(&o.stderr).trim()
                );
                None
            }
            Err(e) => {
                eprintln!("skipped: cannot run mount to make a small tmpfs ({e})");
                None
            }
        }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Writes `name` until the disk is full.
    fn fill(&self, name: &str) {
        use std::io::Write;
        let mut f = std::fs::File::create(self.path().join(name)).unwrap();
        let chunk = vec![0u8; 16 * 1024];
        while f.write_all(&chunk).is_ok() {}
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg(self.dir.path())
            .status();
    }
}

/// Regression: one ENOSPC used to leave redb's handle refusing every later write
/// (`PreviousIo`) until a restart, and first-seen times answered "now" all that time, so
/// every `minAge` policy waited for ever.
#[test]
fn a_full_disk_takes_the_store_down_and_it_recovers_without_a_restart() {
    let Some(disk) = SmallDisk::mount(4 << 20) else {
        return;
    };
    let t0: jiff::Timestamp = "2024-05-01T10:00:00Z".parse().unwrap();
    let t1: jiff::Timestamp = "2024-05-01T11:00:00Z".parse().unwrap();
    let state = State::open(disk.path()).unwrap();
    assert_eq!(state.first_seen(&repo(), &["1.0.0"], t0), vec![Some(t0)]);
    state.flush();
    assert!(state.is_up());

    disk.fill("filler");
    for i in 0..64 {
        state.put_manifest(&format!("sha256:{i}"), &[7; 64 * 1024]);
        if !state.is_up() {
            break;
        }
    }
    assert!(!state.is_up(), "writes on a full disk take the store down");
    assert_eq!(
        state.first_seen(&repo(), &["2.0.0"], t1)[0],
        None,
        "a tag that cannot be recorded is of unknown age, not seen now"
    );
    state.flush();
    assert!(!state.is_up(), "still down while the disk is full");

    std::fs::remove_file(disk.path().join("filler")).unwrap();
    assert!(state.recover(), "opened again once the disk has room");
    assert!(state.is_up());
    assert_eq!(
        state.first_seen(&repo(), &["1.0.0", "2.0.0"], t1),
        vec![Some(t0), Some(t1)],
        "what was flushed before is still there, and new tags are recorded again"
    );
    state.put_manifest("sha256:after", b"{}");
    assert_eq!(state.manifest("sha256:after").as_deref(), Some(&b"{}"[..]));
}

#[test]
fn held_tags_survive_a_reopen_one_per_field_until_released() {
    use crate::holds::{FieldKey, HeldTag, HoldReason};
    let dir = tempfile::tempdir().unwrap();
    let key = |policy: &str| FieldKey {
        repository: Some("manifests".into()),
        policy: policy.into(),
        file: "apps/api/deployment.yaml".into(),
        field: "Deployment/api container api".into(),
    };
    let held = |policy: &str, tag: &str| HeldTag {
        key: key(policy),
        tag: tag.into(),
        reason: HoldReason::Failed {
            application: "argocd/shop-api".into(),
            failure: "health Degraded after the sync".into(),
        },
        since: "2026-11-25T10:00:00Z".parse().unwrap(),
    };
    {
        let state = State::open(dir.path()).unwrap();
        assert_eq!(state.holds().unwrap(), vec![]);
        state.hold(&held("web", "2.0.0")).unwrap();
        state.hold(&held("api", "1.3.0")).unwrap();
        state.hold(&held("api", "1.4.0")).unwrap();
    }
    let state = State::open(dir.path()).unwrap();
    assert_eq!(
        state.holds().unwrap(),
        vec![held("api", "1.4.0"), held("web", "2.0.0")],
        "one hold per field, the latest; ordered by field"
    );
    assert_eq!(
        state.release(&key("api")).unwrap(),
        Some(held("api", "1.4.0"))
    );
    assert_eq!(state.release(&key("api")).unwrap(), None);
    assert_eq!(state.holds().unwrap(), vec![held("web", "2.0.0")]);
}
