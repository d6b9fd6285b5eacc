//! The YAML editor's fuzz target, run in every `cargo test` on stable as a bounded property test:
//! real-world manifests from `../shared/corpus` (beside the checkout), mutated the way hand
//! edits and broken tooling mutate files, and random edits of the image fields the editor finds
//! in them. The property is `tagpilot::manifest::fuzzing::check`, the one the fuzz target
//! (`fuzz/fuzz_targets/editor.rs`) checks: no panic, and every edited text differs only in the
//! edited scalars and reads back with the values asked for.
//!
//! `PROPTEST_CASES=5000 cargo test --test it editor_fuzz` runs a longer session by hand.

use std::path::{Path, PathBuf};
use std::sync::LazyLock;

use proptest::prelude::*;
use tagpilot::manifest::fuzzing::{self, Checked, Request};
use tagpilot::manifest::scan;

/// Cases per run when `PROPTEST_CASES` does not say: a few seconds in a debug build.
const CASES: u32 = 512;

const NAMES: [&str; 3] = ["ghcr.io/acme/api", "127.0.0.1:5000/shop/api", "nginx"];
/// Tags that read as numbers, booleans or dates in plain YAML, to exercise quoting everywhere.
const TAGS: [&str; 8] = [
    "1.10",
    "2.0.0",
    "v3",
    "true",
    "1e3",
    "2024-01-02",
    "7",
    "main-abc123",
];
const DIGEST: &str = "sha256:abababababababababababababababababababababababababababababababab";

/// Text the mutations insert: YAML's sharp edges and what templating tools leave behind.
const PIECES: [&str; 24] = [
    "image: nginx:1.0",
    "- ",
    "  ",
    "\t",
    "# tagpilot: api",
    " # {\"$imagepolicy\": \"flux-system:api\"}",
    "&a ",
    "*a",
    "'",
    "\"",
    "{",
    "}",
    "[",
    "]",
    ", ",
    ": ",
    "---\n",
    "...\n",
    "|\n",
    "{{ .Values.image }}",
    "\u{feff}",
    "é",
    "? ",
    "!!str ",
];

struct CorpusFile {
    rel: String,
    src: String,
    /// Lines (1-based) of the image fields in the unmutated file: where mutations hurt most.
    field_lines: Vec<usize>,
}

/// Every YAML file of the corpus. A missing corpus fails the test: a property test with no input
/// would pass while checking nothing.
static FILES: LazyLock<Vec<CorpusFile>> = LazyLock::new(|| {
    let root = crate::support::corpus::root();
    let root = root.as_path();
    let mut files = Vec::new();
    for entry in walkdir::WalkDir::new(root).sort_by_file_name() {
        let entry = entry.unwrap();
        let name = entry.file_name().to_string_lossy();
        if !(name.ends_with(".yaml") || name.ends_with(".yml") || name == "Kustomization") {
            continue;
        }
        let src = std::fs::read_to_string(entry.path()).unwrap();
        let rel = PathBuf::from(entry.path().strip_prefix(root).unwrap())
            .to_string_lossy()
            .replace('\\', "/");
        let field_lines = scan(Path::new(&rel), &src, &[])
            .map(|fields| fields.iter().map(|f| f.line).collect())
            .unwrap_or_default();
        files.push(CorpusFile {
            rel,
            src,
            field_lines,
        });
    }
    assert!(
        files.len() > 100,
        "only {} YAML files in {}",
        files.len(),
        root.display()
    );
    files
});

/// Indexes into [`FILES`] of the files that hold image fields before any mutation.
static WITH_FIELDS: LazyLock<Vec<usize>> = LazyLock::new(|| {
    let with: Vec<usize> = (0..FILES.len())
        .filter(|&i| !FILES[i].field_lines.is_empty())
        .collect();
    assert!(
        with.len() > 20,
        "only {} corpus files hold image fields",
        with.len()
    );
    with
});

/// Mostly files with image fields (the editor's work), sometimes any file (Helm templates,
/// charts, files with no image), which the mutations may turn into something it reads.
fn corpus_file() -> impl Strategy<Value = usize> {
    // Before `FILES`: a missing corpus is then this message in every test, never a poisoned
    // `LazyLock` in the second one.
    crate::support::corpus::root();
    prop_oneof![
        4 => prop::sample::select(WITH_FIELDS.clone()),
        1 => 0..FILES.len(),
    ]
}

/// Where in a file a mutation applies.
#[derive(Debug, Clone, Copy)]
enum At {
    /// The line of the n-th image field (modulo their number), or anywhere when there is none.
    Field(usize),
    /// A proportion of the way through the file, in millionths.
    Anywhere(u32),
}

#[derive(Debug, Clone)]
enum Mutation {
    DeleteLine(At),
    DuplicateLine(At),
    /// Moves the line below one up.
    SwapLines(At),
    /// Adds (or, when negative, removes up to) that many leading spaces.
    Indent(At, i8),
    /// Inserts a piece at the start, middle or end of the line.
    Insert(At, u8, &'static str),
    /// Deletes up to that many bytes from the middle of the line.
    DeleteBytes(At, u8),
    /// Cuts the file off there.
    Truncate(At),
    Crlf,
    Bom,
}

fn at() -> impl Strategy<Value = At> {
    prop_oneof![
        3 => any::<usize>().prop_map(At::Field),
        1 => (0u32..1_000_000).prop_map(At::Anywhere),
    ]
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        2 => at().prop_map(Mutation::DeleteLine),
        2 => at().prop_map(Mutation::DuplicateLine),
        1 => at().prop_map(Mutation::SwapLines),
        2 => (at(), -4i8..=4).prop_map(|(a, n)| Mutation::Indent(a, n)),
        4 => (at(), 0u8..3, prop::sample::select(PIECES.to_vec()))
            .prop_map(|(a, w, p)| Mutation::Insert(a, w, p)),
        2 => (at(), 1u8..12).prop_map(|(a, n)| Mutation::DeleteBytes(a, n)),
        1 => at().prop_map(Mutation::Truncate),
        1 => Just(Mutation::Crlf),
        1 => Just(Mutation::Bom),
    ]
}

fn request() -> impl Strategy<Value = Option<Request<'static>>> {
    prop::option::weighted(
        0.8,
        (
            prop::option::weighted(0.2, prop::sample::select(NAMES.to_vec())),
            prop::option::weighted(0.9, prop::sample::select(TAGS.to_vec())),
            prop::option::weighted(0.3, Just(DIGEST)),
        )
            .prop_map(|(name, tag, digest)| Request { name, tag, digest }),
    )
}

/// The lines of `src`, each with its line break.
fn lines(src: &str) -> Vec<String> {
    src.split_inclusive('\n').map(str::to_owned).collect()
}

/// The index of the line a mutation applies to, in a file of `count` lines.
fn line_index(at: At, file: &CorpusFile, count: usize) -> usize {
    let line = match at {
        At::Field(n) if !file.field_lines.is_empty() => {
            file.field_lines[n % file.field_lines.len()].saturating_sub(1)
        }
        At::Field(n) => n,
        At::Anywhere(p) => (count as u64 * u64::from(p) / 1_000_000) as usize,
    };
    line % count.max(1)
}

/// The nearest character boundary at or before `i`.
fn floor_boundary(s: &str, i: usize) -> usize {
    let mut i = i.min(s.len());
    while !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

fn mutate(file: &CorpusFile, mutations: &[Mutation]) -> String {
    let mut ls = lines(&file.src);
    for m in mutations {
        if ls.is_empty() {
            break;
        }
        let count = ls.len();
        match *m {
            Mutation::DeleteLine(a) => {
                ls.remove(line_index(a, file, count));
            }
            Mutation::DuplicateLine(a) => {
                let i = line_index(a, file, count);
                ls.insert(i, ls[i].clone());
            }
            Mutation::SwapLines(a) => {
                let i = line_index(a, file, count);
                if i + 1 < count {
                    ls.swap(i, i + 1);
                }
            }
            Mutation::Indent(a, n) => {
                let line = &mut ls[line_index(a, file, count)];
                if n >= 0 {
                    line.insert_str(0, &" ".repeat(n as usize));
                } else {
                    let spaces = line.len() - line.trim_start_matches(' ').len();
                    line.drain(..spaces.min(usize::from(n.unsigned_abs())));
                }
            }
            Mutation::Insert(a, where_, piece) => {
                let line = &mut ls[line_index(a, file, count)];
                let body = line.trim_end_matches(['\r', '\n']).len();
                let pos = match where_ {
                    0 => line.len() - line.trim_start().len(),
                    1 => floor_boundary(line, body / 2),
                    _ => body,
                };
                line.insert_str(pos, piece);
            }
            Mutation::DeleteBytes(a, n) => {
                let line = &mut ls[line_index(a, file, count)];
                let start = floor_boundary(line, line.len() / 2);
                let end = floor_boundary(line, start + usize::from(n));
                line.drain(start..end);
            }
            Mutation::Truncate(a) => {
                let i = line_index(a, file, count);
                let cut = floor_boundary(&ls[i], ls[i].len() / 2);
                ls[i].truncate(cut);
                ls.truncate(i + 1);
            }
            Mutation::Crlf => {
                for line in &mut ls {
                    if line.ends_with('\n') && !line.ends_with("\r\n") {
                        line.insert(line.len() - 1, '\r');
                    }
                }
            }
            Mutation::Bom => {
                if !ls[0].starts_with('\u{feff}') {
                    ls[0].insert(0, '\u{feff}');
                }
            }
        }
    }
    ls.concat()
}

fn config() -> ProptestConfig {
    // `with_cases` would ignore the environment; a longer session is one variable away.
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(CASES);
    ProptestConfig {
        cases,
        ..ProptestConfig::default()
    }
}

proptest! {
    #![proptest_config(config())]

    /// Mutated corpus files, randomly edited: the editor keeps its promise or refuses.
    #[test]
    fn editor_keeps_its_promise_on_mutated_corpus_files(
        file in corpus_file(),
        mutations in prop::collection::vec(mutation(), 0..4),
        requests in prop::collection::vec(request(), 1..6),
    ) {
        let file = &FILES[file];
        let src = mutate(file, &mutations);
        fuzzing::check(Path::new(&file.rel), &src, &requests)
            .map_err(|broken| TestCaseError::fail(broken.to_string()))?;
    }
}

/// The property is not vacuous: on the unmutated corpus it sees fields and accepted edits, and
/// the fuzz target's byte decoding reaches the same property.
#[test]
fn editor_property_sees_edits_on_the_corpus() {
    crate::support::corpus::root();
    let request = Request {
        name: None,
        tag: Some("1.10"),
        digest: None,
    };
    let mut total = Checked::default();
    for file in FILES.iter().filter(|f| !f.field_lines.is_empty()).take(8) {
        let checked = fuzzing::check(Path::new(&file.rel), &file.src, &[Some(request)])
            .unwrap_or_else(|broken| panic!("{broken}"));
        total.fields += checked.fields;
        total.accepted += checked.accepted;
    }
    assert!(total.fields >= 8 && total.accepted >= 8, "{total:?}");

    let deployment = FILES
        .iter()
        .find(|f| f.rel.ends_with("kubernetes-manifests/frontend.yaml"))
        .expect("microservices-demo's frontend.yaml");
    let mut data = vec![0b0000_0010];
    data.extend_from_slice(deployment.src.as_bytes());
    let checked = fuzzing::check_bytes(&data).unwrap_or_else(|broken| panic!("{broken}"));
    assert!(checked.accepted > 0, "{checked:?}");
}
