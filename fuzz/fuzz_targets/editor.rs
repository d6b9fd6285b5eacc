//! Scans arbitrary bytes as YAML, edits every field found and checks the promise of the editor:
//! it never panics, and an edit it accepts changes the text only at the edited spans and leaves a
//! file that scans again with the new values.
//!
//! Run (on stable, from the repository root):
//! `RUSTC_BOOTSTRAP=1 cargo fuzz run editor -s none -- -max_total_time=60`
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use tagpilot::manifest::{Update, apply_edits, scan};

const DIGEST: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

fuzz_target!(|data: &[u8]| {
    let Some((&selector, rest)) = data.split_first() else {
        return;
    };
    let Ok(src) = std::str::from_utf8(rest) else {
        return;
    };
    let path = Path::new(if selector & 1 == 0 {
        "values.yaml"
    } else {
        "kustomization.yaml"
    });
    let tag = ["1.10", "2.0.0", "v3", "true"][(selector as usize >> 1) % 4];
    let digest = (selector & 8 != 0).then_some(DIGEST);
    let Ok(fields) = scan(path, src, &[]) else {
        return;
    };
    for field in &fields {
        let name = field
            .repository()
            .map(|r| r.to_string())
            .unwrap_or_else(|| "ghcr.io/x/y".into());
        let update = Update {
            name: &name,
            tag: Some(tag),
            digest,
        };
        let Ok(edits) = field.edits(&update) else {
            continue;
        };
        let Ok(out) = apply_edits(path, src, &edits) else {
            continue;
        };
        let mut sorted = edits.clone();
        sorted.sort_by_key(|e| (e.span.start, e.span.end));
        let mut rebuilt = String::new();
        let mut pos = 0;
        for e in &sorted {
            rebuilt.push_str(&src[pos..e.span.start]);
            rebuilt.push_str(&e.text);
            pos = e.span.end;
        }
        rebuilt.push_str(&src[pos..]);
        assert_eq!(rebuilt, out, "bytes outside the edits changed");
        let again = scan(path, &out, &[]).expect("an accepted edit leaves a parsable file");
        assert!(
            again.iter().any(|f| f.kind == field.kind),
            "the edited field disappeared"
        );
    }
});
