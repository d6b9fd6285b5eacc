//! Where the real-world manifests are (`shared/corpus` beside the checkout), for every test
//! that reads them. A missing corpus fails each such test with the same message: a test with no
//! input would pass while checking nothing, and a bare `NotFound` says nothing of what to do.

use std::path::{Path, PathBuf};

/// `shared/corpus` in the nearest ancestor of the checkout that has one (worktrees sit one
/// level deeper than the main checkout); panics with [`missing`] when none has.
pub fn root() -> PathBuf {
    find(Path::new(env!("CARGO_MANIFEST_DIR"))).unwrap_or_else(|message| panic!("{message}"))
}

/// [`root`] from `checkout`: the corpus, or the message naming where it was looked for.
pub fn find(checkout: &Path) -> Result<PathBuf, String> {
    checkout
        .ancestors()
        .skip(1)
        .map(|a| a.join("shared/corpus"))
        .find(|c| c.is_dir())
        .ok_or_else(|| missing(checkout))
}

/// The one message every corpus test fails with.
pub fn missing(checkout: &Path) -> String {
    format!(
        "the real-world manifests are missing: no shared/corpus beside {} or any directory \
         above it. The corpus tests read them; check out `shared/` next to the repository \
         (../shared/corpus), see README.md, \"Run the tests\"",
        checkout.display()
    )
}

#[test]
fn a_missing_corpus_is_one_message_naming_where_it_was_looked_for() {
    let nowhere = tempfile::tempdir().unwrap();
    let checkout = nowhere.path().join("tagpilot");
    std::fs::create_dir(&checkout).unwrap();
    let message = find(&checkout).unwrap_err();
    assert!(message.contains("shared/corpus"), "{message}");
    assert!(
        message.contains(&checkout.display().to_string()),
        "{message}"
    );

    // Found from a worktree one level deeper as from the checkout itself.
    std::fs::create_dir_all(nowhere.path().join("shared/corpus")).unwrap();
    let worktree = checkout.join("worktree");
    std::fs::create_dir(&worktree).unwrap();
    let want = nowhere.path().join("shared/corpus");
    assert_eq!(find(&checkout).unwrap(), want);
    assert_eq!(find(&worktree).unwrap(), want);
}

/// Every test that reads the corpus finds it through [`root`], so a missing corpus fails each
/// with the message above, never with a bare `unwrap` on `NotFound` or a silent skip.
#[test]
fn every_corpus_test_finds_the_corpus_through_this_module() {
    let tests = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it");
    let mut readers = Vec::new();
    for entry in walkdir::WalkDir::new(&tests) {
        let entry = entry.unwrap();
        if entry.path().extension().is_none_or(|e| e != "rs")
            || entry.path().ends_with("support/corpus.rs")
        {
            continue;
        }
        let text = std::fs::read_to_string(entry.path()).unwrap();
        let rel = entry
            .path()
            .strip_prefix(&tests)
            .unwrap()
            .display()
            .to_string();
        assert!(
            !text.contains("shared/corpus\")") && !text.contains("join(\"shared/corpus"),
            "{rel} builds the corpus path itself; use support::corpus::root()"
        );
        assert!(
            !text.contains("SKIPPING the corpus"),
            "{rel} skips when the corpus is missing; use support::corpus::root()"
        );
        if text.contains("corpus::root()") {
            readers.push(rel);
        }
    }
    // Not vacuous: the three that read it today are seen.
    for known in ["corpus.rs", "editor_fuzz.rs", "manifest.rs"] {
        assert!(readers.iter().any(|r| r == known), "{known}: {readers:?}");
    }
}
