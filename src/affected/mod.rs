//! Which Argo CD Applications deploy a repository's files: the one matching rule that pull
//! request bodies, commit messages, labels, rendered diffs and verification (issue 19) share.
//!
//! An Application's source deploys a file when it names the same repository (URLs compared as
//! [`normalise_url`] reads them), tracks the branch being changed (`targetRevision` empty,
//! `HEAD`, or that branch: [`tracks_branch`]) and its `path` contains the file; a source of a
//! chart from a Helm repository (`chart:`) deploys no file of a git repository. A multi-source
//! Application counts each source; its `ref:` source deploys the `$<ref>/…` value files its
//! siblings name, and, without a `path`, nothing else ([`source_deploys`]). A source that would
//! contain the files but tracks another revision is [`OtherRevision`], for the caller to say.
//! Pure: Applications and paths in, names out; no cluster, no git.

use serde::Serialize;

use crate::application::{Application, Destination};

mod index;

pub use index::{Deployers, Index};

/// One Application whose sources contain some of the changed files, as a pull request, a
/// commit message and a label template name it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct AffectedApplication {
    /// `metadata.name`.
    pub name: String,
    /// The Application's own namespace (Argo CD's, or "apps in any namespace").
    pub namespace: Option<String>,
    /// Where it deploys to: `spec.destination`.
    pub destination: Destination,
    /// The 1-based positions of its sources that contain the files (always `[1]` for a
    /// single-source Application).
    pub sources: Vec<usize>,
    /// Which of the files asked about its sources contain, in path order.
    pub files: Vec<String>,
    /// Its manifests rendered before and after the change, when asked for (`crate::render`).
    #[serde(skip)]
    pub rendered: Option<Box<Rendered>>,
}

/// What an Application's manifests become with a change: the resources that differ, each
/// rendered before and after (Secret data redacted), or why it could not be rendered.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Rendered {
    /// Only the resources that change, in kind, namespace, name order.
    pub resources: Vec<RenderedResource>,
    /// Why rendering failed (a tool missing, a chart repository not reachable, a template
    /// error): said in the review, never a reason to hold the change.
    pub failure: Option<String>,
    /// How long both renders took, for `bench/`.
    pub took: std::time::Duration,
    /// What the render left out of Argo CD's way: options it does not apply
    /// (`source 1: kustomize.patches is not applied`).
    pub notes: Vec<String>,
}

/// One rendered resource that a change adds, removes or edits.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RenderedResource {
    pub kind: String,
    pub namespace: Option<String>,
    pub name: String,
    /// The resource as YAML before the change; `None` when the change adds it.
    pub before: Option<String>,
    /// After the change; `None` when the change removes it.
    pub after: Option<String>,
}

impl RenderedResource {
    /// `Deployment/shop/api` (`kind/namespace/name`, or `kind/name` when cluster-scoped).
    pub fn header(&self) -> String {
        match &self.namespace {
            Some(ns) => format!("{}/{ns}/{}", self.kind, self.name),
            None => format!("{}/{}", self.kind, self.name),
        }
    }
}

impl AffectedApplication {
    /// `namespace/name`, or `name` when no namespace is known.
    pub fn id(&self) -> String {
        match &self.namespace {
            Some(ns) => format!("{ns}/{}", self.name),
            None => self.name.clone(),
        }
    }

    /// The cluster as people name it: the destination's `name`, else its `server`, else
    /// `in-cluster` (Argo CD's own cluster, which an empty destination means).
    pub fn cluster(&self) -> &str {
        self.destination
            .name
            .as_deref()
            .filter(|n| !n.is_empty())
            .or(self.destination.server.as_deref().filter(|s| !s.is_empty()))
            .unwrap_or("in-cluster")
    }
}

/// An [`AffectedApplication`] in the words templates use: `name`, `namespace`, `id`
/// (`namespace/name`), `cluster` (the destination's name or server, `in-cluster` when empty),
/// `destination.server`, `destination.name`, `destination.namespace` (empty strings when
/// unset), `sources` (1-based positions) and `files`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TemplateApplication<'a> {
    pub name: &'a str,
    pub namespace: &'a str,
    pub id: String,
    pub cluster: &'a str,
    pub destination: TemplateDestination<'a>,
    pub sources: &'a [usize],
    pub files: &'a [String],
}

/// `spec.destination` for templates: an unset field is an empty string, so that
/// `{{ destination.namespace }}` renders under minijinja's strict undefined behaviour.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TemplateDestination<'a> {
    pub server: &'a str,
    pub name: &'a str,
    pub namespace: &'a str,
}

impl AffectedApplication {
    /// The Application as commit message, title and label templates see it.
    pub fn template_view(&self) -> TemplateApplication<'_> {
        let d = &self.destination;
        TemplateApplication {
            name: &self.name,
            namespace: self.namespace.as_deref().unwrap_or_default(),
            id: self.id(),
            cluster: self.cluster(),
            destination: TemplateDestination {
                server: d.server.as_deref().unwrap_or_default(),
                name: d.name.as_deref().unwrap_or_default(),
                namespace: d.namespace.as_deref().unwrap_or_default(),
            },
            sources: &self.sources,
            files: &self.files,
        }
    }
}

/// A source whose path contains changed files but that tracks another revision than the
/// branch changed: the change does not deploy it, and the report says why it is not named.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OtherRevision {
    /// `namespace/name` of the Application.
    pub application: String,
    /// The source's 1-based position.
    pub source: usize,
    /// Its `targetRevision`.
    pub revision: String,
    /// The changed files its path contains.
    pub files: Vec<String>,
}

/// What a change deploys: the Applications named, and the sources left out because they track
/// another revision.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Deployed {
    pub applications: Vec<AffectedApplication>,
    pub other_revisions: Vec<OtherRevision>,
}

/// Whether a source on `target_revision` deploys what is committed to `branch`: Argo CD reads
/// an empty revision and `HEAD` as the repository's default branch, taken here to be the branch
/// tagpilot changes; a tag, a commit or another branch does not follow it.
pub fn tracks_branch(target_revision: Option<&str>, branch: &str) -> bool {
    let revision = target_revision.unwrap_or("").trim();
    revision.is_empty()
        || revision == "HEAD"
        || revision.strip_prefix("refs/heads/").unwrap_or(revision) == branch
}

/// The Applications among `apps` whose sources in the repository at `url`, on `branch`,
/// contain one of `files` (paths relative to the repository root, `/`-separated), sorted by
/// `namespace/name` so that a change names them in one order whichever source read them.
///
/// For one question; a cycle asking for each of its change groups indexes its Applications
/// once ([`Deployers`]).
pub fn applications_containing<'f>(
    apps: &[Application],
    url: &str,
    branch: &str,
    files: impl IntoIterator<Item = &'f str>,
) -> Deployed {
    Index::new(apps).containing(apps, url, branch, files)
}

/// What one source of an Application deploys of its repository: the files under `dir` (`""`
/// for the whole repository), and `value_files` wherever they are.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SourceDeploys {
    /// Its `path`; `None` for a chart from a Helm repository, and for a multi-source
    /// Application's `ref:` source without a path, which Argo CD's repo server renders nothing
    /// for (its empty path is not the whole repository).
    pub dir: Option<String>,
    /// For a source with `ref:`, the `$<ref>/…` value files its siblings name, relative to its
    /// repository's root.
    pub value_files: Vec<String>,
}

/// What source `i` (0-based) of `app` deploys of its own repository ([`SourceDeploys`]).
pub fn source_deploys(app: &Application, i: usize) -> SourceDeploys {
    let sources = app.sources();
    let Some(s) = sources.get(i) else {
        return SourceDeploys::default();
    };
    let multi = app.is_multi_source();
    let path = s.path.as_deref().unwrap_or("").trim();
    let ref_only = multi && s.reference.is_some() && path.is_empty();
    let dir = (s.chart.is_none() && !ref_only).then(|| path.to_owned());
    let mut value_files = Vec::new();
    if let Some(name) = s
        .reference
        .as_deref()
        .filter(|_| multi && s.chart.is_none())
    {
        let prefix = format!("${name}/");
        value_files = sources
            .iter()
            .flat_map(|sibling| sibling.helm.iter().flat_map(|h| &h.value_files))
            .filter_map(|f| f.trim().strip_prefix(prefix.as_str()))
            .map(|f| {
                f.trim_start_matches("./")
                    .trim_start_matches('/')
                    .to_owned()
            })
            .collect();
        value_files.sort_unstable();
        value_files.dedup();
    }
    SourceDeploys { dir, value_files }
}

/// The files of `sorted` (sorted, deduplicated) that source `i` of `app` deploys
/// ([`source_deploys`]); the caller checks the repository and the revision.
fn source_files<'f>(app: &Application, i: usize, sorted: &[&'f str]) -> Vec<&'f str> {
    let deploys = source_deploys(app, i);
    let mut out: Vec<&'f str> = match &deploys.dir {
        Some(dir) => files_under(sorted, dir).to_vec(),
        None => Vec::new(),
    };
    if !deploys.value_files.is_empty() {
        for file in &deploys.value_files {
            if let Ok(at) = sorted.binary_search(&file.as_str()) {
                out.push(sorted[at]);
            }
        }
        out.sort_unstable();
        out.dedup();
    }
    out
}

/// The files of `sorted` that a source at `path` contains ([`contains_file`]), as a slice.
fn files_under<'s, 'f>(sorted: &'s [&'f str], path: &str) -> &'s [&'f str] {
    let path = path.trim_matches('/').trim_start_matches("./");
    if path.is_empty() || path == "." {
        return sorted;
    }
    let prefix = format!("{path}/");
    let start = sorted.partition_point(|f| *f < prefix.as_str());
    let len = sorted[start..].partition_point(|f| f.starts_with(&prefix));
    &sorted[start..start + len]
}

/// The 1-based positions of `app`'s sources in the repository `normalised_url` (already
/// [`normalise_url`]d) on `branch` whose path contains one of `files`. A source on another
/// revision never deploys a commit to `branch`, so following it would wait for nothing.
pub fn sources_containing<'f>(
    app: &Application,
    normalised_url: &str,
    branch: &str,
    files: impl IntoIterator<Item = &'f str> + Clone,
) -> Vec<usize> {
    let mut sorted: Vec<&str> = files
        .into_iter()
        .map(|f| f.trim_start_matches("./"))
        .collect();
    sorted.sort_unstable();
    sorted.dedup();
    let all = app.sources();
    all.iter()
        .enumerate()
        .filter(|(_, s)| s.chart.is_none() && normalise_url(&s.repo_url) == normalised_url)
        .filter(|(_, s)| tracks_branch(s.target_revision.as_deref(), branch))
        .filter(|(i, _)| !source_files(app, *i, &sorted).is_empty())
        .map(|(i, _)| i + 1)
        .collect()
}

/// Whether a source at `path` (relative to the repository root; empty or `.` for the root)
/// contains `file`.
pub fn contains_file(path: &str, file: &str) -> bool {
    let path = path.trim_matches('/').trim_start_matches("./");
    let file = file.trim_start_matches("./");
    path.is_empty()
        || path == "."
        || file
            .strip_prefix(path)
            .is_some_and(|rest| rest.starts_with('/'))
}

/// A URL reduced to what identifies the repository: no scheme, userinfo, `.git` or trailing
/// `/`; host lowercased; scp-like `git@host:path` read as `host/path`.
pub fn normalise_url(url: &str) -> String {
    let url = url.trim();
    let rest = match url.split_once("://") {
        Some((_, rest)) => rest,
        // scp-like: user@host:path
        None => match url.split_once(':') {
            Some((host, path)) if !host.contains('/') => {
                return normalise_url(&format!("ssh://{host}/{path}"));
            }
            _ => url,
        },
    };
    let rest = match rest.split_once('/') {
        Some((authority, path)) => {
            let host = authority.rsplit('@').next().unwrap_or(authority);
            format!("{}/{path}", host.to_ascii_lowercase())
        }
        None => rest.rsplit('@').next().unwrap_or(rest).to_ascii_lowercase(),
    };
    let rest = rest.trim_end_matches('/');
    rest.strip_suffix(".git").unwrap_or(rest).to_string()
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

    #[test]
    fn a_source_contains_the_files_under_its_path() {
        assert!(contains_file("apps/api", "apps/api/deployment.yaml"));
        assert!(contains_file("./apps/api/", "apps/api/deployment.yaml"));
        assert!(contains_file("", "apps/api/deployment.yaml"));
        assert!(contains_file(".", "x.yaml"));
        assert!(!contains_file("apps/api", "apps/api-v2/deployment.yaml"));
        assert!(!contains_file("apps/web", "apps/api/deployment.yaml"));
        // The sorted lookup agrees with the rule.
        let sorted = [
            "apps/api-v2/d.yaml",
            "apps/api/d.yaml",
            "apps/api/sub/e.yaml",
            "apps/apiz.yaml",
            "x.yaml",
        ];
        assert_eq!(
            files_under(&sorted, "./apps/api/"),
            ["apps/api/d.yaml", "apps/api/sub/e.yaml"]
        );
        assert_eq!(files_under(&sorted, "."), sorted);
        assert!(files_under(&sorted, "apps/web").is_empty());
        for path in ["apps/api", "apps", "", "apps/api-v2", "x.yaml"] {
            let by_rule: Vec<&str> = sorted
                .iter()
                .copied()
                .filter(|f| contains_file(path, f))
                .collect();
            assert_eq!(files_under(&sorted, path), by_rule, "{path}");
        }
    }

    #[test]
    fn each_source_of_a_multi_source_application_counts_and_charts_contain_no_file() {
        let multi = app(
            "shop",
            "  sources:\n\
             \x20 - {repoURL: https://charts.example, chart: api, targetRevision: 1.0.0}\n\
             \x20 - {repoURL: 'https://Git.example/acme/m.git', path: envs/prod}\n\
             \x20 - {repoURL: 'git@git.example:acme/m', path: apps/api}\n\
             \x20 - {repoURL: https://git.example/acme/other, path: apps/api}\n",
        );
        let single = app(
            "web",
            "  source: {repoURL: https://git.example/acme/m, path: apps/web}\n",
        );
        let apps = [multi, single];
        let found = applications_containing(
            &apps,
            "https://git.example/acme/m",
            "main",
            ["apps/api/deploy.yaml", "envs/prod/values.yaml"],
        )
        .applications;
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].id(), "argocd/shop");
        assert_eq!(found[0].sources, vec![2, 3]);
        assert_eq!(
            found[0].files,
            vec!["apps/api/deploy.yaml", "envs/prod/values.yaml"]
        );
        assert_eq!(found[0].destination.namespace.as_deref(), Some("shop"));
        assert_eq!(found[0].cluster(), "https://kubernetes.default.svc");
        let web = applications_containing(
            &apps,
            "ssh://git@git.example/acme/m.git",
            "main",
            ["apps/web/a.yaml"],
        )
        .applications;
        assert_eq!(web[0].name, "web");
        assert_eq!(web[0].sources, vec![1]);
    }

    #[test]
    fn a_source_on_another_revision_is_not_named_but_said() {
        assert!(tracks_branch(None, "main"));
        assert!(tracks_branch(Some(""), "main"));
        assert!(tracks_branch(Some("HEAD"), "main"));
        assert!(tracks_branch(Some("main"), "main"));
        assert!(tracks_branch(Some("refs/heads/main"), "main"));
        assert!(!tracks_branch(Some("release-1"), "main"));
        assert!(!tracks_branch(Some("v1.2.0"), "main"));
        assert!(!tracks_branch(Some("0123abcd"), "main"));
        let apps = [
            app(
                "head",
                "  source: {repoURL: https://git.example/acme/m, path: apps/api, targetRevision: HEAD}\n",
            ),
            app(
                "main",
                "  source: {repoURL: https://git.example/acme/m, path: apps/api, targetRevision: main}\n",
            ),
            app(
                "release",
                "  source: {repoURL: https://git.example/acme/m, path: apps/api, targetRevision: release-1}\n",
            ),
            app(
                "mixed",
                "  sources:\n\
                 \x20 - {repoURL: https://git.example/acme/m, path: apps/api, targetRevision: v1.0.0}\n\
                 \x20 - {repoURL: https://git.example/acme/m, path: apps, targetRevision: main}\n",
            ),
        ];
        let deployed = applications_containing(
            &apps,
            "https://git.example/acme/m",
            "main",
            ["apps/api/deploy.yaml"],
        );
        let named: Vec<(String, Vec<usize>)> = deployed
            .applications
            .iter()
            .map(|a| (a.id(), a.sources.clone()))
            .collect();
        assert_eq!(
            named,
            [
                ("argocd/head".to_owned(), vec![1]),
                ("argocd/main".to_owned(), vec![1]),
                ("argocd/mixed".to_owned(), vec![2]),
            ]
        );
        assert_eq!(
            deployed.other_revisions,
            [
                OtherRevision {
                    application: "argocd/mixed".into(),
                    source: 1,
                    revision: "v1.0.0".into(),
                    files: vec!["apps/api/deploy.yaml".into()],
                },
                OtherRevision {
                    application: "argocd/release".into(),
                    source: 1,
                    revision: "release-1".into(),
                    files: vec!["apps/api/deploy.yaml".into()],
                },
            ]
        );
        // Verification follows the same sources: a commit to main is never waited for in an
        // Application that deploys another revision of the file.
        let url = normalise_url("https://git.example/acme/m");
        let followed =
            |app: &Application| sources_containing(app, &url, "main", ["apps/api/deploy.yaml"]);
        let followed: Vec<Vec<usize>> = apps.iter().map(followed).collect();
        assert_eq!(followed, [vec![1], vec![1], vec![], vec![2]]);
        // On the release branch, the release Application deploys the change (and `HEAD`, read
        // as the branch changed); `mixed` tracks neither there.
        let release = applications_containing(
            &apps,
            "https://git.example/acme/m",
            "release-1",
            ["apps/api/deploy.yaml"],
        );
        let names: Vec<&str> = release
            .applications
            .iter()
            .map(|a| a.name.as_str())
            .collect();
        assert_eq!(names, ["head", "release"]);
        assert_eq!(release.other_revisions.len(), 3, "{release:?}");
    }

    /// Issue 28: two multi-source Applications reading `$values/…` files from one repository
    /// through a `ref:` source. Each deploys exactly the value files it names there: a change
    /// to one names that one only, a change to another file of the repository names neither.
    #[test]
    fn a_ref_source_deploys_only_the_value_files_its_siblings_name() {
        let multi = |name: &str, values: &str| {
            app(
                name,
                &format!(
                    "  sources:\n\
                     \x20 - {{repoURL: https://charts.example, chart: shop, targetRevision: 1.0.0, \
                     helm: {{valueFiles: ['$values/{values}', 'values-local.yaml']}}}}\n\
                     \x20 - {{repoURL: https://git.example/acme/values, targetRevision: main, ref: values}}\n"
                ),
            )
        };
        let with_path = app(
            "both",
            "  sources:\n\
             \x20 - {repoURL: https://charts.example, chart: shop, targetRevision: 1.0.0, \
             helm: {valueFiles: [$cfg/./shared/both.yaml]}}\n\
             \x20 - {repoURL: https://git.example/acme/values, path: base, ref: cfg}\n",
        );
        let apps = [
            multi("prod", "envs/prod/values.yaml"),
            multi("staging", "envs/staging/values.yaml"),
            with_path,
        ];
        let named = |files: &[&str]| -> Vec<(String, Vec<usize>, Vec<String>)> {
            applications_containing(
                &apps,
                "https://git.example/acme/values",
                "main",
                files.iter().copied(),
            )
            .applications
            .into_iter()
            .map(|a| (a.name, a.sources, a.files))
            .collect()
        };
        assert_eq!(
            named(&["envs/prod/values.yaml"]),
            [(
                "prod".to_owned(),
                vec![2],
                vec!["envs/prod/values.yaml".to_owned()]
            )]
        );
        assert!(named(&["envs/dev/values.yaml", "README.md"]).is_empty());
        // A `ref:` source with a path deploys that path as well as the value files named.
        let both: Vec<String> = named(&["base/kustomization.yaml", "shared/both.yaml", "x.yaml"])
            .into_iter()
            .flat_map(|(name, _, files)| files.into_iter().map(move |f| format!("{name}: {f}")))
            .collect();
        assert_eq!(
            both,
            ["both: base/kustomization.yaml", "both: shared/both.yaml"]
        );
        // Verification follows the same rule.
        let url = normalise_url("https://git.example/acme/values");
        let followed: Vec<Vec<usize>> = apps
            .iter()
            .map(|a| sources_containing(a, &url, "main", ["envs/staging/values.yaml"]))
            .collect();
        assert_eq!(followed, [vec![], vec![2], vec![]]);
    }
}
