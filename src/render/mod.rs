//! Rendering an Argo CD Application's manifests as Argo CD would, before and after a change, to
//! show reviewers what it will deploy (issue 21): plain directories (`directory.recurse`,
//! `include`, `exclude`), kustomize with the Application's kustomize options, Helm with its
//! release name, namespace, value files, values and parameters.
//!
//! An edge: it runs the real `helm` and `kustomize` (or `kubectl kustomize`) binaries found on
//! `PATH` ([`Tools`]) in temporary directories ([`tree`]), and decides nothing about tags or
//! YAML edits. A render that fails is a [`Rendered::failure`], never an error that holds the
//! change: the caller reports it and goes on. Only sources in the changed repository are
//! rendered (and charts whose value files come from it): the others do not change.

mod resources;
mod sources;
pub mod tree;
mod value_files;

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::affected::{Rendered, normalise_url};
use crate::application::{Application, Source};

pub use resources::{Resource, changed_resources, parse_resources, unified};
pub use tree::{Materialised, materialise};

/// Why one source of an Application could not be rendered.
#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    #[error("`{tool}` was not found on PATH")]
    ToolMissing { tool: &'static str },
    #[error("running `{command}`")]
    Spawn {
        command: String,
        source: std::io::Error,
    },
    #[error("`{command}` failed: {stderr}")]
    Failed { command: String, stderr: String },
    #[error("`{command}` did not finish within {}s", .after.as_secs())]
    TimedOut { command: String, after: Duration },
    #[error("the chart repository {url} could not be reached: {stderr}")]
    ChartUnreachable { url: String, stderr: String },
    #[error("source path `{path}` is not a directory of the repository")]
    NoPath { path: String },
    #[error("reading {path}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("writing {path}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("`{what}` in {path} is not YAML: {message}")]
    Yaml {
        what: &'static str,
        path: PathBuf,
        message: String,
    },
    #[error("value file `{file}` resolves to outside its repository")]
    ValueFileOutside { file: String },
    #[error("value file `{file}` is in {url}, which this change is not in")]
    ValueFileElsewhere { file: String, url: String },
    #[error("value file `{file}`: the URL scheme `{scheme}` is not allowed (http and https are)")]
    ValueFileScheme { file: String, scheme: String },
    #[error("merging Argo CD's override files")]
    Override(#[from] crate::application::override_file::OverrideError),
    #[error("glob `{glob}` in `directory.{setting}`")]
    Glob {
        setting: &'static str,
        glob: String,
        source: globset::Error,
    },
    /// The tool's output does not read as YAML (`message`, the reader's own words).
    #[error("the rendered manifests are not YAML: {message}")]
    NotYaml { message: String },
    /// A config management plugin source (helmfile through Argo CD's plugin sidecar): its
    /// output is the plugin's, which tagpilot does not run, so the change is not rendered.
    #[error(
        "config management plugin {name} is not rendered: tagpilot runs helm and kustomize, not \
         plugins{}",
        if *helmfile { " (this source is helmfile's; `helmfile template` is not run)" } else { "" }
    )]
    Plugin { name: String, helmfile: bool },
    /// One of the Application's sources, numbered from 1, failed.
    #[error("source {number} ({name})")]
    Source {
        number: usize,
        name: String,
        source: Box<RenderError>,
    },
}

/// Which kustomize to run: the standalone binary, or `kubectl kustomize`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kustomize {
    Standalone(PathBuf),
    Kubectl(PathBuf),
}

/// The binaries rendering runs, found once.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tools {
    pub helm: Option<PathBuf>,
    pub kustomize: Option<Kustomize>,
    /// How long one tool may run before it is stopped.
    pub timeout: Duration,
    /// The OCI registries (`host[:port]`) that serve plain HTTP: those configured `insecure`
    /// under `registries:`, whose charts helm pulls with `--plain-http`.
    pub plain_http: Vec<String>,
}

impl Tools {
    /// `helm`, and `kustomize` or else `kubectl`, from the directories of `PATH`.
    pub fn from_path() -> Tools {
        let path = std::env::var_os("PATH").unwrap_or_default();
        Tools::in_dirs(std::env::split_paths(&path))
    }

    /// The tools in these directories, the first of each name.
    pub fn in_dirs(dirs: impl IntoIterator<Item = PathBuf>) -> Tools {
        let dirs: Vec<PathBuf> = dirs.into_iter().collect();
        let find = |name: &str| dirs.iter().map(|d| d.join(name)).find(|p| p.is_file());
        Tools {
            helm: find("helm"),
            kustomize: find("kustomize")
                .map(Kustomize::Standalone)
                .or_else(|| find("kubectl").map(Kustomize::Kubectl)),
            timeout: Duration::from_secs(120),
            plain_http: Vec::new(),
        }
    }

    /// These tools, pulling charts from the registries `hosts` over plain HTTP.
    pub fn with_plain_http(mut self, hosts: impl IntoIterator<Item = String>) -> Tools {
        self.plain_http = hosts.into_iter().collect();
        self
    }
}

/// What to render: one Application over a repository before and after a change.
pub struct Change<'a> {
    pub app: &'a Application,
    /// The URL of the repository the trees are of.
    pub url: &'a str,
    pub before: &'a Path,
    pub after: &'a Path,
}

/// Renders `change.app` on both trees and keeps the resources that differ. A failure on either
/// side is the result's `failure`, naming the source.
pub fn render_change(tools: &Tools, change: &Change<'_>) -> Rendered {
    let started = crate::clock::Stopwatch::start();
    let both = render_app(tools, change.app, change.url, change.before).and_then(|before| {
        Ok((
            before,
            render_app(tools, change.app, change.url, change.after)?,
        ))
    });
    let mut rendered = match both {
        Ok((before, after)) => Rendered {
            resources: changed_resources(before, after),
            ..Rendered::default()
        },
        Err(failure) => Rendered {
            failure: Some(crate::error_chain::chain(&failure)),
            ..Rendered::default()
        },
    };
    rendered.took = started.elapsed();
    rendered.notes = not_applied(change.app);
    rendered
}

/// The options of `app`'s sources that rendering does not apply, each named: the diff may
/// differ from Argo CD's there, and the review says so rather than staying silent.
pub fn not_applied(app: &Application) -> Vec<String> {
    let mut out = Vec::new();
    for (i, s) in app.sources().iter().enumerate() {
        let named = [
            ("helm", s.helm.as_ref().map(|h| &h.other)),
            ("kustomize", s.kustomize.as_ref().map(|k| &k.other)),
            ("directory", s.directory.as_ref().map(|d| &d.other)),
        ];
        for (kind, other) in named {
            for key in other.into_iter().flat_map(|o| o.keys()) {
                out.push(format!("source {}: {kind}.{key} is not applied", i + 1));
            }
        }
    }
    out
}

/// Every resource `app`'s sources in the repository at `url` render to on `root`; an error
/// names the source.
pub fn render_app(
    tools: &Tools,
    app: &Application,
    url: &str,
    root: &Path,
) -> Result<Vec<Resource>, RenderError> {
    let url = normalise_url(url);
    let all = app.sources();
    let mut out = Vec::new();
    for (i, source) in all.iter().enumerate() {
        let in_source = |e: RenderError| RenderError::Source {
            number: i + 1,
            name: source_name(source),
            source: Box::new(e),
        };
        if let Some(plugin) = &source.plugin {
            let name = plugin
                .get("name")
                .and_then(|n| n.as_str())
                .unwrap_or("(unnamed)")
                .to_string();
            let helmfile = name.contains("helmfile")
                || source.path.as_deref().is_some_and(|p| {
                    ["helmfile.yaml", "helmfile.yaml.gotmpl"]
                        .iter()
                        .any(|f| root.join(p).join(f).is_file())
                });
            return Err(in_source(RenderError::Plugin { name, helmfile }));
        }
        let Some(mut job) = sources::job(app, source, &all, &url, root) else {
            continue;
        };
        let text = sources::with_overrides(&mut job)
            .and_then(|()| sources::render(tools, &job))
            .map_err(in_source)?;
        out.extend(parse_resources(&text).map_err(in_source)?);
    }
    Ok(out)
}

fn source_name(source: &Source) -> String {
    match (&source.chart, &source.path) {
        (Some(chart), _) => format!("chart {chart} from {}", source.repo_url),
        (None, _) if sources::is_remote_chart(source) => format!("chart {}", source.repo_url),
        (None, Some(path)) => format!("path {path}"),
        (None, None) => "repository root".to_owned(),
    }
}
