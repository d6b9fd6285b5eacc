//! Finding and reading policy files, and the checks that span files: duplicate names,
//! targets naming repositories `tagpilot.yaml` does not configure, and `promote.from` naming
//! what exists.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::path::{Path, PathBuf};

use crate::config::{Config, PolicySource};

use super::{ImagePolicy, PolicyError, PolicyErrors, SourceLocation, Upstream, validate};

/// What `tagpilot check` reports when everything is valid.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckSummary {
    /// Every policy file read, in the order read, with the names of the policies it defines.
    pub files: Vec<FileSummary>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileSummary {
    pub path: PathBuf,
    pub policies: Vec<String>,
}

impl CheckSummary {
    pub fn policy_count(&self) -> usize {
        self.files.iter().map(|f| f.policies.len()).sum()
    }
}

impl fmt::Display for CheckSummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for file in &self.files {
            writeln!(
                f,
                "{}: {} ({})",
                file.path.display(),
                file.policies.len(),
                file.policies.join(", ")
            )?;
        }
        let n = self.policy_count();
        write!(
            f,
            "{n} polic{} in {} file{}: OK",
            if n == 1 { "y" } else { "ies" },
            self.files.len(),
            if self.files.len() == 1 { "" } else { "s" }
        )
    }
}

/// Every valid policy, and the problems of the others.
#[derive(Debug)]
pub struct Loaded {
    /// The policies without any problem, in file order.
    pub policies: Vec<ImagePolicy>,
    /// Every problem found, in file order, each naming its file (and `line:column` where the
    /// problem is in a file's text).
    pub errors: Vec<PolicyError>,
}

/// Reads and validates every policy `config.policies` names; all or nothing, for `tagpilot
/// check` and for callers that must not act on part of a policy set.
pub fn load(config: &Config) -> Result<Vec<ImagePolicy>, PolicyErrors> {
    let (_, policies, errors) = read_all(config);
    if errors.is_empty() {
        Ok(policies)
    } else {
        Err(PolicyErrors(errors))
    }
}

/// Reads every policy `config.policies` names and keeps going past broken ones: one bad policy
/// must not stop the others from being planned (the README promises it). A policy with any
/// problem is left out, and so is every policy sharing a duplicated name, since a marker naming
/// it could mean either.
pub fn load_all(config: &Config) -> Loaded {
    let (_, policies, errors) = read_all(config);
    // Problems in a single document already kept its policy out; what is left are the
    // cross-policy checks, which name the policy at its `metadata.name`.
    let mut bad: HashSet<&SourceLocation> = HashSet::new();
    let mut duplicated: HashSet<&str> = HashSet::new();
    for e in &errors {
        match e {
            PolicyError::Invalid {
                location,
                policy: Some(_),
                ..
            } => {
                bad.insert(location);
            }
            PolicyError::Duplicate { name, .. } => {
                duplicated.insert(name);
            }
            _ => {}
        }
    }
    let keep: Vec<bool> = policies
        .iter()
        .map(|p| !bad.contains(&p.source) && !duplicated.contains(p.name.as_str()))
        .collect();
    let policies = policies
        .into_iter()
        .zip(keep)
        .filter_map(|(p, keep)| keep.then_some(p))
        .collect();
    Loaded { policies, errors }
}

/// What `tagpilot check` runs: loads every policy (no network) and summarises per file, or
/// returns every problem.
pub fn check(config: &Config) -> Result<CheckSummary, PolicyErrors> {
    let (files, _, errors) = read_all(config);
    if errors.is_empty() {
        Ok(CheckSummary { files })
    } else {
        Err(PolicyErrors(errors))
    }
}

/// Parses and validates the policy documents in one file's text. `path` is used for messages.
pub fn parse_file(path: &Path, text: &str) -> Result<Vec<ImagePolicy>, PolicyErrors> {
    let mut errors = Vec::new();
    let policies = parse_documents(path, text, &mut errors);
    let mut seen = HashMap::new();
    check_duplicates(&policies, &mut seen, &mut errors);
    if errors.is_empty() {
        Ok(policies)
    } else {
        Err(PolicyErrors(errors))
    }
}

fn read_all(config: &Config) -> (Vec<FileSummary>, Vec<ImagePolicy>, Vec<PolicyError>) {
    let mut errors = Vec::new();
    let files = policy_files(config, &mut errors);
    let mut summaries = Vec::new();
    let mut policies = Vec::new();
    let mut seen = HashMap::new();
    for path in files {
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(source) => {
                errors.push(PolicyError::Read { path, source });
                continue;
            }
        };
        let parsed = parse_documents(&path, &text, &mut errors);
        check_duplicates(&parsed, &mut seen, &mut errors);
        summaries.push(FileSummary {
            path,
            policies: parsed.iter().map(|p| p.name.clone()).collect(),
        });
        policies.extend(parsed);
    }
    check_repositories(config, &policies, &mut errors);
    check_promotions(config, &policies, &mut errors);
    (summaries, policies, errors)
}

/// A target naming a repository must name one configured in `tagpilot.yaml`; otherwise the
/// policy would silently never apply.
fn check_repositories(config: &Config, policies: &[ImagePolicy], errors: &mut Vec<PolicyError>) {
    for p in policies {
        for name in p.targets.iter().filter_map(|t| t.repository.as_deref()) {
            if !config.repositories.iter().any(|r| r.name == name) {
                let known: Vec<&str> = config
                    .repositories
                    .iter()
                    .map(|r| r.name.as_str())
                    .collect();
                errors.push(PolicyError::Invalid {
                    location: p.source.clone(),
                    policy: Some(p.name.clone()),
                    message: format!(
                        "targets name repository {name:?}, which tagpilot.yaml does not configure (repositories: {})",
                        if known.is_empty() { "none".to_string() } else { known.join(", ") }
                    ),
                    error: None,
                });
            }
        }
    }
}

/// `promote.from` must name what exists: a repository `tagpilot.yaml` configures, a policy
/// that is defined and follows the same image, and no chain that comes back to the policy
/// itself (it would wait for itself for ever).
fn check_promotions(config: &Config, policies: &[ImagePolicy], errors: &mut Vec<PolicyError>) {
    let by_name: HashMap<&str, &ImagePolicy> =
        policies.iter().map(|p| (p.name.as_str(), p)).collect();
    for p in policies {
        let Some(promote) = &p.promote else { continue };
        let mut problem = |message: String| {
            errors.push(PolicyError::Invalid {
                location: p.source.clone(),
                policy: Some(p.name.clone()),
                message,
                error: None,
            })
        };
        for upstream in &promote.from {
            let (repository, policy) = match upstream {
                Upstream::Application { .. } => continue,
                Upstream::Path { repository, .. } => (repository, None),
                Upstream::Policy { name, repository } => (repository, Some(name)),
            };
            if let Some(name) = repository
                && !config.repositories.iter().any(|r| &r.name == name)
            {
                problem(format!(
                    "promote.from names repository {name:?}, which tagpilot.yaml does not configure"
                ));
            }
            let Some(name) = policy else { continue };
            match by_name.get(name.as_str()) {
                None => problem(format!(
                    "promote.from names policy {name:?}, which is not defined"
                )),
                Some(up) if up.image != p.image => problem(format!(
                    "promote.from names policy {name:?}, which follows {}, not {}",
                    up.image, p.image
                )),
                Some(_) => {}
            }
        }
        if promotes_from_itself(p, &by_name) {
            problem(
                "promote.from leads back to this policy; an environment cannot wait for itself"
                    .to_string(),
            );
        }
    }
}

/// Whether following `policy:` upstreams from `start` comes back to it.
fn promotes_from_itself(start: &ImagePolicy, by_name: &HashMap<&str, &ImagePolicy>) -> bool {
    let mut seen: HashSet<&str> = HashSet::new();
    let mut next: Vec<&ImagePolicy> = vec![start];
    while let Some(p) = next.pop() {
        for upstream in p.promote.iter().flat_map(|pr| &pr.from) {
            let Upstream::Policy { name, .. } = upstream else {
                continue;
            };
            if name == &start.name {
                return true;
            }
            if seen.insert(name.as_str())
                && let Some(up) = by_name.get(name.as_str())
            {
                next.push(up);
            }
        }
    }
    false
}

fn check_duplicates(
    policies: &[ImagePolicy],
    seen: &mut HashMap<String, SourceLocation>,
    errors: &mut Vec<PolicyError>,
) {
    // Names are unique regardless of namespace: tagpilot's own markers (`# tagpilot: NAME`)
    // name a policy without one, so two namespaces sharing a name would make them ambiguous.
    for p in policies {
        if let Some(first) = seen.get(&p.name) {
            errors.push(PolicyError::Duplicate {
                name: p.name.clone(),
                location: p.source.clone(),
                first: first.clone(),
            });
        } else {
            seen.insert(p.name.clone(), p.source.clone());
        }
    }
}

/// The files `policies:` names, in a stable order: directories are walked recursively for
/// `*.yaml` / `*.yml`, skipping hidden entries (`.git`), and sorted.
fn policy_files(config: &Config, errors: &mut Vec<PolicyError>) -> Vec<PathBuf> {
    let base = config.base_dir();
    let entries: Vec<PathBuf> = match &config.policies {
        PolicySource::Directory(d) => vec![base.join(d)],
        PolicySource::Files(list) => list.iter().map(|f| base.join(f)).collect(),
    };
    let mut out = Vec::new();
    for entry in entries {
        match std::fs::metadata(&entry) {
            Ok(m) if m.is_dir() => {
                let mut found = Vec::new();
                let walker = walkdir::WalkDir::new(&entry)
                    .follow_links(true)
                    .into_iter()
                    .filter_entry(|e| {
                        e.depth() == 0 || !e.file_name().to_string_lossy().starts_with('.')
                    });
                for item in walker {
                    match item {
                        Ok(e) if e.file_type().is_file() && is_yaml(e.path()) => {
                            found.push(e.into_path())
                        }
                        Ok(_) => {}
                        Err(err) => {
                            let path = err
                                .path()
                                .map(Path::to_path_buf)
                                .unwrap_or_else(|| entry.clone());
                            let source = err
                                .into_io_error()
                                .unwrap_or_else(|| std::io::Error::other("filesystem loop"));
                            errors.push(PolicyError::Read { path, source });
                        }
                    }
                }
                found.sort();
                out.extend(found);
            }
            Ok(_) => out.push(entry),
            Err(source) => errors.push(PolicyError::Read {
                path: entry,
                source,
            }),
        }
    }
    out
}

fn is_yaml(path: &Path) -> bool {
    matches!(
        path.extension().and_then(|e| e.to_str()),
        Some("yaml" | "yml")
    )
}

/// Splits a file into YAML documents at column-0 `---` lines, so a broken document does not
/// hide the problems of the ones after it, and parses each with its true line numbers.
pub(super) fn parse_documents(
    path: &Path,
    text: &str,
    errors: &mut Vec<PolicyError>,
) -> Vec<ImagePolicy> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let first_error = errors.len();
    let mut policies = Vec::new();
    for (offset, doc) in split_documents(text) {
        if is_blank_document(doc) {
            continue;
        }
        if let Some(p) = validate::document(path, offset, doc, errors) {
            policies.push(p);
        }
    }
    // In file order, whatever order the checks ran in.
    errors[first_error..].sort_by_key(|e| e.location().map(|l| (l.line, l.column)));
    policies
}

/// `(lines before the document, document text)` for each document of a YAML stream.
fn split_documents(text: &str) -> Vec<(usize, &str)> {
    let mut docs = Vec::new();
    let mut start = 0;
    let mut start_line = 0;
    let mut pos = 0;
    for (line_no, line) in text.split_inclusive('\n').enumerate() {
        let is_marker =
            line.starts_with("---") && line[3..].chars().next().is_none_or(|c| c.is_whitespace());
        if is_marker && pos > start {
            docs.push((start_line, &text[start..pos]));
            start = pos;
            start_line = line_no;
        }
        pos += line.len();
    }
    if pos > start || docs.is_empty() {
        docs.push((start_line, &text[start..]));
    }
    docs
}

fn is_blank_document(doc: &str) -> bool {
    doc.lines().all(|l| {
        let t = l.trim();
        t.is_empty()
            || t.starts_with('#')
            || t == "---"
            || t == "..."
            || (l.starts_with("---") && t[3..].trim_start().starts_with('#'))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::Strategy;

    const GOOD: &str = r#"
apiVersion: tagpilot.dev/v1alpha1
kind: ImagePolicy
metadata:
  name: checkout-api
spec:
  image: 127.0.0.1:5000/shop/checkout-api
  strategy:
    semver: {range: ">=1.2.0, <2.0.0"}
  ignoreTags: ["*-debug"]
  targets:
    - paths: ["apps/checkout/**"]
      helm: {repository: image.repository, tag: image.tag}
---
apiVersion: tagpilot.dev/v1alpha1
kind: ImagePolicy
metadata:
  name: builds
  namespace: flux-system
spec:
  image: nginx
  strategy:
    newestBuild:
"#;

    fn errors(text: &str) -> Vec<String> {
        match parse_file(Path::new("p.yaml"), text) {
            Ok(_) => Vec::new(),
            Err(e) => e.0.iter().map(|e| e.to_string()).collect(),
        }
    }

    /// Which Application directories a target may write under: what passes a policy's holds
    /// (and its upstreams') down to a promotion from that Application.
    #[test]
    fn a_target_may_write_under_the_directories_its_globs_reach() {
        let target = |paths: &str| {
            let text = GOOD.replacen(r#"["apps/checkout/**"]"#, paths, 1);
            parse_file(Path::new("p.yaml"), &text).unwrap()[0].targets[0].clone()
        };
        let checkout = target(r#"["apps/checkout/**"]"#);
        for dir in [
            "apps/checkout",
            "apps/checkout/prod",
            "apps",
            "",
            ".",
            "/apps/",
        ] {
            assert!(checkout.may_write_under(dir), "{dir}");
        }
        for dir in ["apps/check", "apps/checkout-v2", "envs"] {
            assert!(!checkout.may_write_under(dir), "{dir}");
        }
        let wide = target(r#"["**/values.yaml"]"#);
        assert!(wide.may_write_under("envs/staging"));
        let file = target(r#"["envs/prod/values.yaml"]"#);
        assert!(file.may_write_under("envs/prod") && !file.may_write_under("envs/staging"));
        let named = target(r#"["envs/*/values.yaml"]"#);
        assert!(named.may_write_under("envs/staging") && !named.may_write_under("apps"));
    }

    #[test]
    fn parses_several_documents() {
        let policies = parse_file(Path::new("p.yaml"), GOOD).unwrap();
        assert_eq!(policies.len(), 2);
        assert_eq!(policies[0].name, "checkout-api");
        assert_eq!(policies[0].source.line, 5);
        assert_eq!(policies[1].source.line, 18);
        assert_eq!(policies[1].qualified_name(), "flux-system:builds");
        assert!(matches!(policies[1].strategy, Strategy::NewestBuild));
        assert_eq!(policies[1].image.path, "library/nginx");
        let t = &policies[0].targets[0];
        assert!(t.matches(Path::new("apps/checkout/deploy/values.yaml")));
        assert!(!t.matches(Path::new("apps/cart/values.yaml")));
        assert_eq!(t.helm.as_ref().unwrap().tag.as_deref(), Some("image.tag"));
        assert!(policies[0].ignore_set.is_match("1.2.3-debug"));
    }

    #[test]
    fn errors_point_at_the_value_with_line_and_column() {
        let text = GOOD.replace(">=1.2.0, <2.0.0", ">=1.2.0, <<2");
        let errs = errors(&text);
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert!(errs[0].starts_with("p.yaml:9:"), "{}", errs[0]);
        assert!(errs[0].contains("policy \"checkout-api\""), "{}", errs[0]);
    }

    #[test]
    fn a_broken_document_does_not_hide_the_next_one() {
        let text = GOOD
            .replace(
                "name: checkout-api\nspec:",
                "name: checkout-api\n  colour: red\nspec:",
            )
            .replace(
                "newestBuild:\n",
                "newestBuild:\n    digest: {tag: stable}\n",
            );
        let errs = errors(&text);
        assert_eq!(errs.len(), 2, "{errs:?}");
        assert!(errs[0].contains("p.yaml:6:"), "{}", errs[0]);
        assert!(errs[1].contains("newestBuild and digest"), "{}", errs[1]);
        assert!(errs[1].starts_with("p.yaml:"), "{}", errs[1]);
    }

    #[test]
    fn split_keeps_line_numbers() {
        let docs = split_documents("a: 1\n---\nb: 2\n--- # c\nc: 3\n");
        assert_eq!(
            docs,
            vec![(0, "a: 1\n"), (1, "---\nb: 2\n"), (3, "--- # c\nc: 3\n")]
        );
        assert_eq!(split_documents(""), vec![(0, "")]);
    }
}
