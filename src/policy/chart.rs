//! The Helm chart a chart policy follows, and the one identity every place that pins a chart
//! version is matched by.
//!
//! A chart lives in an OCI registry (`oci://host/path/chart`: its versions are the
//! repository's tags) or in an HTTP chart repository (`https://host/path` plus the chart's name:
//! its versions are the `index.yaml` entries). Both are keyed as a [`Repository`] so that the
//! planner asks for a chart's versions as it asks for an image's tags, once per chart:
//! - OCI: the image repository `host/path/chart`, exactly as an image of that name;
//! - HTTP: `registry` holds the repository's URL (`https://host/path`, scheme and host
//!   lower-cased, no trailing `/`) and `path` the chart's name. No image reference parses to a
//!   registry with `://` in it, so an HTTP chart never meets an image.
//!
//! Pure: it parses what users write (policy files, Argo CD sources, `Chart.yaml`, helmfile);
//! nothing here asks the network.

use std::fmt;

use crate::image::Repository;

/// A chart as a policy names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chart {
    /// The repository as written (`oci://host/path` or `https://host/path`).
    pub repository: String,
    /// The chart's name.
    pub name: String,
    /// What the planner and the registry client key it by (see the module doc).
    pub key: Repository,
    /// Whether the chart is in an OCI registry (else in an HTTP chart repository).
    pub oci: bool,
}

/// A chart reference that cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChartError {
    #[error(
        "{written:?} is neither an OCI reference (oci://host/path) nor an HTTP chart repository (https://host/path)"
    )]
    Scheme { written: String },
    #[error("{written:?} names no host")]
    NoHost { written: String },
    #[error("an HTTP chart repository needs the chart's name (`name:`)")]
    NoName,
    #[error("chart name {name:?} is not a chart name (letters, digits, '-', '_', '.')")]
    BadName { name: String },
}

impl Chart {
    /// A chart from `repository` (`oci://host/path[/chart]`, `https://host/path`) and, where
    /// the repository does not end in it, the chart's `name`.
    pub fn parse(repository: &str, name: Option<&str>) -> Result<Chart, ChartError> {
        let written = repository.trim();
        let oci = written.starts_with("oci://");
        let key = match name {
            Some(name) => key(written, name)?,
            None if oci => {
                let rest = written.trim_start_matches("oci://").trim_end_matches('/');
                let (repo, chart) = rest.rsplit_once('/').ok_or_else(|| ChartError::NoHost {
                    written: written.to_string(),
                })?;
                key(&format!("oci://{repo}"), chart)?
            }
            None => return Err(ChartError::NoName),
        };
        let name = name
            .map(str::to_string)
            .unwrap_or_else(|| key.path.rsplit('/').next().unwrap_or_default().to_string());
        Ok(Chart {
            repository: written.to_string(),
            name,
            key,
            oci,
        })
    }
}

impl fmt::Display for Chart {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", display(&self.key))
    }
}

/// The key of chart `name` in the chart repository `repository` as any tool writes it: `oci://`
/// URLs, a registry path with no scheme (Argo CD's OCI `repoURL`), or an HTTP(S) URL.
pub fn key(repository: &str, name: &str) -> Result<Repository, ChartError> {
    let repository = repository.trim().trim_end_matches('/');
    if name.is_empty()
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    {
        return Err(ChartError::BadName {
            name: name.to_string(),
        });
    }
    let no_host = || ChartError::NoHost {
        written: repository.to_string(),
    };
    for scheme in ["http://", "https://"] {
        if let Some(rest) = strip_prefix_ci(repository, scheme) {
            let (host, path) = rest.split_once('/').unwrap_or((rest, ""));
            if host.is_empty() {
                return Err(no_host());
            }
            let mut url = format!("{scheme}{}", host.to_ascii_lowercase());
            if !path.is_empty() {
                url.push('/');
                url.push_str(path);
            }
            return Ok(Repository {
                registry: url,
                path: name.to_string(),
            });
        }
    }
    let rest = strip_prefix_ci(repository, "oci://").unwrap_or(repository);
    if rest.contains("://") {
        return Err(ChartError::Scheme {
            written: repository.to_string(),
        });
    }
    let (host, path) = rest.split_once('/').unwrap_or((rest, ""));
    // Only a name with a host (a dot, a port or localhost) is a registry: `stable` is a helm
    // repository alias, not a place.
    if host.is_empty() || !(host.contains('.') || host.contains(':') || host == "localhost") {
        return Err(no_host());
    }
    let full = if path.is_empty() {
        format!("{host}/{name}")
    } else {
        format!("{host}/{path}/{name}")
    };
    Repository::parse(&full.to_ascii_lowercase()).map_err(|_| ChartError::Scheme {
        written: repository.to_string(),
    })
}

/// The key of an OCI chart written whole (`oci://host/path/chart`, or Argo CD's `repoURL`
/// without `chart:`).
pub fn oci_key(reference: &str) -> Result<Repository, ChartError> {
    let rest = reference.trim().trim_end_matches('/');
    let rest = strip_prefix_ci(rest, "oci://").unwrap_or(rest);
    let (repo, chart) = rest.rsplit_once('/').ok_or_else(|| ChartError::NoHost {
        written: reference.to_string(),
    })?;
    key(&format!("oci://{repo}"), chart)
}

/// Whether `repo` is an HTTP chart repository's chart (see the module doc).
pub fn is_http(repo: &Repository) -> bool {
    repo.registry.starts_with("http://") || repo.registry.starts_with("https://")
}

/// How reports name a chart: `oci://host/path/chart` or `https://host/path/chart`.
pub fn display(repo: &Repository) -> String {
    if is_http(repo) {
        format!("{}/{}", repo.registry, repo.path)
    } else {
        format!("oci://{repo}")
    }
}

/// A chart version as its OCI tag: Helm writes semver's `+` as `_`, which OCI tags allow.
pub fn oci_tag(version: &str) -> String {
    version.replace('+', "_")
}

/// An OCI tag read back as the chart version Helm pushed.
pub fn version_of_tag(tag: &str) -> String {
    tag.replace('_', "+")
}

fn strip_prefix_ci<'a>(s: &'a str, prefix: &str) -> Option<&'a str> {
    (s.len() >= prefix.len() && s[..prefix.len()].eq_ignore_ascii_case(prefix))
        .then(|| &s[prefix.len()..])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_spelling_of_one_chart_has_one_key() {
        let a = Chart::parse("oci://Registry.example:5000/charts/podinfo", None).unwrap();
        let b = Chart::parse("oci://registry.example:5000/charts", Some("podinfo")).unwrap();
        let c = key("registry.example:5000/charts", "podinfo").unwrap();
        let d = oci_key("registry.example:5000/charts/podinfo").unwrap();
        assert_eq!(a.key, b.key);
        assert_eq!(a.key, c);
        assert_eq!(a.key, d);
        assert!(a.oci && !is_http(&a.key));
        assert_eq!(a.name, "podinfo");
        assert_eq!(
            display(&a.key),
            "oci://registry.example:5000/charts/podinfo"
        );
        let h = Chart::parse("HTTPS://Charts.example/stable/", Some("nginx")).unwrap();
        assert_eq!(h.key.registry, "https://charts.example/stable");
        assert_eq!(h.key.path, "nginx");
        assert!(is_http(&h.key) && !h.oci);
        assert_eq!(h.to_string(), "https://charts.example/stable/nginx");
    }

    #[test]
    fn what_is_no_chart_repository_is_refused() {
        assert_eq!(
            Chart::parse("https://charts.example", None),
            Err(ChartError::NoName)
        );
        assert!(matches!(
            Chart::parse("git://x.example/r", Some("a")),
            Err(ChartError::Scheme { .. })
        ));
        assert!(matches!(
            key("stable", "nginx"),
            Err(ChartError::NoHost { .. })
        ));
        assert!(matches!(
            key("https://c.example", "a/b"),
            Err(ChartError::BadName { .. })
        ));
    }

    #[test]
    fn a_build_suffix_travels_as_an_underscore_in_oci_tags() {
        assert_eq!(oci_tag("1.2.3+build.4"), "1.2.3_build.4");
        assert_eq!(version_of_tag("1.2.3_build.4"), "1.2.3+build.4");
    }
}
