//! One source rendered as Argo CD's repo server would: which kind it is, and the command (or
//! the files) that make its manifests.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use super::{Kustomize, RenderError, Tools, value_files};
use crate::affected::normalise_url;
use crate::application::override_file::{self, merged_source};
use crate::application::{Application, Source};

/// What to render for one source.
pub(super) struct Job<'a> {
    pub app: &'a Application,
    /// The source with the override files of its directory merged in ([`with_overrides`]).
    pub source: Cow<'a, Source>,
    /// The source's directory in the tree (`None` for a chart from a chart repository).
    pub dir: Option<PathBuf>,
    /// The root of the changed repository's tree.
    pub root: PathBuf,
    /// `ref` name → the root of the changed repository, for its sources that name themselves
    /// so: `$name/…` value files are read from there ([`value_files`]).
    pub refs: BTreeMap<String, PathBuf>,
    /// `ref` name → repoURL, for the `ref` sources of other repositories.
    pub elsewhere: BTreeMap<String, String>,
}

/// The job for `source`, or `None` when it cannot change with the repository at `url`: a
/// source of another repository, a `ref`-only source, a chart none of whose value files come
/// from this repository.
pub(super) fn job<'a>(
    app: &'a Application,
    source: &'a Source,
    all: &[&Source],
    url: &str,
    root: &Path,
) -> Option<Job<'a>> {
    let (mut refs, mut elsewhere) = (BTreeMap::new(), BTreeMap::new());
    for s in all.iter().filter(|s| s.chart.is_none()) {
        let Some(name) = s.reference.clone() else {
            continue;
        };
        if normalise_url(&s.repo_url) == url {
            // Argo CD reads `$name/…` from the repository's root, whatever the source's `path`.
            refs.insert(name, root.to_path_buf());
        } else {
            elsewhere.insert(name, s.repo_url.clone());
        }
    }
    if is_remote_chart(source) {
        let from_here = source.helm.iter().flat_map(|h| &h.value_files).any(|f| {
            f.strip_prefix('$')
                .and_then(|r| r.split('/').next())
                .is_some_and(|name| refs.contains_key(name))
        });
        return from_here.then_some(Job {
            app,
            source: Cow::Borrowed(source),
            dir: None,
            root: root.to_path_buf(),
            refs,
            elsewhere,
        });
    }
    if normalise_url(&source.repo_url) != url
        || (source.reference.is_some() && source.path.is_none())
    {
        return None;
    }
    let path = source.path.as_deref().unwrap_or("").trim_matches('/');
    Some(Job {
        app,
        source: Cow::Borrowed(source),
        dir: Some(root.join(path)),
        root: root.to_path_buf(),
        refs,
        elsewhere,
    })
}

/// Merges into the job's source the override files Argo CD's repo server reads in its
/// directory (`.argocd-source.yaml`, then `.argocd-source-<app>.yaml`), so that a change to
/// them, such as an Image Updater-style write-back, shows in the render as it will deploy.
pub(super) fn with_overrides(job: &mut Job<'_>) -> Result<(), RenderError> {
    let Some(dir) = &job.dir else {
        return Ok(());
    };
    let mut found = Vec::new();
    for name in override_file::file_names(job.app) {
        let path = dir.join(&name);
        if !path.is_file() {
            continue;
        }
        let text = std::fs::read_to_string(&path).map_err(|source| RenderError::Read {
            path: path.clone(),
            source,
        })?;
        let shown = Path::new(job.source.path.as_deref().unwrap_or("")).join(&name);
        found.push((shown.to_string_lossy().into_owned(), text));
    }
    if !found.is_empty() {
        job.source = Cow::Owned(merged_source(&job.source, &found)?);
    }
    Ok(())
}

/// The source's manifests as one YAML text.
pub(super) fn render(tools: &Tools, job: &Job<'_>) -> Result<String, RenderError> {
    let Some(dir) = &job.dir else {
        return helm(tools, job, None);
    };
    if !dir.is_dir() {
        return Err(RenderError::NoPath {
            path: job.source.path.clone().unwrap_or_default(),
        });
    }
    let s = &*job.source;
    let kustomization = kustomization_file(dir);
    // Argo CD's detection: what the source's options name, else the files it finds.
    let chart = dir.join("Chart.yaml").is_file();
    if chart && (s.helm.is_some() || (kustomization.is_none() && s.kustomize.is_none())) {
        return helm(tools, job, Some(dir));
    }
    if s.kustomize.is_some() || kustomization.is_some() {
        return kustomize(tools, job, dir, kustomization);
    }
    directory(job, dir)
}

// === Directory ===

/// The `.yaml`, `.yml` and `.json` files of `dir` (of its subdirectories too with
/// `directory.recurse`), matched against `include` and `exclude` by their path relative to
/// `dir`, in path order, as one multi-document text.
fn directory(job: &Job<'_>, dir: &Path) -> Result<String, RenderError> {
    let options = job.source.directory.clone().unwrap_or_default();
    let glob = |setting: &'static str, pattern: &Option<String>| {
        pattern
            .as_deref()
            .filter(|p| !p.is_empty())
            .map(|p| {
                globset::GlobBuilder::new(p)
                    .literal_separator(false)
                    .build()
                    .map(|g| g.compile_matcher())
                    .map_err(|source| RenderError::Glob {
                        setting,
                        glob: p.to_owned(),
                        source,
                    })
            })
            .transpose()
    };
    let include = glob("include", &options.include)?;
    let exclude = glob("exclude", &options.exclude)?;
    let depth = if options.recurse { usize::MAX } else { 1 };
    let mut out = String::new();
    let mut paths: Vec<PathBuf> = walkdir::WalkDir::new(dir)
        .max_depth(depth)
        .sort_by_file_name()
        .into_iter()
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_file())
        .map(|e| e.into_path())
        .collect();
    paths.sort();
    for path in paths {
        let relative = path.strip_prefix(dir).unwrap_or(&path);
        let ext = relative.extension().and_then(|e| e.to_str()).unwrap_or("");
        if !matches!(ext, "yaml" | "yml" | "json")
            || relative
                .components()
                .any(|c| c.as_os_str().to_string_lossy().starts_with('.'))
            || include.as_ref().is_some_and(|g| !g.is_match(relative))
            || exclude.as_ref().is_some_and(|g| g.is_match(relative))
        {
            continue;
        }
        let text = std::fs::read_to_string(&path).map_err(|source| RenderError::Read {
            path: relative.to_path_buf(),
            source,
        })?;
        out.push_str("---\n");
        out.push_str(&text);
        out.push('\n');
    }
    Ok(out)
}

// === Kustomize ===

fn kustomization_file(dir: &Path) -> Option<PathBuf> {
    ["kustomization.yaml", "kustomization.yml", "Kustomization"]
        .iter()
        .map(|n| dir.join(n))
        .find(|p| p.is_file())
}

/// `kustomize build` after setting the Application's kustomize options in the kustomization,
/// as Argo CD's `kustomize edit set …` does: name prefix and suffix and namespace replaced,
/// images set by name, common labels and annotations added.
fn kustomize(
    tools: &Tools,
    job: &Job<'_>,
    dir: &Path,
    file: Option<PathBuf>,
) -> Result<String, RenderError> {
    if let (Some(options), Some(file)) = (&job.source.kustomize, &file) {
        let text = std::fs::read_to_string(file).map_err(|source| RenderError::Read {
            path: file.clone(),
            source,
        })?;
        let mut k: Value = crate::yaml_error::from_str(&text).map_err(|e| RenderError::Yaml {
            what: "kustomization",
            path: file.clone(),
            message: e.to_string(),
        })?;
        let Value::Object(map) = &mut k else {
            return Err(RenderError::Yaml {
                what: "kustomization",
                path: file.clone(),
                message: "not a mapping".into(),
            });
        };
        let mut set = |key: &str, v: &Option<String>| {
            if let Some(v) = v.as_ref().filter(|v| !v.is_empty()) {
                map.insert(key.into(), Value::String(v.clone()));
            }
        };
        set("namePrefix", &options.name_prefix);
        set("nameSuffix", &options.name_suffix);
        set("namespace", &options.namespace);
        for (key, extra) in [
            ("commonLabels", &options.common_labels),
            ("commonAnnotations", &options.common_annotations),
        ] {
            if extra.is_empty() {
                continue;
            }
            let entry = map
                .entry(key)
                .or_insert_with(|| Value::Object(Default::default()));
            if let Value::Object(m) = entry {
                for (k, v) in extra {
                    m.insert(k.clone(), Value::String(v.clone()));
                }
            }
        }
        set_images(map, &options.images);
        // JSON is YAML: kustomize reads it as the kustomization it was.
        let json = serde_json::to_string_pretty(&k).unwrap_or_default();
        std::fs::write(file, json).map_err(|source| RenderError::Write {
            path: file.clone(),
            source,
        })?;
    }
    let mut command = match &tools.kustomize {
        Some(Kustomize::Standalone(bin)) => {
            let mut c = Command::new(bin);
            c.arg("build");
            c
        }
        Some(Kustomize::Kubectl(bin)) => {
            let mut c = Command::new(bin);
            c.arg("kustomize");
            c
        }
        None => {
            return Err(RenderError::ToolMissing {
                tool: "kustomize (or kubectl)",
            });
        }
    };
    command.arg(dir);
    run(command, tools.timeout)
}

/// Argo CD's `kustomize.images` entries (`name=newName:tag`, `name:tag`, `name@digest`) into
/// the kustomization's `images:`, replacing an entry of the same name.
fn set_images(map: &mut serde_json::Map<String, Value>, images: &[String]) {
    if images.is_empty() {
        return;
    }
    let entry = map
        .entry("images")
        .or_insert_with(|| Value::Array(Vec::new()));
    let Value::Array(list) = entry else { return };
    for image in images {
        let (name, target) = match image.split_once('=') {
            Some((name, target)) => (name.to_owned(), target.to_owned()),
            None => (String::new(), image.clone()),
        };
        let mut new = serde_json::Map::new();
        let (reference, digest) = match target.split_once('@') {
            Some((r, d)) => (r.to_owned(), Some(d.to_owned())),
            None => (target.clone(), None),
        };
        let (new_name, tag) = match reference.rsplit_once(':') {
            Some((n, t)) if !t.contains('/') => (n.to_owned(), Some(t.to_owned())),
            _ => (reference.clone(), None),
        };
        let name = if name.is_empty() {
            new_name.clone()
        } else {
            name
        };
        new.insert("name".into(), Value::String(name.clone()));
        if new_name != name {
            new.insert("newName".into(), Value::String(new_name));
        }
        if let Some(tag) = tag {
            new.insert("newTag".into(), Value::String(tag));
        }
        if let Some(digest) = digest {
            new.insert("digest".into(), Value::String(digest));
        }
        list.retain(|e| e.get("name").and_then(Value::as_str) != Some(name.as_str()));
        list.push(Value::Object(new));
    }
}

// === Helm ===

/// `helm template` as Argo CD runs it: the release name (default the Application's name), the
/// destination's namespace, CRDs included unless `skipCrds`, the value files in order (`$ref`
/// paths from the named source), then `values`/`valuesObject`, then the parameters. A chart
/// from a chart repository is fetched from it first ([`pull`]).
fn helm(tools: &Tools, job: &Job<'_>, dir: Option<&Path>) -> Result<String, RenderError> {
    let bin = tools
        .helm
        .as_ref()
        .ok_or(RenderError::ToolMissing { tool: "helm" })?;
    let s = &*job.source;
    let options = s.helm.clone().unwrap_or_default();
    let release = options
        .release_name
        .clone()
        .unwrap_or_else(|| job.app.metadata.name.clone());
    let namespace = options.namespace.clone().or_else(|| {
        job.app
            .spec
            .destination
            .as_ref()
            .and_then(|d| d.namespace.clone())
    });
    let scratch = tempfile::tempdir().map_err(|source| RenderError::Write {
        path: std::env::temp_dir(),
        source,
    })?;
    let mut command = Command::new(bin);
    command.arg("template").arg(&release);
    // A chart from a chart repository is its own repository: its value files are its own.
    let (chart, repo_root) = match dir {
        Some(dir) => {
            dependencies(tools, bin, dir)?;
            (dir.to_path_buf(), job.root.clone())
        }
        None => match pull(tools, bin, s, scratch.path())? {
            Some(chart) => (chart.clone(), chart),
            None => return Ok(String::new()),
        },
    };
    command.arg(&chart);
    if let Some(ns) = &namespace {
        command.arg("--namespace").arg(ns);
    }
    if !options.skip_crds {
        command.arg("--include-crds");
    }
    let roots = value_files::Roots {
        app_dir: &chart,
        repo_root: &repo_root,
        refs: &job.refs,
        elsewhere: &job.elsewhere,
    };
    for file in &options.value_files {
        match value_files::resolve(file, &roots, options.ignore_missing_value_files)? {
            Some(value_files::Resolved::File(path)) => command.arg("--values").arg(path),
            Some(value_files::Resolved::Url(url)) => command.arg("--values").arg(url),
            None => continue,
        };
    }
    let values = match (&options.values_object, &options.values) {
        (Some(object), _) => Some(serde_json::to_string(object).unwrap_or_default()),
        (None, Some(text)) if !text.trim().is_empty() => Some(text.clone()),
        _ => None,
    };
    if let Some(values) = values {
        let path = scratch.path().join("values.yaml");
        std::fs::write(&path, values).map_err(|source| RenderError::Write {
            path: path.clone(),
            source,
        })?;
        command.arg("--values").arg(path);
    }
    for p in &options.parameters {
        let flag = if p.force_string {
            "--set-string"
        } else {
            "--set"
        };
        command.arg(flag).arg(format!("{}={}", p.name, p.value));
    }
    // The chart is on disk by now: a failure here is the chart's own (a template error), said
    // with helm's message, not the repository's.
    run(command, tools.timeout)
}

/// Whether `source` is a chart from a chart repository rather than a path of a git
/// repository: it names a `chart`, or its `repoURL` is an OCI reference (`oci://`, Argo CD's
/// OCI sources, whose chart is the artifact itself).
pub(super) fn is_remote_chart(source: &Source) -> bool {
    source.chart.is_some() || source.repo_url.trim().starts_with("oci://")
}

/// Fetches the source's chart at its `targetRevision` into `into` (`helm pull --untar`), and
/// returns the unpacked chart's directory, where its own value files are. Where the chart is: an HTTP chart repository by `--repo`; an OCI
/// registry by reference, `oci://host/path/chart` from an `oci://` `repoURL` (with or without
/// `chart`) or from Argo CD's scheme-less OCI `repoURL` beside a `chart`; `--plain-http` for a
/// registry configured `insecure`. A failure here is a fetch failure, said so.
fn pull(
    tools: &Tools,
    bin: &Path,
    s: &Source,
    into: &Path,
) -> Result<Option<PathBuf>, RenderError> {
    let url = s.repo_url.trim().trim_end_matches('/');
    let mut command = Command::new(bin);
    command.arg("pull");
    let oci = match (url.strip_prefix("oci://"), &s.chart) {
        (Some(_), Some(chart)) => Some(format!("{url}/{chart}")),
        (Some(_), None) => Some(url.to_owned()),
        (None, Some(chart)) if url.contains("://") => {
            command.arg(chart).arg("--repo").arg(url);
            None
        }
        (None, Some(chart)) => Some(format!("oci://{url}/{chart}")),
        (None, None) => return Ok(None),
    };
    if let Some(reference) = &oci {
        command.arg(reference);
        let host = reference
            .trim_start_matches("oci://")
            .split('/')
            .next()
            .unwrap_or_default();
        if tools.plain_http.iter().any(|h| h == host) {
            command.arg("--plain-http");
        }
    }
    if let Some(version) = s.target_revision.as_deref().filter(|v| !v.is_empty()) {
        command.arg("--version").arg(version);
    }
    let pulled = into.join("chart");
    std::fs::create_dir_all(&pulled).map_err(|source| RenderError::Write {
        path: pulled.clone(),
        source,
    })?;
    command.arg("--untar").arg("--destination").arg(&pulled);
    let shown = oci.unwrap_or_else(|| url.to_owned());
    match run(command, tools.timeout) {
        Err(RenderError::Failed { stderr, .. }) => {
            return Err(RenderError::ChartUnreachable { url: shown, stderr });
        }
        other => other?,
    };
    let unpacked = std::fs::read_dir(&pulled)
        .map_err(|source| RenderError::Read {
            path: pulled.clone(),
            source,
        })?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| p.join("Chart.yaml").is_file());
    unpacked
        .map(Some)
        .ok_or_else(|| RenderError::ChartUnreachable {
            url: shown,
            stderr: "helm pull wrote no chart".into(),
        })
}

/// `helm dependency build` for a chart whose dependencies are not vendored in `charts/`, as
/// Argo CD does; a dependency repository that cannot be reached is said so.
fn dependencies(tools: &Tools, bin: &Path, dir: &Path) -> Result<(), RenderError> {
    let chart = std::fs::read_to_string(dir.join("Chart.yaml")).unwrap_or_default();
    let Ok(Value::Object(chart)) = crate::yaml_error::from_str::<Value>(&chart) else {
        return Ok(());
    };
    let Some(Value::Array(deps)) = chart.get("dependencies") else {
        return Ok(());
    };
    if deps.is_empty() || dir.join("charts").is_dir() {
        return Ok(());
    }
    let mut command = Command::new(bin);
    command.arg("dependency").arg("build").arg(dir);
    run(command, tools.timeout)
        .map(|_| ())
        .map_err(|e| match e {
            RenderError::Failed { stderr, .. } => RenderError::ChartUnreachable {
                url: deps
                    .iter()
                    .filter_map(|d| d.get("repository").and_then(Value::as_str))
                    .collect::<Vec<_>>()
                    .join(", "),
                stderr,
            },
            other => other,
        })
}

// === Running a tool ===

/// Runs `command` with no input and returns its standard output, stopping it after `timeout`.
fn run(mut command: Command, timeout: Duration) -> Result<String, RenderError> {
    let shown = format!(
        "{} {}",
        Path::new(command.get_program())
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
        command
            .get_args()
            .next()
            .map(|a| a.to_string_lossy().into_owned())
            .unwrap_or_default()
    );
    command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // Helm reads its repositories and cache from here; never the user's own.
        .env(
            "HELM_CACHE_HOME",
            std::env::temp_dir().join("tagpilot-helm/cache"),
        )
        .env(
            "HELM_CONFIG_HOME",
            std::env::temp_dir().join("tagpilot-helm/config"),
        )
        .env(
            "HELM_DATA_HOME",
            std::env::temp_dir().join("tagpilot-helm/data"),
        );
    let mut child = command.spawn().map_err(|source| RenderError::Spawn {
        command: shown.clone(),
        source,
    })?;
    let mut stdout = child.stdout.take();
    let mut stderr = child.stderr.take();
    let out = std::thread::spawn(move || {
        let mut text = String::new();
        if let Some(s) = stdout.as_mut() {
            let _ = s.read_to_string(&mut text);
        }
        text
    });
    let err = std::thread::spawn(move || {
        let mut text = String::new();
        if let Some(s) = stderr.as_mut() {
            let _ = s.read_to_string(&mut text);
        }
        text
    });
    // Real time: it bounds a real process, on a thread that blocks.
    let started = crate::clock::Stopwatch::start();
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if started.elapsed() < timeout => {
                std::thread::sleep(Duration::from_millis(10));
            }
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(RenderError::TimedOut {
                    command: shown,
                    after: timeout,
                });
            }
            Err(source) => {
                return Err(RenderError::Spawn {
                    command: shown,
                    source,
                });
            }
        }
    };
    let stdout = out.join().unwrap_or_default();
    let stderr = err.join().unwrap_or_default();
    if !status.success() {
        // The tool's own error line (helm's `Error: …` comes before hints such as "Use --debug
        // flag to render out invalid YAML"), else its last line.
        let lines: Vec<&str> = stderr.trim().lines().collect();
        let said = lines
            .iter()
            .rev()
            .find(|l| l.starts_with("Error:"))
            .or(lines.last())
            .copied()
            .unwrap_or("");
        return Err(RenderError::Failed {
            command: shown,
            stderr: said.to_owned(),
        });
    }
    Ok(stdout)
}
