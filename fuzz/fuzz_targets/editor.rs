//! Scans arbitrary bytes as YAML, edits the fields found and checks the promise of the editor:
//! it never panics, and an edit it accepts changes the text only at the edited spans and leaves a
//! file that scans again with the new values. The property and the decoding of the input (first
//! byte: file name and request; the rest: the file) are `tagpilot::manifest::fuzzing`, which
//! `cargo test` also checks on the real-world corpus (`tests/it/editor_fuzz.rs`).
//!
//! Run (on stable, from the repository root), seeded with the real-world manifests beside the
//! checkout (libFuzzer reads directories recursively and writes new inputs to the first):
//! ```sh
//! mkdir -p fuzz/corpus/editor
//! RUSTC_BOOTSTRAP=1 cargo fuzz run editor -s none fuzz/corpus/editor ../shared/corpus -- -max_total_time=60
//! ```
#![no_main]

use libfuzzer_sys::fuzz_target;
use tagpilot::manifest::fuzzing;

fuzz_target!(|data: &[u8]| {
    if let Err(broken) = fuzzing::check_bytes(data) {
        panic!("{broken}");
    }
});
