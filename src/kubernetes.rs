//! The Kubernetes API client, the edge every cluster read and write goes through: list
//! Applications and `ImageUpdater` resources, read Secrets and ConfigMaps, send a merge patch to
//! an Application or to an `ImageUpdater`'s status; and, for `tagpilot run --leader-elect`, a
//! client whose requests give up quickly (for the lease) and the label the leader puts on its own
//! Pod. Pure I/O.
//!
//! Why it stands alone, beside the registry and git edges: it decides nothing (which patch to
//! send is [`crate::argocd::plan::patch`]'s business, what a Secret means is
//! [`crate::argocd::read::credentials`]'), so it imports only `kube`, `k8s-openapi`, the Application
//! type and the config that selects them — never the planner or the Argo CD sources. Leader
//! election (`run::lease`) uses it without reaching into the Argo CD module.
//!
//! What it must never do: put a Secret's value in an error (only `namespace/name`), or send
//! anything but the merge patch it is given.

use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams,
};

use crate::application::Application;
use crate::config::applications::FromCluster;

/// The label Argo CD puts on its repository Secrets.
pub const SECRET_TYPE_LABEL: &str = "argocd.argoproj.io/secret-type";
/// The field manager tagpilot's patches are recorded under.
pub const FIELD_MANAGER: &str = "tagpilot";

/// A failed request to the Kubernetes API. The messages about Applications say "Kubernetes
/// API" (they end a run or name a patch); the ones about Secrets end up inside a problem that
/// already names the application and the annotation.
#[derive(Debug, thiserror::Error)]
pub enum KubeError {
    #[error(
        "Kubernetes API: applications.fromCluster: no usable kubeconfig or in-cluster configuration"
    )]
    Connect(#[source] kube::Error),
    /// `place` is `namespace team-a` or `all namespaces`.
    #[error("Kubernetes API: listing Applications in {place}")]
    ListApplications {
        place: String,
        #[source]
        source: ApiAnswer,
    },
    #[error("Kubernetes API: Application {id} cannot be read")]
    ReadApplication {
        id: String,
        #[source]
        source: serde_json::Error,
    },
    #[error("Kubernetes API: patching Application {namespace}/{name}")]
    PatchApplication {
        namespace: String,
        name: String,
        #[source]
        source: ApiAnswer,
    },
    /// `place` is `namespace team-a` or `all namespaces`.
    #[error("Kubernetes API: listing ImageUpdater resources in {place}")]
    ListImageUpdaters {
        place: String,
        #[source]
        source: ApiAnswer,
    },
    #[error("Kubernetes API: writing the status of ImageUpdater {namespace}/{name}")]
    PatchImageUpdaterStatus {
        namespace: String,
        name: String,
        #[source]
        source: ApiAnswer,
    },
    #[error("cannot read Secret {namespace}/{name}")]
    ReadSecret {
        namespace: String,
        name: String,
        #[source]
        source: ApiAnswer,
    },
    #[error("there is no Secret {namespace}/{name}")]
    NoSecret { namespace: String, name: String },
    #[error("cannot read ConfigMap {namespace}/{name}")]
    ReadConfigMap {
        namespace: String,
        name: String,
        #[source]
        source: ApiAnswer,
    },
    #[error("Kubernetes API: labelling Pod {namespace}/{name}")]
    LabelPod {
        namespace: String,
        name: String,
        #[source]
        source: ApiAnswer,
    },
    #[error("cannot list Argo CD repository Secrets in {namespace}")]
    ListRepositorySecrets {
        namespace: String,
        #[source]
        source: ApiAnswer,
    },
    #[error("Kubernetes API: reading Application {id}")]
    GetApplication {
        id: String,
        #[source]
        source: ApiAnswer,
    },
    #[error("Kubernetes API: watching Application {id}")]
    WatchApplication {
        id: String,
        #[source]
        source: kube::runtime::watcher::Error,
    },
}

/// A Kubernetes API error said as a sentence. kube's own message for an answer of the API
/// server ends in its debug dump (`ApiError: … (Status { status: Some(Failure), code: 404, …
/// })`); this one says the answer: `the API server answered 403 Forbidden: secrets "cosign" is
/// forbidden: …`. Any other error is kube's.
#[derive(Debug)]
pub struct ApiAnswer(pub kube::Error);

impl std::fmt::Display for ApiAnswer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0 {
            kube::Error::Api(status) => {
                write!(f, "the API server answered {}", status.code)?;
                if !status.reason.is_empty() {
                    write!(f, " {}", status.reason)?;
                }
                if !status.message.is_empty() {
                    write!(f, ": {}", status.message)?;
                }
                Ok(())
            }
            other => std::fmt::Display::fmt(other, f),
        }
    }
}

impl std::error::Error for ApiAnswer {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match &self.0 {
            kube::Error::Api(_) => None,
            other => other.source(),
        }
    }
}

/// A connection to the Kubernetes API.
#[derive(Clone)]
pub struct Cluster {
    client: kube::Client,
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster").finish_non_exhaustive()
    }
}

impl Cluster {
    /// Connects as kube-rs does by default: `$KUBECONFIG` or `~/.kube/config`, else the
    /// in-cluster service account.
    pub async fn connect() -> Result<Cluster, KubeError> {
        kube::Client::try_default()
            .await
            .map(Cluster::new)
            .map_err(KubeError::Connect)
    }

    /// Connects like [`Cluster::connect`], with every request bounded: connecting, sending and
    /// each wait for the answer give up after `timeout`. A lease holder needs this: a renewal
    /// that hangs must fail while the lease is still valid, not after another replica may
    /// have taken it over.
    pub async fn connect_with_timeout(timeout: std::time::Duration) -> Result<Cluster, KubeError> {
        let mut config = kube::Config::infer()
            .await
            .map_err(|e| KubeError::Connect(kube::Error::InferConfig(e)))?;
        config.connect_timeout = Some(timeout);
        config.read_timeout = Some(timeout);
        config.write_timeout = Some(timeout);
        kube::Client::try_from(config)
            .map(Cluster::new)
            .map_err(KubeError::Connect)
    }

    /// The client, for crates built on kube-rs (the lease manager).
    pub fn client(&self) -> kube::Client {
        self.client.clone()
    }

    /// The namespace of the kubeconfig context, or of the service account in a Pod.
    pub fn default_namespace(&self) -> &str {
        self.client.default_namespace()
    }

    /// Sets the label `key` on the Pod `namespace/name` to `value`, or removes it (`None`), with
    /// a JSON merge patch that touches nothing else.
    pub async fn label_pod(
        &self,
        namespace: &str,
        name: &str,
        key: &str,
        value: Option<&str>,
    ) -> Result<(), KubeError> {
        let params = PatchParams {
            field_manager: Some(FIELD_MANAGER.to_string()),
            ..PatchParams::default()
        };
        let patch = serde_json::json!({"metadata": {"labels": {key: value}}});
        Api::<Pod>::namespaced(self.client.clone(), namespace)
            .patch(name, &params, &Patch::Merge(&patch))
            .await
            .map(drop)
            .map_err(|source| KubeError::LabelPod {
                namespace: namespace.to_string(),
                name: name.to_string(),
                source: ApiAnswer(source),
            })
    }

    /// A cluster reached through `client` (tests build one against a local URL).
    pub fn new(client: kube::Client) -> Cluster {
        Cluster { client }
    }

    fn applications_api(&self, namespace: Option<&str>) -> Api<DynamicObject> {
        let resource = ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("argoproj.io", "v1alpha1", "Application"),
            "applications",
        );
        match namespace {
            Some(ns) => Api::namespaced_with(self.client.clone(), ns, &resource),
            None => Api::all_with(self.client.clone(), &resource),
        }
    }

    /// The Applications `from` selects: in each of its namespaces, or across all namespaces
    /// when it names none, filtered by its label selector.
    pub async fn applications(&self, from: &FromCluster) -> Result<Vec<Application>, KubeError> {
        let mut params = ListParams::default();
        if let Some(selector) = from.selector.as_deref().filter(|s| !s.trim().is_empty()) {
            params = params.labels(selector);
        }
        let namespaces: Vec<Option<&str>> = if from.namespaces.is_empty() {
            vec![None]
        } else {
            from.namespaces.iter().map(|n| Some(n.as_str())).collect()
        };
        let mut apps = Vec::new();
        for ns in namespaces {
            let list = self
                .applications_api(ns)
                .list(&params)
                .await
                .map_err(|source| KubeError::ListApplications {
                    place: match ns {
                        Some(ns) => format!("namespace {ns}"),
                        None => "all namespaces".to_string(),
                    },
                    source: ApiAnswer(source),
                })?;
            for object in list.items {
                let id = format!(
                    "{}/{}",
                    object.metadata.namespace.as_deref().unwrap_or_default(),
                    object.metadata.name.as_deref().unwrap_or_default()
                );
                let value = serde_json::to_value(&object).expect("a listed object serialises");
                let mut app: Application = serde_json::from_value(value)
                    .map_err(|source| KubeError::ReadApplication { id, source })?;
                app.origin = "cluster".to_string();
                apps.push(app);
            }
        }
        apps.sort_by_key(Application::id);
        Ok(apps)
    }

    fn image_updaters_api(&self, namespace: Option<&str>) -> Api<DynamicObject> {
        let resource = updater_resource();
        match namespace {
            Some(ns) => Api::namespaced_with(self.client.clone(), ns, &resource),
            None => Api::all_with(self.client.clone(), &resource),
        }
    }

    /// The `ImageUpdater` resources in `namespaces` (all when empty), as the API returns them;
    /// reading them is the caller's business. None when the CRD is not installed: a cluster
    /// without Image Updater's CRD simply has no such resources.
    pub async fn image_updaters(
        &self,
        namespaces: &[String],
    ) -> Result<Vec<serde_json::Value>, KubeError> {
        let places: Vec<Option<&str>> = if namespaces.is_empty() {
            vec![None]
        } else {
            namespaces.iter().map(|n| Some(n.as_str())).collect()
        };
        let mut out = Vec::new();
        for ns in places {
            match self
                .image_updaters_api(ns)
                .list(&ListParams::default())
                .await
            {
                Ok(list) => out.extend(
                    list.items
                        .iter()
                        .map(|o| serde_json::to_value(o).expect("a listed object serialises")),
                ),
                Err(kube::Error::Api(e)) if e.code == 404 => {}
                Err(source) => {
                    return Err(KubeError::ListImageUpdaters {
                        place: match ns {
                            Some(ns) => format!("namespace {ns}"),
                            None => "all namespaces".to_string(),
                        },
                        source: ApiAnswer(source),
                    });
                }
            }
        }
        Ok(out)
    }

    /// Watches the `ImageUpdater` resources in `namespaces` (all when empty), for a process
    /// that reads them every cycle (`tagpilot run`): one listing, then only the changes. The
    /// returned future drives the watches (with kube's backoff after errors, such as a missing
    /// CRD) and must be spawned; the [`UpdaterWatch`] reads what they found.
    pub fn watch_image_updaters(
        &self,
        namespaces: &[String],
    ) -> (
        UpdaterWatch,
        impl std::future::Future<Output = ()> + Send + 'static,
    ) {
        use futures_util::StreamExt as _;
        use kube::runtime::{WatchStreamExt as _, reflector, watcher};
        let places: Vec<Option<String>> = if namespaces.is_empty() {
            vec![None]
        } else {
            namespaces.iter().cloned().map(Some).collect()
        };
        let mut stores = Vec::new();
        let mut streams = Vec::new();
        for ns in places {
            let api = self.image_updaters_api(ns.as_deref());
            let writer = reflector::store::Writer::new(updater_resource());
            let store = writer.as_reader();
            let stream = reflector::reflector(
                writer,
                watcher(api, watcher::Config::default()).default_backoff(),
            )
            .for_each(move |event| {
                if let Err(e) = event {
                    tracing::debug!("watching ImageUpdater resources: {e}");
                }
                std::future::ready(())
            });
            stores.push(store);
            streams.push(stream);
        }
        let drive = async move {
            futures_util::future::join_all(streams).await;
        };
        (UpdaterWatch { stores }, drive)
    }

    /// Replaces the listed fields of an `ImageUpdater`'s `status` (a JSON merge patch on the
    /// status subresource).
    pub async fn patch_image_updater_status(
        &self,
        namespace: &str,
        name: &str,
        status: &serde_json::Value,
    ) -> Result<(), KubeError> {
        let params = PatchParams {
            field_manager: Some(FIELD_MANAGER.to_string()),
            ..PatchParams::default()
        };
        let body = serde_json::json!({ "status": status });
        self.image_updaters_api(Some(namespace))
            .patch_status(name, &params, &Patch::Merge(&body))
            .await
            .map(drop)
            .map_err(|source| KubeError::PatchImageUpdaterStatus {
                namespace: namespace.to_string(),
                name: name.to_string(),
                source: ApiAnswer(source),
            })
    }

    pub async fn secret(&self, namespace: &str, name: &str) -> Result<Secret, KubeError> {
        Api::<Secret>::namespaced(self.client.clone(), namespace)
            .get(name)
            .await
            .map_err(|source| match source {
                kube::Error::Api(status) if status.code == 404 => KubeError::NoSecret {
                    namespace: namespace.to_string(),
                    name: name.to_string(),
                },
                source => KubeError::ReadSecret {
                    namespace: namespace.to_string(),
                    name: name.to_string(),
                    source: ApiAnswer(source),
                },
            })
    }

    /// A ConfigMap's `data`; `None` when there is no such ConfigMap.
    pub async fn config_map_data(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<std::collections::BTreeMap<String, String>>, KubeError> {
        match Api::<ConfigMap>::namespaced(self.client.clone(), namespace)
            .get_opt(name)
            .await
        {
            Ok(found) => Ok(found.map(|c| c.data.unwrap_or_default())),
            Err(source) => Err(KubeError::ReadConfigMap {
                namespace: namespace.to_string(),
                name: name.to_string(),
                source: ApiAnswer(source),
            }),
        }
    }

    /// Argo CD's repository Secrets in its namespace (`repository` and `repo-creds`).
    pub async fn repository_secrets(&self, namespace: &str) -> Result<Vec<Secret>, KubeError> {
        let params = ListParams::default()
            .labels(&format!("{SECRET_TYPE_LABEL} in (repository,repo-creds)"));
        Api::<Secret>::namespaced(self.client.clone(), namespace)
            .list(&params)
            .await
            .map(|l| l.items)
            .map_err(|source| KubeError::ListRepositorySecrets {
                namespace: namespace.to_string(),
                source: ApiAnswer(source),
            })
    }

    /// Sends `patch` as a JSON merge patch to the Application `namespace/name`.
    pub async fn patch_application(
        &self,
        namespace: &str,
        name: &str,
        patch: &serde_json::Value,
    ) -> Result<(), KubeError> {
        let params = PatchParams {
            field_manager: Some(FIELD_MANAGER.to_string()),
            ..PatchParams::default()
        };
        self.applications_api(Some(namespace))
            .patch(name, &params, &Patch::Merge(patch))
            .await
            .map(drop)
            .map_err(|source| KubeError::PatchApplication {
                namespace: namespace.to_string(),
                name: name.to_string(),
                source: ApiAnswer(source),
            })
    }
}

impl Cluster {
    /// Follows one Application: its state as the API sends it, first the object as listed,
    /// then every change (one watch, not polling). `None` when the Application is gone. A
    /// dropped watch is resumed with kube's backoff; each error is yielded so the caller can
    /// name it.
    pub fn watch_application(
        &self,
        namespace: &str,
        name: &str,
    ) -> impl futures_util::Stream<Item = Result<Option<serde_json::Value>, KubeError>> + Send + use<>
    {
        use futures_util::StreamExt as _;
        use kube::runtime::{WatchStreamExt as _, watcher};
        let id = format!("{namespace}/{name}");
        watcher::watch_object(self.applications_api(Some(namespace)), name)
            .default_backoff()
            .map(move |event| match event {
                Ok(object) => object
                    .map(serde_json::to_value)
                    .transpose()
                    .map_err(|source| KubeError::ReadApplication {
                        id: id.clone(),
                        source,
                    }),
                Err(source) => Err(KubeError::WatchApplication {
                    id: id.clone(),
                    source,
                }),
            })
    }

    /// One Application as the API returns it (a promotion's upstream); `None` when it does not
    /// exist.
    pub async fn application(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<serde_json::Value>, KubeError> {
        let id = format!("{namespace}/{name}");
        let object = self
            .applications_api(Some(namespace))
            .get_opt(name)
            .await
            .map_err(|source| KubeError::GetApplication {
                id: id.clone(),
                source: ApiAnswer(source),
            })?;
        object
            .map(serde_json::to_value)
            .transpose()
            .map_err(|source| KubeError::ReadApplication { id, source })
    }

    /// Asks Argo CD to compare the Application again now (its `argocd.argoproj.io/refresh`
    /// annotation, which the controller removes once it has refreshed): for a status that was
    /// reconciled before the sync it reports on finished.
    pub async fn refresh_application(&self, namespace: &str, name: &str) -> Result<(), KubeError> {
        let patch = serde_json::json!({
            "metadata": {"annotations": {REFRESH_ANNOTATION: "normal"}}
        });
        self.patch_application(namespace, name, &patch).await
    }
}

/// Argo CD's annotation that asks the controller for a refresh (`normal` or `hard`).
pub const REFRESH_ANNOTATION: &str = "argocd.argoproj.io/refresh";

/// The value of `key` in a Secret: `data` (decoded), else `stringData`. Callers must keep it out
/// of logs and errors.
pub fn secret_value(secret: &Secret, key: &str) -> Option<String> {
    secret
        .data
        .as_ref()
        .and_then(|d| d.get(key))
        .map(|b| String::from_utf8_lossy(&b.0).into_owned())
        .or_else(|| {
            secret
                .string_data
                .as_ref()
                .and_then(|d| d.get(key))
                .cloned()
        })
}

fn updater_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(
            "argocd-image-updater.argoproj.io",
            "v1alpha1",
            "ImageUpdater",
        ),
        "imageupdaters",
    )
}

/// What the watches of [`Cluster::watch_image_updaters`] hold.
#[derive(Clone)]
pub struct UpdaterWatch {
    stores: Vec<kube::runtime::reflector::Store<DynamicObject>>,
}

impl UpdaterWatch {
    /// Completes once every watch has listed once (never, for a missing CRD): what an
    /// observer waits on rather than asking [`UpdaterWatch::snapshot`] again and again.
    pub async fn listed(&self) {
        for store in &self.stores {
            // A writer dropped (the watch ended) is not a listing: wait on, as for a missing CRD.
            if store.wait_until_ready().await.is_err() {
                std::future::pending::<()>().await;
            }
        }
    }

    /// The resources as last seen, as the API returns them; `None` until every watch has
    /// listed once (a missing CRD never lists: the caller then asks the API itself).
    pub fn snapshot(&self) -> Option<Vec<serde_json::Value>> {
        use futures_util::FutureExt as _;
        let ready = self
            .stores
            .iter()
            .all(|s| matches!(s.wait_until_ready().now_or_never(), Some(Ok(()))));
        if !ready {
            return None;
        }
        let mut out: Vec<serde_json::Value> = self
            .stores
            .iter()
            .flat_map(|s| s.state())
            .map(|o| serde_json::to_value(&*o).expect("a watched object serialises"))
            .collect();
        // The listing's order, so reports do not change with the watch's.
        out.sort_by_key(|v| {
            (
                v["metadata"]["namespace"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
                v["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
            )
        });
        Some(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_api_server_answer_reads_as_a_sentence_not_a_debug_dump() {
        let status: kube::core::Status = serde_json::from_value(serde_json::json!({
            "status": "Failure", "code": 403, "reason": "Forbidden",
            "message": "secrets \"cosign\" is forbidden: User \"tagpilot\" cannot get resource \"secrets\"",
            "details": {"name": "cosign", "kind": "secrets"}
        }))
        .unwrap();
        let error = KubeError::ReadSecret {
            namespace: "ci".into(),
            name: "cosign".into(),
            source: ApiAnswer(kube::Error::Api(Box::new(status))),
        };
        assert_eq!(
            crate::error_chain::chain(&error),
            "cannot read Secret ci/cosign: the API server answered 403 Forbidden: secrets \
             \"cosign\" is forbidden: User \"tagpilot\" cannot get resource \"secrets\""
        );
    }
}
