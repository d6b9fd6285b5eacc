//! The Applications that deploy from git, indexed once per cycle by what the matching rule
//! compares: the normalised repository URL, then each source's directory and the `$<ref>/…`
//! value files it deploys. Which Applications a change deploys is then a lookup per changed
//! file (its parent directories, the file itself), not a scan of every Application with a URL
//! normalised per pair: 1,000 change groups over 20,000 Applications cost 1,000 × the files'
//! depth, not 20 million comparisons. The revision is checked on the sources found, so one
//! index answers for every branch. The rule is [`super::source_deploys`]'s and
//! [`super::tracks_branch`]'s; the tests hold the index to the scan it replaces.

use std::collections::{BTreeMap, HashMap};

use crate::application::Application;

use super::{AffectedApplication, Deployed, OtherRevision, normalise_url, tracks_branch};

/// One source: the Application's position in the indexed list and the source's (both 0-based).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct SourceAt {
    app: u32,
    source: u32,
}

/// The sources of one repository.
#[derive(Debug, Default)]
struct RepositorySources {
    /// By the directory a source deploys (`""` for the whole repository).
    by_dir: HashMap<Box<str>, Vec<SourceAt>>,
    /// By a `$<ref>/…` value file a `ref:` source deploys, relative to the repository root.
    by_value_file: HashMap<Box<str>, Vec<SourceAt>>,
}

/// Where each source of a list of Applications deploys from, by normalised repository URL.
/// Built from the same list that [`Index::containing`] is then asked with.
#[derive(Debug, Default)]
pub struct Index {
    by_url: HashMap<String, RepositorySources>,
}

/// A source's `path` as the index keys it: no leading `./`, no `/` at either end, and `""` for
/// the whole repository (an empty path or `.`), as [`super::contains_file`] reads it.
fn dir_key(path: &str) -> &str {
    let path = path.trim_matches('/').trim_start_matches("./");
    if path == "." { "" } else { path }
}

impl Index {
    pub fn new(apps: &[Application]) -> Self {
        let mut by_url: HashMap<String, RepositorySources> = HashMap::new();
        for (a, app) in apps.iter().enumerate() {
            for (s, source) in app.sources().iter().enumerate() {
                // A chart from a Helm repository deploys no file of a git repository.
                if source.chart.is_some() {
                    continue;
                }
                let deploys = super::source_deploys(app, s);
                if deploys.dir.is_none() && deploys.value_files.is_empty() {
                    continue;
                }
                let at = SourceAt {
                    app: u32::try_from(a).unwrap_or(u32::MAX),
                    source: u32::try_from(s).unwrap_or(u32::MAX),
                };
                let repository = by_url.entry(normalise_url(&source.repo_url)).or_default();
                if let Some(dir) = &deploys.dir {
                    repository
                        .by_dir
                        .entry(dir_key(dir).into())
                        .or_default()
                        .push(at);
                }
                for file in deploys.value_files {
                    repository
                        .by_value_file
                        .entry(file.into_boxed_str())
                        .or_default()
                        .push(at);
                }
            }
        }
        Index { by_url }
    }

    /// [`super::applications_containing`] over `apps`, the list this index was built from.
    pub fn containing<'f>(
        &self,
        apps: &[Application],
        url: &str,
        branch: &str,
        files: impl IntoIterator<Item = &'f str>,
    ) -> Deployed {
        let Some(repository) = self.by_url.get(&normalise_url(url)) else {
            return Deployed::default();
        };
        let mut sorted: Vec<&str> = files
            .into_iter()
            .map(|f| f.trim_start_matches("./"))
            .collect();
        sorted.sort_unstable();
        sorted.dedup();
        // Each source's files, in path order (the files are visited sorted).
        let mut hits: BTreeMap<SourceAt, Vec<&str>> = BTreeMap::new();
        for &file in &sorted {
            let parents = file
                .match_indices('/')
                .map(|(at, _)| &file[..at])
                .chain([""]);
            let found = parents
                .filter_map(|dir| repository.by_dir.get(dir))
                .chain(repository.by_value_file.get(file));
            for at in found.flatten() {
                let under = hits.entry(*at).or_default();
                // A `ref:` source with a path may hold a file both ways.
                if under.last() != Some(&file) {
                    under.push(file);
                }
            }
        }
        let mut found = Vec::new();
        let mut other_revisions = Vec::new();
        let mut hits = hits.into_iter().peekable();
        while let Some((first, under)) = hits.next() {
            let app = &apps[first.app as usize];
            let all = app.sources();
            let mut sources = Vec::new();
            let mut contained: Vec<&str> = Vec::new();
            let mut next = Some((first, under));
            while let Some((at, under)) = next {
                let source = all[at.source as usize];
                if tracks_branch(source.target_revision.as_deref(), branch) {
                    sources.push(at.source as usize + 1);
                    contained.extend(under);
                } else {
                    other_revisions.push(OtherRevision {
                        application: app.id(),
                        source: at.source as usize + 1,
                        revision: source.target_revision.clone().unwrap_or_default(),
                        files: under.into_iter().map(str::to_owned).collect(),
                    });
                }
                next = hits.next_if(|(at, _)| at.app == first.app);
            }
            if sources.is_empty() {
                continue;
            }
            contained.sort_unstable();
            contained.dedup();
            found.push(AffectedApplication {
                name: app.metadata.name.clone(),
                namespace: app.metadata.namespace.clone(),
                destination: app.spec.destination.clone().unwrap_or_default(),
                files: contained.into_iter().map(str::to_owned).collect(),
                sources,
                rendered: None,
            });
        }
        found.sort_by_cached_key(AffectedApplication::id);
        other_revisions.sort_by(|a, b| (&a.application, a.source).cmp(&(&b.application, b.source)));
        Deployed {
            applications: found,
            other_revisions,
        }
    }
}

/// Every Application that deploys, with its [`Index`]: read once per cycle, asked once per
/// change group.
#[derive(Debug, Default)]
pub struct Deployers {
    apps: Vec<Application>,
    index: Index,
}

impl Clone for Deployers {
    fn clone(&self) -> Self {
        Deployers::new(self.apps.clone())
    }
}

impl Deployers {
    pub fn new(apps: Vec<Application>) -> Self {
        let index = Index::new(&apps);
        Deployers { apps, index }
    }

    /// The Applications, in the order given.
    pub fn apps(&self) -> &[Application] {
        &self.apps
    }

    pub fn is_empty(&self) -> bool {
        self.apps.is_empty()
    }

    /// The Applications whose sources in the repository at `url`, on `branch`, contain one of
    /// `files` ([`super::applications_containing`]).
    pub fn containing<'f>(
        &self,
        url: &str,
        branch: &str,
        files: impl IntoIterator<Item = &'f str>,
    ) -> Deployed {
        self.index.containing(&self.apps, url, branch, files)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn app(name: &str, yaml_sources: &str) -> Application {
        let text = format!(
            "apiVersion: argoproj.io/v1alpha1\nkind: Application\nmetadata: {{name: {name}, namespace: argocd}}\n\
             spec:\n  destination: {{server: https://kubernetes.default.svc, namespace: shop}}\n{yaml_sources}"
        );
        crate::application::read_documents(std::path::Path::new("a.yaml"), &text)
            .unwrap()
            .remove(0)
    }

    /// The rule as it was asked before the index: every source of every Application, its URL
    /// normalised and its files found by [`super::super::source_deploys`] over the sorted files.
    fn scan(apps: &[Application], url: &str, branch: &str, files: &[&str]) -> Deployed {
        let url = normalise_url(url);
        let mut sorted: Vec<&str> = files.iter().map(|f| f.trim_start_matches("./")).collect();
        sorted.sort_unstable();
        sorted.dedup();
        let mut other_revisions = Vec::new();
        let mut found = Vec::new();
        for app in apps {
            let (mut sources, mut contained) = (Vec::new(), Vec::new());
            for (i, s) in app.sources().iter().enumerate() {
                if s.chart.is_some() || normalise_url(&s.repo_url) != url {
                    continue;
                }
                let deploys = super::super::source_deploys(app, i);
                let mut under: Vec<&str> = sorted
                    .iter()
                    .copied()
                    .filter(|f| {
                        deploys
                            .dir
                            .as_deref()
                            .is_some_and(|d| super::super::contains_file(d, f))
                            || deploys.value_files.iter().any(|v| v == f)
                    })
                    .collect();
                under.dedup();
                if under.is_empty() {
                    continue;
                }
                if !tracks_branch(s.target_revision.as_deref(), branch) {
                    other_revisions.push(OtherRevision {
                        application: app.id(),
                        source: i + 1,
                        revision: s.target_revision.clone().unwrap_or_default(),
                        files: under.iter().map(|f| (*f).to_owned()).collect(),
                    });
                    continue;
                }
                sources.push(i + 1);
                contained.extend(under);
            }
            if sources.is_empty() {
                continue;
            }
            contained.sort_unstable();
            contained.dedup();
            found.push(AffectedApplication {
                name: app.metadata.name.clone(),
                namespace: app.metadata.namespace.clone(),
                destination: app.spec.destination.clone().unwrap_or_default(),
                files: contained.into_iter().map(str::to_owned).collect(),
                sources,
                rendered: None,
            });
        }
        found.sort_by_cached_key(AffectedApplication::id);
        other_revisions.sort_by(|a, b| (&a.application, a.source).cmp(&(&b.application, b.source)));
        Deployed {
            applications: found,
            other_revisions,
        }
    }

    /// Applications of every shape the rule knows: paths written every way, the whole
    /// repository, URLs spelled differently, revisions, charts, multi-source with `ref:` value
    /// files (with and without a path of their own).
    fn apps() -> Vec<Application> {
        [
            ("api", "  source: {repoURL: https://git.example/acme/m, path: apps/api}\n"),
            ("api-slash", "  source: {repoURL: 'https://Git.example/acme/m.git/', path: ./apps/api/}\n"),
            ("api-v2", "  source: {repoURL: git@git.example:acme/m, path: apps/api-v2}\n"),
            ("apps", "  source: {repoURL: ssh://git@git.example/acme/m.git, path: /apps}\n"),
            ("root", "  source: {repoURL: https://git.example/acme/m, path: .}\n"),
            ("empty", "  source: {repoURL: https://git.example/acme/m}\n"),
            ("release", "  source: {repoURL: https://git.example/acme/m, path: apps/api, targetRevision: release-1}\n"),
            ("head", "  source: {repoURL: https://git.example/acme/m, path: apps/web, targetRevision: HEAD}\n"),
            ("refs", "  source: {repoURL: https://git.example/acme/m, path: apps/web, targetRevision: refs/heads/main}\n"),
            ("other-repo", "  source: {repoURL: https://git.example/acme/other, path: apps/api}\n"),
            ("chart", "  source: {repoURL: https://git.example/acme/m, chart: api, targetRevision: 1.0.0}\n"),
            (
                "multi",
                "  sources:\n\
                 \x20 - {repoURL: https://charts.example, chart: shop, targetRevision: 1.0.0, \
                 helm: {valueFiles: ['$values/envs/prod/values.yaml', '$values/./apps/api/v.yaml']}}\n\
                 \x20 - {repoURL: https://git.example/acme/m, targetRevision: main, ref: values}\n\
                 \x20 - {repoURL: https://git.example/acme/m, path: envs/prod, targetRevision: v1}\n\
                 \x20 - {repoURL: https://git.example/acme/m, path: apps/web}\n",
            ),
            (
                "ref-path",
                "  sources:\n\
                 \x20 - {repoURL: https://charts.example, chart: shop, helm: {valueFiles: [$cfg/shared/a.yaml]}}\n\
                 \x20 - {repoURL: https://git.example/acme/m, path: shared, ref: cfg}\n",
            ),
        ]
        .into_iter()
        .map(|(name, sources)| app(name, sources))
        .collect()
    }

    #[test]
    fn the_index_names_what_the_scan_of_every_source_names() {
        let apps = apps();
        let index = Index::new(&apps);
        let files = [
            "apps/api/deployment.yaml",
            "./apps/api/sub/x.yaml",
            "apps/api-v2/d.yaml",
            "apps/apiz.yaml",
            "apps/api/v.yaml",
            "apps/web/d.yaml",
            "envs/prod/values.yaml",
            "envs/dev/values.yaml",
            "shared/a.yaml",
            "shared/b.yaml",
            "README.md",
        ];
        let urls = [
            "https://git.example/acme/m",
            "git@git.example:acme/m.git",
            "https://git.example/acme/other",
            "https://git.example/acme/none",
        ];
        // Each file alone, every pair, and all of them, on each URL and branch.
        let mut changes: Vec<Vec<&str>> = files.iter().map(|f| vec![*f]).collect();
        for (i, a) in files.iter().enumerate() {
            for b in &files[i + 1..] {
                changes.push(vec![*a, *b]);
            }
        }
        changes.push(files.to_vec());
        let mut named = 0;
        for url in urls {
            for branch in ["main", "release-1", "v1"] {
                for change in &changes {
                    let want = scan(&apps, url, branch, change);
                    let got = index.containing(&apps, url, branch, change.iter().copied());
                    assert_eq!(got, want, "{url} {branch} {change:?}");
                    named += got.applications.len();
                }
            }
        }
        assert!(named > 100, "the cases name Applications: {named}");
    }

    #[test]
    fn one_index_answers_for_each_repository_and_branch() {
        let apps = apps();
        let deployers = Deployers::new(apps.clone());
        let names = |url: &str, branch: &str, files: &[&str]| -> (Vec<String>, Vec<String>) {
            let d = deployers.containing(url, branch, files.iter().copied());
            (
                d.applications.iter().map(|a| a.name.clone()).collect(),
                d.other_revisions
                    .iter()
                    .map(|o| format!("{} {} {}", o.application, o.source, o.revision))
                    .collect(),
            )
        };
        let (named, elsewhere) = names(
            "https://git.example/acme/m.git",
            "main",
            &["apps/api/deployment.yaml"],
        );
        assert_eq!(named, ["api", "api-slash", "apps", "empty", "root"]);
        assert_eq!(elsewhere, ["argocd/release 1 release-1"]);
        let (named, _) = names(
            "https://git.example/acme/m",
            "release-1",
            &["apps/api/deployment.yaml"],
        );
        assert_eq!(
            named,
            ["api", "api-slash", "apps", "empty", "release", "root"]
        );
        let (named, elsewhere) = names(
            "https://git.example/acme/m",
            "main",
            &["envs/prod/values.yaml"],
        );
        assert_eq!(named, ["empty", "multi", "root"]);
        assert_eq!(elsewhere, ["argocd/multi 3 v1"]);
        let (named, _) = names("https://git.example/acme/other", "main", &["apps/api/a"]);
        assert_eq!(named, ["other-repo"]);
        assert_eq!(
            names("https://git.example/acme/none", "main", &["apps/api/a"]),
            (vec![], vec![])
        );
        assert_eq!(deployers.apps().len(), apps.len());
        assert_eq!(
            deployers
                .clone()
                .containing("https://git.example/acme/m", "main", ["shared/a.yaml"]),
            deployers.containing("https://git.example/acme/m", "main", ["shared/a.yaml"])
        );
    }
}
