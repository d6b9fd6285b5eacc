//! Where teams pin chart versions: Argo CD Applications, `Chart.yaml` dependencies, kustomize
//! `helmCharts`, Flux `HelmRelease` and `OCIRepository`, helmfile releases. Each is a field of
//! one scalar (the version), keyed by the chart it names ([`crate::policy::chart`]), so a chart
//! policy owns it as an image policy owns an image.
//!
//! A chart whose repository cannot be told from the file (a helm repository alias with no
//! `repositories:` entry, a `HelmRelease` whose `HelmRepository` is in another file, a local
//! chart) is no field: nothing names which chart it is. A version a template writes (helmfile)
//! is handed back as a dropped reference of its chart.

use std::collections::HashMap;

use crate::image::Repository;
use crate::policy::chart;

use super::super::TemplatedLine;
use super::super::tree::{self, Node, ParseFailure};
use super::{FieldKind, Fields, OnePart, Scan, unwritable};

/// `HelmRepository` resources of a file, by name: their URL, with `oci://` for `type: oci`.
pub(super) type HelmRepositories = HashMap<String, String>;

/// The chart repositories a file names its charts by: a helmfile's `repositories[]`, often in
/// another document than its releases, or the `HelmRepository` resources a `HelmRelease`
/// names. Read before the fields, over the whole file.
pub(super) fn repositories(src: &str, helmfile: bool) -> Result<HelmRepositories, ParseFailure> {
    let mut found = HelmRepositories::new();
    if helmfile || src.contains("HelmRepository") {
        tree::parse_each(src, |parsed| {
            for doc in &parsed.docs {
                match helmfile {
                    true => helmfile_repositories(doc, &mut found),
                    false => helm_repositories(doc, &mut found),
                }
            }
        })?;
    }
    Ok(found)
}

/// A helmfile's `repositories[]` (of any of its documents: `---` often parts environments
/// from releases), added to `into`: `oci: true` ones with `oci://`.
fn helmfile_repositories(doc: &Node, into: &mut HelmRepositories) {
    for r in doc.get("repositories").map(Node::items).unwrap_or_default() {
        let (Some(name), Some(url)) = (
            r.get("name").and_then(Node::scalar),
            r.get("url").and_then(Node::scalar),
        ) else {
            continue;
        };
        let oci = r.get("oci").and_then(Node::scalar) == Some("true");
        let url = match oci && !url.starts_with("oci://") {
            true => format!("oci://{url}"),
            false => url.to_string(),
        };
        into.insert(name.to_string(), url);
    }
}

/// The `HelmRepository` resources of one document, added to `into`.
fn helm_repositories(doc: &Node, into: &mut HelmRepositories) {
    if doc.get("kind").and_then(Node::scalar) != Some("HelmRepository") {
        return;
    }
    let (Some(name), Some(url)) = (
        doc.get_path(&["metadata", "name"]).and_then(Node::scalar),
        doc.get_path(&["spec", "url"]).and_then(Node::scalar),
    ) else {
        return;
    };
    let oci = doc.get_path(&["spec", "type"]).and_then(Node::scalar) == Some("oci");
    let url = match oci && !url.starts_with("oci://") {
        true => format!("oci://{url}"),
        false => url.to_string(),
    };
    into.insert(name.to_string(), url);
}

impl Scan<'_> {
    /// The version at `node` of the chart `key`, as a field named `place`.
    fn chart_version(&mut self, place: String, node: Option<&Node>, key: Repository) {
        let Some(node) = node else { return };
        let kind = FieldKind::Chart { place };
        let Some(slot) = self.slot(node) else {
            if let Some(why) = unwritable(node, "the chart version") {
                // A collection or an alias: no scalar to write, named where it stands.
                self.dropped.push(super::DroppedReference {
                    kind,
                    line: node.line,
                    column: node.column,
                    repository: Some(key),
                    reason: why.to_string(),
                    name_at: node.range.start,
                });
            }
            return;
        };
        if !self.is_free(&slot) {
            return;
        }
        if let Some(why) = unwritable(node, "the chart version") {
            self.drop_reference(kind, node, &slot, Some(key), why.to_string());
            return;
        }
        let version = (!slot.value.is_empty()).then(|| slot.value.clone());
        let fields = Fields {
            repository: Some(key),
            ..Fields::single(version, None, slot.clone(), OnePart::Tag)
        };
        self.push(kind, &slot, &[&slot], fields);
    }

    /// `Chart.yaml`: `dependencies[]` with a `repository` that names a place.
    pub(super) fn chart_dependencies(&mut self, doc: &Node) {
        for dep in doc.get("dependencies").map(Node::items).unwrap_or_default() {
            let (Some(name), Some(repo)) = (
                dep.get("name").and_then(Node::scalar),
                dep.get("repository").and_then(Node::scalar),
            ) else {
                continue;
            };
            if let Ok(key) = chart::key(repo, name) {
                let place = format!("Chart.yaml dependency {name}");
                self.chart_version(place, dep.get("version"), key);
            }
        }
    }

    /// A kustomization's `helmCharts[]`: `name`, `repo`, `version`.
    pub(super) fn kustomize_charts(&mut self, doc: &Node) {
        for c in doc.get("helmCharts").map(Node::items).unwrap_or_default() {
            let (Some(name), Some(repo)) = (
                c.get("name").and_then(Node::scalar),
                c.get("repo").and_then(Node::scalar),
            ) else {
                continue;
            };
            if let Ok(key) = chart::key(repo, name) {
                let place = format!("kustomize helmChart {name}");
                self.chart_version(place, c.get("version"), key);
            }
        }
    }

    /// A helmfile's `releases[]`: `chart` as `repository/chart` (resolved through
    /// `repositories[]`) or `oci://…`, and `version`. A release whose version line is a
    /// template expression (`masked` lines) is named, never edited.
    pub(super) fn helmfile_releases(
        &mut self,
        doc: &Node,
        repositories: &HelmRepositories,
        masked: &[TemplatedLine],
    ) {
        let releases = doc.get("releases").map(Node::items).unwrap_or_default();
        // The lines after the releases: the next top-level key's, else the end.
        let after = doc
            .entries()
            .iter()
            .map(|(k, _)| k.line)
            .filter(|&l| releases.first().is_some_and(|r| l > r.line))
            .min()
            .unwrap_or(usize::MAX);
        for (i, release) in releases.iter().enumerate() {
            let Some(chart_name) = release.get("chart").and_then(Node::scalar) else {
                continue;
            };
            let key = if chart_name.starts_with("oci://") {
                chart::oci_key(chart_name).ok()
            } else {
                chart_name
                    .split_once('/')
                    .and_then(|(repo, name)| chart::key(repositories.get(repo)?, name).ok())
            };
            let Some(key) = key else { continue };
            let name = release
                .get("name")
                .and_then(Node::scalar)
                .unwrap_or(chart_name);
            let place = format!("helmfile release {name}");
            if release.get("version").is_some() {
                self.chart_version(place, release.get("version"), key);
                continue;
            }
            let end = releases.get(i + 1).map_or(after, |r| r.line);
            let templated = masked
                .iter()
                .find(|t| {
                    t.line > release.line
                        && t.line < end
                        && t.text.trim_start().starts_with("version:")
                })
                .map(|t| t.line);
            if let Some(line) = templated {
                self.dropped.push(super::DroppedReference {
                    kind: FieldKind::Chart { place },
                    line,
                    column: 1,
                    repository: Some(key),
                    reason: "the version is a template expression; tagpilot edits literal values \
                             only and leaves it alone"
                        .to_string(),
                    // No scalar of the parse: never taken by another reading.
                    name_at: usize::MAX,
                });
            }
        }
    }

    /// Argo CD Applications, Flux `HelmRelease`s and `OCIRepository`s.
    pub(super) fn chart_resource(&mut self, doc: &Node, helm_repositories: &HelmRepositories) {
        let kind = doc.get("kind").and_then(Node::scalar).unwrap_or_default();
        let api = doc
            .get("apiVersion")
            .and_then(Node::scalar)
            .unwrap_or_default();
        let name = doc
            .get_path(&["metadata", "name"])
            .and_then(Node::scalar)
            .unwrap_or_default();
        match kind {
            "Application" if api.starts_with("argoproj.io/") => {
                if let Some(source) = doc.get_path(&["spec", "source"]) {
                    self.argocd_source(format!("Application/{name} source"), source);
                }
                let sources = doc.get_path(&["spec", "sources"]);
                for (i, source) in sources
                    .map(Node::items)
                    .unwrap_or_default()
                    .iter()
                    .enumerate()
                {
                    self.argocd_source(format!("Application/{name} sources[{i}]"), source);
                }
            }
            "HelmRelease" if api.starts_with("helm.toolkit.fluxcd.io/") => {
                let Some(spec) = doc.get_path(&["spec", "chart", "spec"]) else {
                    return;
                };
                let (Some(chart_name), Some(source)) = (
                    spec.get("chart").and_then(Node::scalar),
                    spec.get_path(&["sourceRef", "name"]).and_then(Node::scalar),
                ) else {
                    return;
                };
                let repo_kind = spec.get_path(&["sourceRef", "kind"]).and_then(Node::scalar);
                if repo_kind != Some("HelmRepository") {
                    return;
                }
                if let Some(key) = helm_repositories
                    .get(source)
                    .and_then(|url| chart::key(url, chart_name).ok())
                {
                    let place = format!("HelmRelease/{name} chart {chart_name}");
                    self.chart_version(place, spec.get("version"), key);
                }
            }
            "OCIRepository" if api.starts_with("source.toolkit.fluxcd.io/") => {
                let Some(url) = doc.get_path(&["spec", "url"]).and_then(Node::scalar) else {
                    return;
                };
                if let Ok(key) = chart::oci_key(url) {
                    let place = format!("OCIRepository/{name} ref.tag");
                    self.chart_version(place, doc.get_path(&["spec", "ref", "tag"]), key);
                }
            }
            _ => {}
        }
    }

    /// One Argo CD source: a `chart:` from `repoURL`, or an OCI `repoURL` that is the chart.
    fn argocd_source(&mut self, place: String, source: &Node) {
        let Some(url) = source.get("repoURL").and_then(Node::scalar) else {
            return;
        };
        let key = match source.get("chart").and_then(Node::scalar) {
            Some(name) => chart::key(url, name).ok(),
            None if url.starts_with("oci://") => chart::oci_key(url).ok(),
            None => None,
        };
        if let Some(key) = key {
            self.chart_version(
                format!("{place} targetRevision"),
                source.get("targetRevision"),
                key,
            );
        }
    }
}
