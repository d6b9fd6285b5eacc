//! tagpilot over real charts and GitOps repositories (`tests/corpus`, copied verbatim; see its
//! `SOURCES.md`), judged by a reader that is not tagpilot: `tests/corpus/oracle.py` lists, with
//! PyYAML, the image references the README says tagpilot reads. The real registry holds a newer
//! tag for every repository the oracle lists; one policy follows each. Then one `plan`, one
//! `apply` and one more `plan` of the built binary over the whole corpus must show that every
//! listed reference is either updated with only its version's bytes changed, or named with a
//! reason at its file and line (a hold or a problem); that no other byte changes; that an empty
//! or absent tag in a Helm values map (the chart's appVersion) is never filled; and that the
//! second plan is empty.
//!
//! The files stay verbatim, so their references name Docker Hub, quay.io, ghcr.io and others.
//! The binary reaches the test registry for all of them through the standard `HTTP_PROXY`
//! setting: every registry is `insecure` (plain HTTP) in `tagpilot.yaml`, and the test
//! registry, which answers absolute-form requests by their path, is the proxy. Every request
//! tagpilot sends is a real registry request answered by the real registry.
//!
//! What tagpilot gets wrong today is [`KNOWN`], an explicit list asserted exactly: a defect that
//! is fixed must be taken off it, and a new one fails the test.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use futures_util::{StreamExt as _, stream};
use serde::Deserialize;
use serde_json::Value;

use crate::support::bin::{output_text, run_tagpilot};
use crate::support::registry::{Auth, ImageSpec, TestRegistry};

/// Defects tagpilot has on this corpus today: `(file, line, defect)`, `file` relative to
/// `tests/corpus`, line 0 for a whole file. Asserted exactly: take an entry off when its fix
/// lands, and a new defect fails the test. None is known today.
const KNOWN: &[(&str, usize, Defect)] = &[];

/// What can be wrong with one reference (or one line) of the corpus.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Defect {
    /// Neither updated nor named: no change, hold or problem at its line, and its file not
    /// skipped with a reason.
    Silent,
    /// An empty or absent tag in a Helm values map (the chart's appVersion) was filled.
    EmptyTagFilled,
    /// The line changed in more than the version's bytes.
    MoreThanTheTag,
    /// A line the oracle lists no reference on was edited.
    UnlistedEdit,
    /// A file the oracle reads was skipped as unreadable.
    ReadableFileSkipped,
    /// A file the oracle cannot read was neither skipped nor otherwise named.
    UnreadableFileNotNamed,
    /// The tag moved and the digest written beside it (which wins) did not.
    DigestLeftBehind,
    /// Lines were added to or removed from the file (at the first line that differs).
    LinesAddedOrRemoved,
    /// Held for a tag the file does not hold: `latest` where a `tag` key holds a version, or
    /// the string "null" where YAML's null is written.
    WrongReason,
}

/// One reference as `oracle.py` lists it.
#[derive(Debug, Clone, Deserialize)]
struct Reference {
    file: String,
    line: usize,
    /// Where the reference begins: a message about it may name any line from here to `line`.
    start_line: usize,
    shape: String,
    registry: Option<String>,
    path: Option<String>,
    tag: Option<String>,
    digest: Option<String>,
    /// The line of a digest under a key of its own, which must move with the tag.
    digest_line: Option<usize>,
}

#[derive(Debug, Deserialize)]
struct Unreadable {
    file: String,
    error: String,
}

#[derive(Debug, Deserialize)]
struct OracleOutput {
    references: Vec<Reference>,
    unreadable: Vec<Unreadable>,
}

fn corpus() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus")
}

/// The Python with PyYAML that `scripts/test.sh` installs (`scripts/lib/deploy-tools.sh`).
fn oracle_python() -> PathBuf {
    let dir = std::env::var_os("TAGPILOT_TOOLS")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").expect("HOME")).join(".cache/tagpilot-tools")
        });
    let python = dir.join("oracle/venv/bin/python");
    assert!(
        python.is_file(),
        "{} is missing: scripts/test.sh installs PyYAML for tests/corpus/oracle.py \
         (scripts/lib/deploy-tools.sh); or set TAGPILOT_TOOLS to where it is",
        python.display()
    );
    python
}

fn run_oracle(dir: &Path) -> OracleOutput {
    let out = Command::new(oracle_python())
        .arg(corpus().join("oracle.py"))
        .arg(dir)
        .output()
        .expect("run oracle.py");
    assert!(out.status.success(), "oracle.py: {}", output_text(&out));
    serde_json::from_slice(&out.stdout).expect("oracle.py's JSON")
}

/// Every file of the corpus but its own (`SOURCES.md`, the oracle), relative path → bytes.
fn corpus_files() -> BTreeMap<String, Vec<u8>> {
    let root = corpus();
    let mut out = BTreeMap::new();
    for entry in walkdir::WalkDir::new(&root).min_depth(3) {
        let entry = entry.unwrap();
        if entry.file_type().is_file() {
            let rel = entry.path().strip_prefix(&root).unwrap();
            let rel = rel.to_string_lossy().replace('\\', "/");
            out.insert(rel, std::fs::read(entry.path()).unwrap());
        }
    }
    out
}

/// A tag of the same shape that ranks higher: its first run of digits plus one (`v0.19.0` →
/// `v1.19.0`, `12-debian-12-r51` → `13-debian-12-r51`, `2024.01.15` → `2025.01.15`); `None`
/// for tags without digits.
fn newer(tag: &str) -> Option<String> {
    let start = tag.find(|c: char| c.is_ascii_digit())?;
    let len = tag[start..]
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(tag.len() - start);
    let n: u64 = tag[start..start + len].parse().ok()?;
    let bumped = format!("{:0width$}", n + 1, width = len);
    Some(format!("{}{bumped}{}", &tag[..start], &tag[start + len..]))
}

/// A tag a registry accepts (`[\w][\w.-]{0,127}`).
fn is_tag(tag: &str) -> bool {
    !tag.is_empty()
        && tag.len() <= 128
        && tag
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
        && tag
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c))
}

/// A Helm values map's tag that means "the chart's appVersion".
fn is_app_version(r: &Reference) -> bool {
    r.shape == "helm-map" && r.tag.as_deref().is_none_or(str::is_empty)
}

/// Every repository the oracle lists gets its current tags and a newer one of each, in the
/// test registry at its path (repositories of different registries with one path share it).
async fn push_tags(registry: &TestRegistry, references: &[Reference]) -> usize {
    let mut tags: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
    for r in references {
        let Some(path) = r.path.as_deref() else {
            continue;
        };
        let entry = tags.entry(path).or_default();
        if let Some(tag) = r.tag.as_deref().filter(|t| is_tag(t)) {
            entry.insert(tag.to_string());
            entry.extend(newer(tag).filter(|t| is_tag(t)));
        }
        // A version for references without one, so they have a candidate too.
        entry.insert("1.0.0".to_string());
    }
    // A few at once: some 170 repositories, each an upload and a manifest per tag.
    stream::iter(&tags)
        .for_each_concurrent(8, |(path, tags)| async move {
            let tags: Vec<&str> = tags.iter().map(String::as_str).collect();
            registry.push_tags(path, &tags, ImageSpec::default()).await;
        })
        .await;
    tags.len()
}

/// `tagpilot.yaml` (every registry the oracle names, insecure) and one semver policy per
/// repository, targeting the corpus.
fn write_config(work: &Path, references: &[Reference]) {
    let registries: BTreeSet<&str> = references
        .iter()
        .filter_map(|r| r.registry.as_deref())
        .collect();
    let repositories: BTreeSet<(&str, &str)> = references
        .iter()
        .filter_map(|r| Some((r.registry.as_deref()?, r.path.as_deref()?)))
        .collect();
    let mut config = String::from("registries:\n");
    for host in &registries {
        config.push_str(&format!("  - host: {host:?}\n    insecure: true\n"));
    }
    config.push_str("policies: policies/\n");
    std::fs::write(work.join("tagpilot.yaml"), config).unwrap();
    let mut policies = String::new();
    for (i, (registry, path)) in repositories.iter().enumerate() {
        policies.push_str(&format!(
            "---\napiVersion: tagpilot.dev/v1alpha1\nkind: ImagePolicy\nmetadata:\n  \
             name: image-{i}\nspec:\n  image: \"{registry}/{path}\"\n  strategy:\n    \
             semver: {{}}\n  targets:\n    - paths: [\"corpus/**\"]\n"
        ));
    }
    std::fs::create_dir_all(work.join("policies")).unwrap();
    std::fs::write(work.join("policies/corpus.yaml"), policies).unwrap();
}

/// `tagpilot plan --format json` (or `apply`) through the test registry as every registry's
/// proxy.
fn tagpilot(work: &Path, registry: &TestRegistry, args: &[&str]) -> (Value, String) {
    let proxy = format!("http://{}", registry.host());
    let out = run_tagpilot(
        work,
        args,
        &[
            ("HTTP_PROXY", &proxy),
            ("http_proxy", &proxy),
            ("NO_PROXY", ""),
            ("no_proxy", ""),
        ],
    );
    let text = output_text(&out);
    assert!(
        out.status.code().is_some_and(|c| c <= 1),
        "tagpilot {args:?} failed:\n{text}"
    );
    let json = if args.contains(&"json") {
        serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("tagpilot {args:?}: not JSON ({e}):\n{text}"))
    } else {
        Value::Null
    };
    (json, text)
}

/// `corpus/<file>` → `<file>`, for the report's paths.
fn in_corpus(file: &str) -> Option<&str> {
    file.strip_prefix("corpus/")
}

/// Lines a report names, by kind: `(file, line)` of its changes (with `from`, `to`), its holds
/// and its problems, and the files it skipped.
#[derive(Default, Debug)]
struct Named {
    changes: BTreeMap<(String, usize), (String, String)>,
    /// Holds (with the current tag they name) and problems (`None`).
    named: BTreeMap<(String, usize), Vec<Option<String>>>,
    skipped: BTreeMap<String, String>,
}

fn named(report: &Value) -> Named {
    let mut out = Named::default();
    let list = |key: &str| report[key].as_array().cloned().unwrap_or_default();
    for c in list("changes") {
        let Some(file) = c["file"].as_str().and_then(in_corpus) else {
            continue;
        };
        let line = c["line"].as_u64().unwrap() as usize;
        let (from, to) = (c["from"].as_str().unwrap(), c["to"].as_str().unwrap());
        out.changes
            .insert((file.to_string(), line), (from.to_string(), to.to_string()));
    }
    for h in list("holds").into_iter().chain(list("problems")) {
        if let (Some(file), Some(line)) =
            (h["file"].as_str().and_then(in_corpus), h["line"].as_u64())
        {
            let current = h["current"].as_str().map(str::to_string);
            out.named
                .entry((file.to_string(), line as usize))
                .or_default()
                .push(current);
        }
    }
    for s in list("skipped") {
        if let Some(file) = s["file"].as_str().and_then(in_corpus) {
            out.skipped.insert(
                file.to_string(),
                s["reason"].as_str().unwrap_or("").to_string(),
            );
        }
    }
    out
}

/// How one line of a file changed.
#[derive(Debug)]
enum LineEdit {
    /// Line `n` (1-based) now reads otherwise: `(n, before, after)`.
    Changed(usize, String, String),
    /// A line was added after line `n` of the original (0: at the start).
    Inserted(usize, String),
    /// Line `n` of the original is gone.
    Removed(usize),
}

/// The lines that differ between `before` and `after`. Edits are sparse, so a greedy walk finds
/// them: a line is taken as added (or removed) only while the files' lengths still differ.
fn line_edits(before: &[u8], after: &[u8]) -> Vec<LineEdit> {
    let (before, after) = (
        String::from_utf8_lossy(before),
        String::from_utf8_lossy(after),
    );
    let old: Vec<&str> = before.split_inclusive('\n').collect();
    let new: Vec<&str> = after.split_inclusive('\n').collect();
    let (mut i, mut j, mut out) = (0, 0, Vec::new());
    while i < old.len() || j < new.len() {
        let more_new = new.len() - j > old.len() - i;
        let more_old = old.len() - i > new.len() - j;
        if i < old.len() && j < new.len() && old[i] == new[j] {
            (i, j) = (i + 1, j + 1);
        } else if more_new && (i == old.len() || new.get(j + 1) == Some(&old[i])) {
            out.push(LineEdit::Inserted(i, new[j].to_string()));
            j += 1;
        } else if more_old && (j == new.len() || old.get(i + 1) == Some(&new[j])) {
            out.push(LineEdit::Removed(i + 1));
            i += 1;
        } else {
            out.push(LineEdit::Changed(
                i + 1,
                old[i].to_string(),
                new[j].to_string(),
            ));
            (i, j) = (i + 1, j + 1);
        }
    }
    out
}

#[tokio::test]
async fn every_reference_the_oracle_lists_is_updated_in_its_tag_only_or_named() {
    let files = corpus_files();
    let oracle = run_oracle(&corpus());
    let references = &oracle.references;
    assert!(references.len() > 250, "{} references", references.len());

    let registry = TestRegistry::start(Auth::None).await;
    let pushed = push_tags(&registry, references).await;
    assert!(pushed > 100, "{pushed} repositories");

    let work = tempfile::tempdir().unwrap();
    for (rel, bytes) in &files {
        let dest = work.path().join("corpus").join(rel);
        std::fs::create_dir_all(dest.parent().unwrap()).unwrap();
        std::fs::write(dest, bytes).unwrap();
    }
    write_config(work.path(), references);

    let (first, _) = tagpilot(work.path(), &registry, &["plan", "--format", "json"]);
    let (_, applied) = tagpilot(work.path(), &registry, &["apply"]);
    let (second, _) = tagpilot(work.path(), &registry, &["plan", "--format", "json"]);
    let report = named(&first);
    assert!(
        report.changes.len() > 100,
        "too few changes to show anything: {:?}\n{applied}",
        report.changes.len()
    );

    let mut found: BTreeSet<(String, usize, Defect)> = BTreeSet::new();
    let listed: BTreeMap<(String, usize), &Reference> = references
        .iter()
        .map(|r| ((r.file.clone(), r.line), r))
        .collect();

    let digest_lines: BTreeMap<(String, usize), &Reference> = references
        .iter()
        .filter_map(|r| Some(((r.file.clone(), r.digest_line?), r)))
        .filter(|((_, line), r)| *line != r.line)
        .collect();

    // What apply changed, line by line: only listed lines, only their version.
    let mut edited: BTreeSet<(String, usize)> = BTreeSet::new();
    for (rel, before) in &files {
        let after = std::fs::read(work.path().join("corpus").join(rel)).unwrap();
        for edit in line_edits(before, &after) {
            let defect = match edit {
                LineEdit::Changed(line, old, new) => {
                    edited.insert((rel.clone(), line));
                    changed_line(&report, &listed, &digest_lines, rel, line, &old, &new)
                }
                LineEdit::Inserted(after, text) => {
                    inserted_line(&report, references, rel, after, &text)
                }
                LineEdit::Removed(line) => Some((line, Defect::LinesAddedOrRemoved)),
            };
            if let Some((line, defect)) = defect {
                found.insert((rel.clone(), line, defect));
            }
        }
    }

    for ((file, line), r) in &digest_lines {
        if edited.contains(&(file.clone(), r.line)) && !edited.contains(&(file.clone(), *line)) {
            found.insert((file.clone(), r.line, Defect::DigestLeftBehind));
        }
    }

    // Every listed reference: updated, or named at its lines (for a reason it has) or by its
    // file.
    for r in references {
        let key = (r.file.clone(), r.line);
        if report.changes.contains_key(&key) {
            continue;
        }
        let last = r.line.max(r.digest_line.unwrap_or(0));
        let currents: Vec<&Option<String>> = (r.start_line..=last)
            .filter_map(|l| report.named.get(&(r.file.clone(), l)))
            .flatten()
            .collect();
        if !currents.is_empty() {
            if currents.iter().all(|c| wrong_reason(r, c.as_deref())) {
                eprintln!("{}:{}: held for {currents:?}: {r:?}", r.file, r.line);
                found.insert((r.file.clone(), r.line, Defect::WrongReason));
            }
            continue;
        }
        if let Some(reason) = report.skipped.get(&r.file) {
            eprintln!("{}: skipped: {reason}", r.file);
            found.insert((r.file.clone(), 0, Defect::ReadableFileSkipped));
            continue;
        }
        eprintln!("{}:{}: silent: {r:?}", r.file, r.line);
        found.insert((r.file.clone(), r.line, Defect::Silent));
    }
    for u in &oracle.unreadable {
        if !report.skipped.contains_key(&u.file) {
            eprintln!("{}: unreadable to the oracle ({})", u.file, u.error);
            found.insert((u.file.clone(), 0, Defect::UnreadableFileNotNamed));
        }
    }

    let known: BTreeSet<(String, usize, Defect)> = KNOWN
        .iter()
        .map(|(f, l, d)| (f.to_string(), *l, *d))
        .collect();
    let new: Vec<_> = found.difference(&known).collect();
    let fixed: Vec<_> = known.difference(&found).collect();
    assert!(
        new.is_empty() && fixed.is_empty(),
        "defects not in KNOWN: {new:#?}\nin KNOWN but no longer seen (take them off): {fixed:#?}"
    );

    let again = named(&second);
    assert!(
        again.changes.is_empty(),
        "a second plan still changes: {:?}",
        again.changes
    );
}

/// Whether a hold naming `current` as the tag misreads `r`: `latest` (or no tag) where the file
/// writes another tag beside the name, or the string "null" where it writes YAML's null.
fn wrong_reason(r: &Reference, current: Option<&str>) -> bool {
    match (r.tag.as_deref(), current) {
        // `(none)`: a reference without a tag, which tagpilot reads as `latest`, or an empty
        // one (`tag: ""`, the chart's appVersion), which it holds as such.
        (Some(tag), Some("latest" | "(none)")) => tag != "latest" && !tag.is_empty(),
        (None, Some("null")) => true,
        _ => false,
    }
}

/// What is wrong with line `line` of `file` reading `new` where it read `old`, if anything.
fn changed_line(
    report: &Named,
    listed: &BTreeMap<(String, usize), &Reference>,
    digest_lines: &BTreeMap<(String, usize), &Reference>,
    file: &str,
    line: usize,
    old: &str,
    new: &str,
) -> Option<(usize, Defect)> {
    let key = (file.to_string(), line);
    if digest_lines.contains_key(&key) {
        return (without_digests(old) != without_digests(new))
            .then_some((line, Defect::MoreThanTheTag));
    }
    let Some(r) = listed.get(&key) else {
        return Some((line, Defect::UnlistedEdit));
    };
    if is_app_version(r) {
        return Some((line, Defect::EmptyTagFilled));
    }
    let Some((from, to)) = report.changes.get(&key) else {
        return Some((line, Defect::UnlistedEdit));
    };
    if !only_the_version(old, new, from, to, r) {
        eprintln!("{file}:{line}: {old:?} -> {new:?} ({from} -> {to})");
        return Some((line, Defect::MoreThanTheTag));
    }
    None
}

/// What is wrong with a line added after line `after` of `file`, if anything. The README says
/// a kustomize `images:` entry with nothing but its `name` gets its `newTag` added; nothing
/// else gains a line.
fn inserted_line(
    report: &Named,
    references: &[Reference],
    file: &str,
    after: usize,
    text: &str,
) -> Option<(usize, Defect)> {
    eprintln!("{file}: line added after {after}: {text:?}");
    let Some(owner) = references
        .iter()
        .filter(|r| r.file == file && r.line <= after)
        .max_by_key(|r| r.line)
    else {
        return Some((after + 1, Defect::LinesAddedOrRemoved));
    };
    if is_app_version(owner) {
        return Some((owner.line, Defect::EmptyTagFilled));
    }
    let planned = report
        .changes
        .iter()
        .find(|((f, l), _)| f == file && (owner.line..=after + 1).contains(l));
    let name_only = owner.shape == "kustomize" && owner.tag.is_none() && owner.digest.is_none();
    match planned {
        Some((_, (_, to))) if name_only && text.trim() == format!("newTag: {to}") => None,
        _ => Some((after + 1, Defect::LinesAddedOrRemoved)),
    }
}

/// Whether `new` is `old` with only the version's bytes changed: the tag `from` → `to`, and
/// for a reference pinned by digest, the digest too.
fn only_the_version(old: &str, new: &str, from: &str, to: &str, r: &Reference) -> bool {
    let (old, new) = if r.digest.is_some() {
        (without_digests(old), without_digests(new))
    } else {
        (old.to_string(), new.to_string())
    };
    // A digest under a key of its own moves on its own line: the tag's line holds the tag only.
    let tag_only = |v: &str| match r.digest_line {
        Some(_) => v.split('@').next().unwrap_or(v).to_string(),
        None => without_digests(v),
    };
    let (from, to) = (tag_only(from), tag_only(to));
    old.replacen(&from, &to, 1) == new
}

/// `text` with every `sha256:<64 hex>` made `sha256:…`, to compare lines whose digests moved.
fn without_digests(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find("sha256:") {
        let hex = &rest[at + 7..];
        let len = hex.chars().take_while(char::is_ascii_hexdigit).count();
        out.push_str(&rest[..at + 7]);
        if len == 64 {
            out.push('…');
        } else {
            out.push_str(&hex[..len]);
        }
        rest = &hex[len..];
    }
    out.push_str(rest);
    out
}

/// The oracle reads the shapes the README claims, as the README says, on files written here:
/// so a mistake in the oracle cannot pass for a defect of tagpilot's, or hide one.
#[test]
fn the_oracle_reads_what_the_readme_claims() {
    let dir = tempfile::tempdir().unwrap();
    let write = |rel: &str, text: &str| {
        let path = dir.path().join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    };
    write(
        "app/deploy.yaml",
        "apiVersion: apps/v1\nkind: Deployment\nspec:\n  template:\n    spec:\n      \
         initContainers:\n        - image: busybox:1.36\n      containers:\n        \
         - image: ghcr.io/acme/api:v1.2.3@sha256:\
         0123456789012345678901234567890123456789012345678901234567890123\n---\n\
         apiVersion: v1\nkind: ConfigMap\ndata:\n  image: nginx:1.27\n",
    );
    write(
        "app/kustomization.yaml",
        "images:\n  - name: api\n    newName: quay.io/acme/api\n    newTag: 1.0.0\n  \
         - name: web\n    digest: sha256:0123456789012345678901234567890123456789012345678901234567890123\n",
    );
    write(
        "chart/values.yaml",
        "a:\n  image:\n    registry: null\n    repository: grafana/tempo\n    tag: \"\"\n\
         b:\n  image: {registry: quay.io, repository: prometheus/node-exporter, tag: v1.8.0}\n\
         c:\n  image: \"{{ .Values.global.image }}\"\n\
         d:\n  image: ingress-nginx/controller\n  tag: v1.15.1\n\
         e:\n  tag: 2.0.0 # {\"$imagepolicy\": \"flux-system:e:tag\"}\n",
    );
    write("chart/Chart.yaml", "name: chart\n");
    write(
        "chart/templates/deploy.yaml",
        "image: {{ .Values.a.image.repository }}:{{ .Values.a.image.tag }}\n",
    );
    // (file, line, shape, registry/path, tag, digest)
    type Row = (
        String,
        usize,
        String,
        String,
        Option<String>,
        Option<String>,
    );
    let listed: Vec<Row> = run_oracle(dir.path())
        .references
        .into_iter()
        .map(|r| {
            let image = format!(
                "{}/{}",
                r.registry.unwrap_or_default(),
                r.path.unwrap_or_default()
            );
            (r.file, r.line, r.shape, image, r.tag, r.digest)
        })
        .collect();
    let digest = "sha256:0123456789012345678901234567890123456789012345678901234567890123";
    let s = |v: &str| v.to_string();
    let want = vec![
        (
            s("app/deploy.yaml"),
            7,
            s("container"),
            s("docker.io/library/busybox"),
            Some(s("1.36")),
            None,
        ),
        (
            s("app/deploy.yaml"),
            9,
            s("container"),
            s("ghcr.io/acme/api"),
            Some(s("v1.2.3")),
            Some(s(digest)),
        ),
        (
            s("app/kustomization.yaml"),
            4,
            s("kustomize"),
            s("quay.io/acme/api"),
            Some(s("1.0.0")),
            None,
        ),
        (
            s("app/kustomization.yaml"),
            6,
            s("kustomize"),
            s("docker.io/library/web"),
            None,
            Some(s(digest)),
        ),
        (
            s("chart/values.yaml"),
            5,
            s("helm-map"),
            s("docker.io/grafana/tempo"),
            Some(s("")),
            None,
        ),
        (
            s("chart/values.yaml"),
            7,
            s("helm-map"),
            s("quay.io/prometheus/node-exporter"),
            Some(s("v1.8.0")),
            None,
        ),
        (
            s("chart/values.yaml"),
            12,
            s("helm-split"),
            s("docker.io/ingress-nginx/controller"),
            Some(s("v1.15.1")),
            None,
        ),
        (
            s("chart/values.yaml"),
            14,
            s("marker"),
            s("/"),
            Some(s("2.0.0")),
            None,
        ),
    ];
    assert_eq!(listed, want);
}
