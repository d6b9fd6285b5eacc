//! An HTTP chart repository's `index.yaml`: the versions of a chart, with the time each was
//! created, asked as a tag listing is (see [`crate::policy::chart`] for how such a chart is
//! keyed).
//!
//! The index is fetched conditionally: the `ETag` and `Last-Modified` of the last answer go
//! back as `If-None-Match` and `If-Modified-Since`, and a `304` reuses the versions read from
//! it. Large repositories' indexes run to megabytes, and every chart of one repository shares
//! one index, so it is read once per cycle and downloaded again only when it changed. The
//! credentials are the registry's for the same host (`registries[]` in `tagpilot.yaml`,
//! Docker's `config.json`), sent as HTTP basic authentication to that host only.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use reqwest::StatusCode;
use reqwest::header::{ETAG, IF_MODIFIED_SINCE, IF_NONE_MATCH, LAST_MODIFIED};
use serde::Deserialize;

use super::RegistryError;
use super::auth::normalise_host;
use super::state::RegistryClient;
use crate::image::Repository;

/// Why an index could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ChartIndexError {
    #[error("cannot reach {url}")]
    Unreachable {
        url: String,
        #[source]
        source: reqwest::Error,
    },
    #[error("{url} answered HTTP {status}")]
    Status { url: String, status: u16 },
    #[error("{url} is not a chart repository index")]
    NotAnIndex {
        url: String,
        #[source]
        source: serde_saphyr::Error,
    },
    #[error("the index at {url} lists no chart {chart:?}")]
    NoSuchChart { url: String, chart: String },
    #[error("a chart in an HTTP chart repository has versions, not digests or build times")]
    NoManifests,
}

/// One version of a chart as the index lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChartVersion {
    pub version: String,
    /// `created`, when the index says it and it reads as a time.
    pub created: Option<jiff::Timestamp>,
    /// `appVersion`: the version of the application the chart deploys.
    pub app_version: Option<String>,
}

/// An index as last read, with what makes the next request conditional.
#[derive(Debug, Default)]
struct Cached {
    etag: Option<String>,
    last_modified: Option<String>,
    charts: Arc<HashMap<String, Vec<ChartVersion>>>,
}

/// The indexes read so far, by URL; each behind its own lock so that two charts of one
/// repository wait for one download.
#[derive(Debug, Default)]
pub(super) struct ChartIndexes {
    by_url: Mutex<HashMap<String, Arc<tokio::sync::Mutex<Option<Cached>>>>>,
}

#[derive(Deserialize)]
struct RawIndex {
    #[serde(default)]
    entries: HashMap<String, Vec<RawEntry>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawEntry {
    version: String,
    #[serde(default)]
    created: Option<String>,
    #[serde(default)]
    app_version: Option<String>,
}

/// The index's URL for a chart keyed as an HTTP chart.
fn index_url(repo: &Repository) -> String {
    format!("{}/index.yaml", repo.registry)
}

impl RegistryClient {
    /// The versions of the HTTP chart `repo`, as [`super::Registry::list_tags`] answers them.
    pub(super) async fn chart_versions(
        &self,
        repo: &Repository,
    ) -> Result<Vec<ChartVersion>, RegistryError> {
        let wrap = |source| RegistryError::ChartRepository {
            repository: repo.registry.clone(),
            chart: repo.path.clone(),
            source: Arc::new(source),
        };
        let url = index_url(repo);
        let charts = self.chart_index(&url).await.map_err(wrap)?;
        charts.get(&repo.path).cloned().ok_or_else(|| {
            wrap(ChartIndexError::NoSuchChart {
                url,
                chart: repo.path.clone(),
            })
        })
    }

    /// When each of `tags` of the HTTP chart `repo` was created, as far as the index last read
    /// says: the age `minAge` measures.
    pub(super) fn chart_created(
        &self,
        repo: &Repository,
        tags: &[&str],
    ) -> Vec<Option<jiff::Timestamp>> {
        let cell = self.chart_indexes.cell(&index_url(repo));
        let created: HashMap<String, jiff::Timestamp> = match cell.try_lock() {
            Ok(guard) => guard
                .as_ref()
                .and_then(|c| c.charts.get(&repo.path))
                .map(|versions| {
                    versions
                        .iter()
                        .filter_map(|v| Some((v.version.clone(), v.created?)))
                        .collect()
                })
                .unwrap_or_default(),
            Err(_) => HashMap::new(),
        };
        tags.iter().map(|t| created.get(*t).copied()).collect()
    }

    async fn chart_index(
        &self,
        url: &str,
    ) -> Result<Arc<HashMap<String, Vec<ChartVersion>>>, ChartIndexError> {
        let cell = self.chart_indexes.cell(url);
        let mut cached = cell.lock().await;
        let mut request = self.http.get(url);
        if let Some(c) = cached.as_ref() {
            if let Some(etag) = &c.etag {
                request = request.header(IF_NONE_MATCH, etag);
            }
            if let Some(at) = &c.last_modified {
                request = request.header(IF_MODIFIED_SINCE, at);
            }
        }
        if let Some(host) = reqwest::Url::parse(url)
            .ok()
            .and_then(|u| Some(normalise_host(&host_port(&u)?)))
            && let Ok(Some(credential)) = self.credentials.resolve(&host, &host).await
        {
            request = request.basic_auth(&credential.username, Some(credential.password()));
        }
        let unreachable = |source| ChartIndexError::Unreachable {
            url: url.to_string(),
            source,
        };
        let response = request.send().await.map_err(unreachable)?;
        let status = response.status();
        if status == StatusCode::NOT_MODIFIED
            && let Some(c) = cached.as_ref()
        {
            return Ok(c.charts.clone());
        }
        if !status.is_success() {
            return Err(ChartIndexError::Status {
                url: url.to_string(),
                status: status.as_u16(),
            });
        }
        let header = |name| {
            response
                .headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
        };
        let (etag, last_modified) = (header(ETAG), header(LAST_MODIFIED));
        let body = response.text().await.map_err(unreachable)?;
        let raw: RawIndex =
            crate::yaml_error::from_str(&body).map_err(|source| ChartIndexError::NotAnIndex {
                url: url.to_string(),
                source,
            })?;
        let charts: HashMap<String, Vec<ChartVersion>> = raw
            .entries
            .into_iter()
            .map(|(name, entries)| {
                let versions = entries
                    .into_iter()
                    .map(|e| ChartVersion {
                        version: e.version,
                        created: e.created.and_then(|c| c.trim().parse().ok()),
                        app_version: e.app_version,
                    })
                    .collect();
                (name, versions)
            })
            .collect();
        let charts = Arc::new(charts);
        *cached = Some(Cached {
            etag,
            last_modified,
            charts: charts.clone(),
        });
        Ok(charts)
    }
}

impl ChartIndexes {
    fn cell(&self, url: &str) -> Arc<tokio::sync::Mutex<Option<Cached>>> {
        self.by_url
            .lock()
            .expect("chart index lock poisoned")
            .entry(url.to_string())
            .or_default()
            .clone()
    }
}

/// `host[:port]` of a URL, as registries are configured.
fn host_port(url: &reqwest::Url) -> Option<String> {
    let host = url.host_str()?;
    Some(match url.port() {
        Some(port) => format!("{host}:{port}"),
        None => host.to_string(),
    })
}
