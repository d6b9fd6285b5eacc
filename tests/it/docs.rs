//! The book under `docs/` and the pages beside the code: what is generated from the code
//! matches it, every link between pages resolves, and every configuration example marked for
//! checking passes `tagpilot check`.
//!
//! `TAGPILOT_BLESS=1 cargo test --test it docs::` rewrites the generated pages.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use crate::support::bin::{output_text, run_tagpilot};

fn checkout() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn bless() -> bool {
    std::env::var_os("TAGPILOT_BLESS").is_some()
}

/// Compares a generated page with the one in the book, or rewrites it when blessing.
fn matches_the_code(rel: &str, generated: &str) {
    let path = checkout().join(rel);
    if bless() {
        std::fs::write(&path, generated).unwrap();
        return;
    }
    let written = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        written == generated,
        "{rel} no longer matches the code; regenerate it with \
         `TAGPILOT_BLESS=1 cargo test --test it docs::` and review the diff"
    );
}

#[test]
fn the_command_line_reference_is_the_flags() {
    matches_the_code(
        "docs/src/reference/cli.md",
        &tagpilot::cli::docs::reference_markdown(),
    );
}

#[test]
fn the_metrics_reference_is_every_registered_series() {
    let metrics = tagpilot::run::metrics::Metrics::with_image_updater(true);
    let mut page = String::from(
        "# Metrics\n\n\
         <!-- Generated from the code by `TAGPILOT_BLESS=1 cargo test --test it docs::`; \
         a test fails when this page and the registered metrics disagree. -->\n\n\
         Every series `tagpilot run` serves on `/metrics`, as registered in the code. A \
         counter's series get the `_total` suffix; a histogram's `_bucket`, `_sum` and \
         `_count`. The `argocd_image_updater_…` series are served only with \
         `--image-updater-metrics`. Alerts to set on them are in \
         [Metrics and alerts](../operations/metrics.md).\n\n\
         | series | type | what it counts |\n|---|---|---|\n",
    );
    for family in metrics.described() {
        let name = match family.kind {
            "counter" if !family.name.ends_with("_total") => format!("{}_total", family.name),
            _ => family.name.clone(),
        };
        let help = family.help.trim_end_matches('.').replace('|', "\\|");
        page.push_str(&format!("| `{name}` | {} | {help} |\n", family.kind));
    }
    assert!(
        page.contains("tagpilot_cycles_total"),
        "no metric described"
    );
    matches_the_code("docs/src/reference/metrics.md", &page);
}

/// The Markdown pages a reader follows links between: the book, and the pages at the root.
fn pages() -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = ["README.md", "ARCHITECTURE.md", "CONTRIBUTING.md"]
        .iter()
        .map(|p| checkout().join(p))
        .collect();
    for entry in walkdir::WalkDir::new(checkout().join("docs/src")).sort_by_file_name() {
        let entry = entry.unwrap();
        if entry.path().extension().is_some_and(|e| e == "md") {
            out.push(entry.into_path());
        }
    }
    out
}

/// The anchors mdBook (and GitHub) give a page's headings: lower case, punctuation dropped,
/// spaces as `-`.
fn anchors(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.starts_with("```") {
            fenced = !fenced;
        }
        if fenced || !line.starts_with('#') {
            continue;
        }
        let title = line.trim_start_matches('#').trim();
        let anchor: String = title
            .to_lowercase()
            .chars()
            .filter_map(|c| match c {
                ' ' => Some('-'),
                c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
                _ => None,
            })
            .collect();
        out.insert(anchor);
    }
    out
}

/// Every `](target)` outside code, with its line.
fn links(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut fenced = false;
    for (n, line) in text.lines().enumerate() {
        if line.starts_with("```") {
            fenced = !fenced;
        }
        if fenced {
            continue;
        }
        let mut rest = line;
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            let Some(end) = after.find(')') else { break };
            out.push((n + 1, after[..end].to_owned()));
            rest = &after[end..];
        }
    }
    out
}

#[test]
fn every_link_between_pages_resolves() {
    let mut broken = Vec::new();
    for page in pages() {
        let text = std::fs::read_to_string(&page).unwrap();
        for (line, target) in links(&text) {
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            let (file, anchor) = match target.split_once('#') {
                Some((file, anchor)) => (file, Some(anchor)),
                None => (target.as_str(), None),
            };
            let resolved = if file.is_empty() {
                page.clone()
            } else {
                page.parent().unwrap().join(file)
            };
            let where_ = format!(
                "{}:{line}: {target}",
                page.strip_prefix(checkout()).unwrap().display()
            );
            if !resolved.exists() {
                broken.push(format!("{where_} (no such file)"));
                continue;
            }
            if let Some(anchor) = anchor
                && resolved.extension().is_some_and(|e| e == "md")
            {
                let target_text = std::fs::read_to_string(&resolved).unwrap();
                if !anchors(&target_text).contains(anchor) {
                    broken.push(format!("{where_} (no such heading)"));
                }
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn every_page_of_the_book_is_in_its_summary_and_every_summary_entry_exists() {
    let src = checkout().join("docs/src");
    let summary = std::fs::read_to_string(src.join("SUMMARY.md")).unwrap();
    let listed: BTreeSet<String> = links(&summary).into_iter().map(|(_, t)| t).collect();
    for entry in &listed {
        assert!(
            src.join(entry).exists(),
            "SUMMARY.md lists {entry}, which does not exist"
        );
    }
    for page in pages() {
        let Ok(rel) = page.strip_prefix(&src) else {
            continue;
        };
        let rel = rel.to_string_lossy().into_owned();
        if rel == "SUMMARY.md" {
            continue;
        }
        assert!(
            listed.contains(&rel),
            "docs/src/{rel} is not in SUMMARY.md, so the book never shows it"
        );
    }
}

/// What a marked example is: `<!-- check: tagpilot.yaml -->` or `<!-- check: policy -->` on
/// the line before its fence.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Example {
    Config,
    Policy,
}

fn examples(text: &str) -> Vec<(usize, Example, String)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let kind = match lines[i].trim() {
            "<!-- check: tagpilot.yaml -->" => Some(Example::Config),
            "<!-- check: policy -->" => Some(Example::Policy),
            _ => None,
        };
        if let Some(kind) = kind {
            assert!(
                lines.get(i + 1).is_some_and(|l| l.starts_with("```yaml")),
                "line {}: a check marker must stand right above a ```yaml fence",
                i + 1
            );
            let start = i + 2;
            let end = start
                + lines[start..]
                    .iter()
                    .position(|l| l.starts_with("```"))
                    .expect("an unclosed fence");
            out.push((start, kind, lines[start..end].join("\n") + "\n"));
            i = end;
        }
        i += 1;
    }
    out
}

/// Every example marked for checking is a `tagpilot.yaml` or a policy that `tagpilot check`
/// reads without an error: the book never shows a setting tagpilot refuses.
#[test]
fn every_marked_configuration_example_passes_check() {
    let mut checked = 0;
    let mut failures = Vec::new();
    for page in pages() {
        let text = std::fs::read_to_string(&page).unwrap();
        for (line, kind, yaml) in examples(&text) {
            let dir = tempfile::tempdir().unwrap();
            std::fs::create_dir(dir.path().join("policies")).unwrap();
            match kind {
                Example::Config => {
                    std::fs::write(dir.path().join("tagpilot.yaml"), &yaml).unwrap();
                }
                Example::Policy => {
                    std::fs::write(dir.path().join("tagpilot.yaml"), "policies: policies/\n")
                        .unwrap();
                    std::fs::write(dir.path().join("policies/example.yaml"), &yaml).unwrap();
                }
            }
            let out = run_tagpilot(dir.path(), &["check"], &[]);
            checked += 1;
            let text = output_text(&out);
            // A policy's targets find no file in an empty directory: that finding is about
            // the directory, not the example. Anything else is an error in the example.
            let only_empty_directory = text
                .lines()
                .filter(|l| l.contains("error") || l.contains("problem"))
                .all(|l| l.contains("match no file") || l.contains("no_files"));
            if !out.status.success() && !only_empty_directory {
                failures.push(format!(
                    "{}:{line}:\n{text}",
                    page.strip_prefix(checkout()).unwrap().display()
                ));
            }
        }
    }
    assert!(
        checked >= 5,
        "only {checked} examples are marked for checking"
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The published JSON Schemas (`docs/schemas/`) are what `tagpilot schema` prints, made from
/// the types the readers fill.
#[test]
fn the_published_schemas_are_the_readers_types() {
    use tagpilot::cli::docs::{SchemaOf, schema};
    matches_the_code(
        "docs/schemas/tagpilot.schema.json",
        &schema(SchemaOf::Config),
    );
    matches_the_code(
        "docs/schemas/image-policy.schema.json",
        &schema(SchemaOf::Policy),
    );
}

/// Every policy and `tagpilot.yaml` this repository ships validates against its schema, as an
/// editor's YAML language server would check it (Python's `jsonschema`, from the tools'
/// virtualenv), and a document with a misspelt field does not: the schemas are neither too
/// strict for real files nor too loose to catch a typo.
#[test]
fn the_schemas_accept_every_shipped_file_and_refuse_a_typo() {
    let python = crate::deploy::tools().join("venv/bin/python");
    let mut configs = vec![];
    let mut policies = vec![];
    for root in ["policies", "examples"] {
        for entry in walkdir::WalkDir::new(checkout().join(root)).sort_by_file_name() {
            let entry = entry.unwrap();
            let path = entry.path();
            if path.extension().is_none_or(|e| e != "yaml") {
                continue;
            }
            if path.file_name().is_some_and(|n| n == "tagpilot.yaml") {
                configs.push(path.to_path_buf());
            } else if std::fs::read_to_string(path)
                .unwrap()
                .contains("kind: ImagePolicy")
            {
                policies.push(path.to_path_buf());
            }
        }
    }
    assert!(
        configs.len() >= 2 && policies.len() >= 8,
        "{configs:?} {policies:?}"
    );
    let typo = tempfile::tempdir().unwrap();
    let typo_policy = typo.path().join("typo.yaml");
    std::fs::write(
        &typo_policy,
        "apiVersion: tagpilot.dev/v1alpha1\nkind: ImagePolicy\nmetadata: {name: a}\nspec:\n  \
         image: a/b\n  strategy: {semver: {}}\n  targets: [{pats: [\"**\"]}]\n",
    )
    .unwrap();
    let script = r#"
import json, sys, yaml, jsonschema
schema = json.load(open(sys.argv[1]))
bad = []
for path in sys.argv[2:]:
    for doc in yaml.safe_load_all(open(path)):
        if doc is None or (doc.get("kind") not in (None, "ImagePolicy")):
            continue
        for error in jsonschema.Draft202012Validator(schema).iter_errors(doc):
            bad.append(f"{path}: {error.json_path}: {error.message}")
print("\n".join(bad))
"#;
    let check = |schema: &str, files: &[PathBuf]| -> String {
        let out = std::process::Command::new(&python)
            .arg("-c")
            .arg(script)
            .arg(checkout().join(schema))
            .args(files)
            .output()
            .expect("run python");
        assert!(out.status.success(), "{}", output_text(&out));
        String::from_utf8(out.stdout).unwrap()
    };
    assert_eq!(
        check("docs/schemas/tagpilot.schema.json", &configs).trim(),
        ""
    );
    assert_eq!(
        check("docs/schemas/image-policy.schema.json", &policies).trim(),
        ""
    );
    let refused = check("docs/schemas/image-policy.schema.json", &[typo_policy]);
    assert!(
        refused.contains("pats"),
        "a misspelt field passed: {refused:?}"
    );
}

/// A shell example of the book marked `<!-- run: IMAGE TAG…; IMAGE TAG… -->` on the line above
/// its fence: the images it names, with those tags.
struct Runnable {
    at: String,
    images: Vec<(String, Vec<String>)>,
    commands: Vec<String>,
}

fn runnables() -> Vec<Runnable> {
    let mut out = Vec::new();
    for page in pages() {
        let text = std::fs::read_to_string(&page).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        for (i, line) in lines.iter().enumerate() {
            let Some(spec) = line
                .trim()
                .strip_prefix("<!-- run: ")
                .and_then(|s| s.strip_suffix(" -->"))
            else {
                continue;
            };
            assert!(
                lines.get(i + 1).is_some_and(|l| l.starts_with("```sh")),
                "{}:{}: a run marker must stand right above a ```sh fence",
                page.display(),
                i + 1
            );
            let images = spec
                .split(';')
                .map(|image| {
                    let mut words = image.split_whitespace().map(str::to_owned);
                    (words.next().unwrap(), words.collect())
                })
                .collect();
            let commands = lines[i + 2..]
                .iter()
                .take_while(|l| !l.starts_with("```"))
                .map(|l| l.to_string())
                .collect();
            out.push(Runnable {
                at: format!(
                    "{}:{}",
                    page.strip_prefix(checkout()).unwrap().display(),
                    i + 1
                ),
                images,
                commands,
            });
        }
    }
    out
}

/// Every shell example marked runnable runs, each command exiting 0, against the real registry
/// holding the images its marker names (its `127.0.0.1:5000` is that registry's address).
#[tokio::test]
async fn every_runnable_shell_example_runs_against_the_real_registry() {
    use crate::support::registry::{Auth, ImageSpec, TestRegistry};
    let examples = runnables();
    assert!(!examples.is_empty(), "no shell example is marked runnable");
    let bin_dir = Path::new(env!("CARGO_BIN_EXE_tagpilot")).parent().unwrap();
    for example in examples {
        let registry = TestRegistry::start(Auth::None).await;
        for (image, tags) in &example.images {
            let path = image.strip_prefix("127.0.0.1:5000/").unwrap_or_else(|| {
                panic!(
                    "{}: {image} is not on the lab registry 127.0.0.1:5000",
                    example.at
                )
            });
            let tags: Vec<&str> = tags.iter().map(String::as_str).collect();
            registry.push_tags(path, &tags, ImageSpec::default()).await;
        }
        let dir = tempfile::tempdir().unwrap();
        for command in &example.commands {
            let command = command.replace("127.0.0.1:5000", &registry.host());
            let out = std::process::Command::new("bash")
                .arg("-c")
                .arg(&command)
                .current_dir(dir.path())
                .env("PATH", format!("{}:/usr/bin:/bin", bin_dir.display()))
                .env("HOME", dir.path())
                .output()
                .unwrap();
            eprintln!("{}: $ {command}\n{}", example.at, output_text(&out));
            assert!(
                out.status.success(),
                "{}: `{command}` failed:\n{}",
                example.at,
                output_text(&out)
            );
        }
    }
}
