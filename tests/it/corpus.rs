//! tagpilot over manifests nobody on this project wrote (`../shared/corpus`, see its README):
//! with a policy for every image found there and a registry holding a newer tag for each, the
//! plan's JSON lists exactly the lines `apply` changes, and every changed line is an image
//! version.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use tagpilot::manifest;
use tagpilot::policy::{ImagePolicy, Strategy};
use tagpilot::registry::MemoryRegistry;
use tagpilot::{apply, plan, report};

/// Every YAML file of the corpus, relative path → text.
fn corpus_files() -> BTreeMap<PathBuf, String> {
    let root = crate::support::corpus::root();
    let root = root.as_path();
    let mut out = BTreeMap::new();
    for entry in walkdir::WalkDir::new(root).sort_by_file_name() {
        let entry = entry.unwrap();
        let name = entry.file_name().to_string_lossy();
        if entry.file_type().is_file() && (name.ends_with(".yaml") || name.ends_with(".yml")) {
            let rel = entry.path().strip_prefix(root).unwrap().to_path_buf();
            let text = std::fs::read_to_string(entry.path()).unwrap();
            out.insert(rel, text);
        }
    }
    out
}

/// A tag of the same shape that ranks higher: the first run of digits becomes 99
/// (`v0.10.3` → `v99.10.3`, `7.0.7-alpine` → `99.0.7-alpine`); `None` for tags without digits.
fn newer(tag: &str) -> Option<String> {
    let start = tag.find(|c: char| c.is_ascii_digit())?;
    let len = tag[start..]
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(tag.len() - start);
    Some(format!("{}99{}", &tag[..start], &tag[start + len..]))
}

#[tokio::test]
async fn plan_json_lists_exactly_the_lines_apply_changes() {
    let files = corpus_files();
    assert!(
        files.len() > 100,
        "only {} YAML files in the corpus",
        files.len()
    );

    // The images the corpus names, and the tags it is on.
    let mut images: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (rel, text) in &files {
        let Ok(fields) = manifest::scan(rel, text, &[]) else {
            continue;
        };
        for field in fields {
            if let Some(repo) = field.repository() {
                let tags = images.entry(repo.to_string()).or_default();
                tags.extend(field.current().0.map(str::to_string));
            }
        }
    }
    assert!(images.len() > 5, "{images:?}");

    let mut registry_yaml = String::new();
    let mut policies = Vec::new();
    for (i, (repo, current)) in images.iter().enumerate() {
        let mut tags: BTreeSet<String> = current.clone();
        tags.extend(current.iter().filter_map(|t| newer(t)));
        // A version for images the corpus names only by placeholder (`CONTAINER_IMAGES_TAG`),
        // which must still be held.
        tags.insert("1.0.0".to_string());
        let tags: Vec<String> = tags.iter().map(|t| format!("{t:?}")).collect();
        registry_yaml.push_str(&format!("{repo:?}:\n  tags: [{}]\n", tags.join(", ")));
        let mut policy = ImagePolicy::adhoc(repo, Strategy::semver(None, false).unwrap()).unwrap();
        policy.name = format!("image-{i}");
        policies.push(policy);
    }
    let registry = MemoryRegistry::from_yaml(&registry_yaml).expect("registry");

    let work = tempfile::tempdir().unwrap();
    for (rel, text) in &files {
        let dest = work.path().join(rel);
        std::fs::create_dir_all(dest.parent().unwrap()).unwrap();
        std::fs::write(dest, text).unwrap();
    }
    let scope = plan::Scope::local(work.path());
    let planned = plan::plan(&scope, &policies, &registry, &())
        .await
        .expect("plan");
    assert!(planned.problems.is_empty(), "{:?}", planned.problems);

    // What the JSON says will change: file → lines, each with the version it moves to.
    let json: serde_json::Value =
        serde_json::from_str(&report::render(&planned, report::Format::Json).unwrap()).unwrap();
    let mut listed: BTreeMap<String, BTreeMap<usize, String>> = BTreeMap::new();
    for change in json["changes"].as_array().expect("changes") {
        let file = change["file"].as_str().unwrap().to_string();
        let line = change["line"].as_u64().unwrap() as usize;
        let to = change["to"].as_str().unwrap().to_string();
        let before = listed.entry(file).or_default().insert(line, to);
        assert!(before.is_none(), "two changes on one line: {change}");
    }
    assert!(
        listed.values().map(BTreeMap::len).sum::<usize>() > 10,
        "too few changes to show anything: {listed:?}"
    );
    assert!(
        !listed.keys().any(|f| f.contains("/templates/")),
        "a Helm template was edited: {listed:?}"
    );

    eprintln!(
        "{} changes, {} held, {} skipped",
        planned.changes.len(),
        planned.holds.len(),
        planned.skipped.len()
    );
    apply::write_files(work.path(), &planned.files).expect("apply");

    // What apply changed, line by line.
    let mut changed: BTreeMap<String, BTreeMap<usize, String>> = BTreeMap::new();
    for (rel, before) in &files {
        let after = std::fs::read_to_string(work.path().join(rel)).unwrap();
        if &after == before {
            continue;
        }
        let file = rel.to_string_lossy().replace('\\', "/");
        let (old, new): (Vec<&str>, Vec<&str>) =
            (before.lines().collect(), after.lines().collect());
        assert_eq!(old.len(), new.len(), "{file}: lines were added or removed");
        for (n, (a, b)) in old.iter().zip(&new).enumerate() {
            if a != b {
                changed
                    .entry(file.clone())
                    .or_default()
                    .insert(n + 1, b.to_string());
            }
        }
    }

    let lines = |m: &BTreeMap<String, BTreeMap<usize, String>>| -> Vec<(String, usize)> {
        m.iter()
            .flat_map(|(f, l)| l.keys().map(move |n| (f.clone(), *n)))
            .collect()
    };
    assert_eq!(lines(&listed), lines(&changed), "plan and apply disagree");
    // Every changed line now holds the version the plan names, and differs from the original
    // only there.
    for (file, lines) in &changed {
        for (n, text) in lines {
            let to = &listed[file][n];
            assert!(
                text.contains(to.as_str()),
                "{file}:{n}: {text:?} does not hold {to}"
            );
            let original = files[Path::new(file)].lines().nth(n - 1).unwrap();
            let from = planned
                .changes
                .iter()
                .find(|c| &c.file == file && c.line == *n)
                .map(|c| c.from.clone())
                .unwrap();
            // A reference without a version gains one (`image: adservice` → `…:1.0.0`).
            let expected = match from.as_str() {
                "(none)" => format!("{original}:{to}"),
                from => original.replacen(from, to, 1),
            };
            assert_eq!(expected, *text, "{file}:{n}: more than the version changed");
        }
    }
}
