//! Time comes from one clock (ARCHITECTURE.md, "Invariants"): `src/clock.rs` is the only place
//! that asks the system what time it is; everything else reads the `Clock` it was handed, so a
//! test sets the time instead of waiting for it. This test reads every file in `src/`, unit
//! tests included (comments left out), and fails on a `now()` of a time type outside the clock
//! module, naming the file and the line.

use std::path::Path;

use crate::support;

/// The one module allowed to read the system's time.
const CLOCK_MODULE: &str = "clock.rs";

/// The lines of `text` (1-based) that read the time directly: `Type::now()` in any path form
/// (`SystemTime::now()`, `std::time::Instant::now()`, `jiff::Timestamp::now()`,
/// `chrono::Utc::now()`, `Zoned::now()`, `now_utc()`…). A method `clock.now()` is a clock read
/// and passes.
fn direct_reads(text: &str) -> Vec<(usize, String)> {
    let re = regex::Regex::new(r"\b[A-Z][A-Za-z0-9_]*\s*::\s*now(?:_utc|_local)?\s*\(").unwrap();
    text.lines()
        .enumerate()
        .filter_map(|(i, line)| {
            let code = match line.find("//") {
                Some(at) => &line[..at],
                None => line,
            };
            re.find(code).map(|m| (i + 1, m.as_str().to_string()))
        })
        .collect()
}

#[test]
fn time_comes_from_one_clock() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    support::rust_files(&src, &mut files);
    files.sort();
    let mut violations = Vec::new();
    for file in &files {
        let rel = file.strip_prefix(&src).unwrap();
        if rel == Path::new(CLOCK_MODULE) {
            continue;
        }
        let text = std::fs::read_to_string(file).unwrap();
        for (line, read) in direct_reads(&text) {
            violations.push(format!("src/{}:{line}: {read}", rel.display()));
        }
    }
    assert!(
        violations.is_empty(),
        "the time is read outside src/{CLOCK_MODULE}; take a `Clock` instead:\n{}",
        violations.join("\n")
    );
}

#[test]
fn the_clock_check_sees_every_form_of_reading_the_time() {
    let text = "let a = SystemTime::now();\n\
                let b = Instant::now();\n\
                let c = jiff::Timestamp::now();\n\
                let d = Utc::now();\n\
                let e = std::time::Instant :: now ();\n\
                let f = OffsetDateTime::now_utc();\n\
                let g = self.clock.now();\n\
                let h = clock.wall(); // not Timestamp::now()\n";
    let found: Vec<usize> = direct_reads(text).into_iter().map(|(l, _)| l).collect();
    assert_eq!(found, vec![1, 2, 3, 4, 5, 6]);
}
