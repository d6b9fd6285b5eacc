//! A scripted Kubernetes API for leader election (no API server can run here): one
//! `coordination.k8s.io/v1` Lease and the Pods' labels, answered the way the API server
//! answers them (404 before the Lease exists, 201 on create, server-side apply refusing with
//! 409 to take a Lease another field manager holds, strategic merge patches, JSON merge
//! patches on Pods). Every request is journalled in order, so tests state the exact
//! exchange; faults (500s, hangs) are switched on by the test. "Another replica" is the test
//! itself, writing the Lease directly. [`ManualClock`] is the time the election keeps, moved
//! by the test.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use serde_json::{Value, json};
use wiremock::matchers::any;
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

pub const TOKEN: &str = "lease-test-token";
pub const NAMESPACE: &str = "tagpilot";
pub const LEASE: &str = "tagpilot";

/// What a test makes Lease patches do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Patches of the Lease answer 500.
    ServerError,
    /// Patches of the Lease get no answer for a minute.
    Hang,
}

#[derive(Debug, Default)]
struct State {
    /// The Lease's `spec`, once created.
    lease: Option<serde_json::Map<String, Value>>,
    /// The field manager that set `holderIdentity` (server-side apply conflicts on it).
    holder_manager: Option<String>,
    resource_version: u64,
    pod_labels: BTreeMap<String, BTreeMap<String, String>>,
    journal: Vec<String>,
    fault: Option<Fault>,
    /// Moves a clock when a request hangs, by as long as the client waits for it.
    on_hang: Option<(ManualClock, Duration)>,
}

/// The API double; clone it freely, all clones share one state.
#[derive(Clone)]
pub struct LeaseApi {
    state: Arc<Mutex<State>>,
    /// How many requests have been answered, as they are: what a test waits on.
    answered: Arc<tokio::sync::watch::Sender<u64>>,
}

impl LeaseApi {
    /// Starts the double with no Lease.
    pub async fn start() -> (MockServer, LeaseApi) {
        let server = MockServer::start().await;
        let api = LeaseApi {
            state: Arc::default(),
            answered: Arc::new(tokio::sync::watch::Sender::new(0)),
        };
        Mock::given(any())
            .respond_with(api.clone())
            .mount(&server)
            .await;
        (server, api)
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The requests so far, one line each (`GET lease`, `APPLY lease holder=a`, …).
    pub fn journal(&self) -> Vec<String> {
        self.state().journal.clone()
    }

    /// Waits until `done` holds of the double, looked at after each request it answers;
    /// fails naming `what`, with the requests, after [`crate::support::PATIENCE`].
    pub async fn until(&self, what: &str, done: impl Fn(&LeaseApi) -> bool) {
        let mut answered = self.answered.subscribe();
        let seen = answered.wait_for(|_| done(self));
        if !matches!(
            tokio::time::timeout(crate::support::PATIENCE, seen).await,
            Ok(Ok(_))
        ) {
            panic!("not {what}; requests:\n{}", self.journal().join("\n"));
        }
    }

    /// Forgets the requests so far.
    pub fn clear_journal(&self) {
        self.state().journal.clear();
    }

    pub fn set_fault(&self, fault: Option<Fault>) {
        self.state().fault = fault;
    }

    /// While a request hangs (`Fault::Hang`), `clock` moves on by `by`: the time the client
    /// waits before giving up, which a manual clock does not see pass on its own.
    pub fn advance_while_hanging(&self, clock: &ManualClock, by: Duration) {
        self.state().on_hang = Some((clock.clone(), by));
    }

    /// The Lease's holder, if any.
    pub fn holder(&self) -> Option<String> {
        self.state()
            .lease
            .as_ref()
            .and_then(|s| s.get("holderIdentity"))
            .and_then(Value::as_str)
            .map(str::to_string)
    }

    /// When the Lease expires: its `renewTime` plus `leaseDurationSeconds`.
    pub fn expiry(&self) -> Option<jiff::Timestamp> {
        let state = self.state();
        let spec = state.lease.as_ref()?;
        let renew: jiff::Timestamp = spec.get("renewTime")?.as_str()?.parse().ok()?;
        let secs = spec.get("leaseDurationSeconds")?.as_i64()?;
        Some(renew + jiff::SignedDuration::from_secs(secs))
    }

    /// The labels of the Pod `name`, as patched so far.
    pub fn pod_labels(&self, name: &str) -> BTreeMap<String, String> {
        self.state()
            .pod_labels
            .get(name)
            .cloned()
            .unwrap_or_default()
    }

    /// Another replica, `identity`, takes or renews the Lease at `at`, for `duration`.
    pub fn hold_by_at(&self, identity: &str, duration: Duration, at: jiff::Timestamp) {
        let mut state = self.state();
        let now = micro_time(at);
        let spec = state.lease.get_or_insert_with(Default::default);
        let taken = spec.get("holderIdentity").and_then(Value::as_str) != Some(identity);
        spec.insert("holderIdentity".into(), json!(identity));
        spec.insert("renewTime".into(), json!(now));
        spec.insert("leaseDurationSeconds".into(), json!(duration.as_secs()));
        if taken {
            spec.insert("acquireTime".into(), json!(now));
        }
        state.holder_manager = Some(format!("tagpilot-{identity}"));
        state.resource_version += 1;
    }

    fn lease_object(state: &State) -> Value {
        json!({
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": LEASE, "namespace": NAMESPACE,
                         "resourceVersion": state.resource_version.to_string()},
            "spec": state.lease.clone().unwrap_or_default(),
        })
    }
}

/// A time as the API server writes a `MicroTime`.
fn micro_time(t: jiff::Timestamp) -> String {
    t.strftime("%Y-%m-%dT%H:%M:%S.%6fZ").to_string()
}

fn status(code: u16, reason: &str, message: &str) -> ResponseTemplate {
    ResponseTemplate::new(code).set_body_json(json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": message, "reason": reason, "code": code,
    }))
}

/// The keys of a patch's `spec`, with `=value` for the holder: `holder=a,renewTime`.
fn describe_spec(body: &Value) -> String {
    let Some(spec) = body.get("spec").and_then(Value::as_object) else {
        return String::new();
    };
    let mut keys: Vec<String> = spec
        .iter()
        .map(|(k, v)| match (k.as_str(), v) {
            ("holderIdentity", Value::String(h)) => format!("holder={h}"),
            ("holderIdentity", Value::Null) => "holder=null".to_string(),
            _ => k.clone(),
        })
        .collect();
    keys.sort();
    keys.join(",")
}

impl Respond for LeaseApi {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        let answer = self.answer(request);
        self.answered.send_modify(|n| *n += 1);
        answer
    }
}

impl LeaseApi {
    fn answer(&self, request: &Request) -> ResponseTemplate {
        let mut state = self.state();
        let authorized = request
            .headers
            .get("authorization")
            .is_some_and(|v| v.as_bytes() == format!("Bearer {TOKEN}").as_bytes());
        let lease_path = format!("/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases");
        let pods_path = format!("/api/v1/namespaces/{NAMESPACE}/pods/");
        let path = request.url.path().to_string();
        let method = request.method.as_str().to_string();
        let content_type = request
            .headers
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string();
        let body: Value = serde_json::from_slice(&request.body).unwrap_or(Value::Null);
        let field_manager = request
            .url
            .query_pairs()
            .find(|(k, _)| k == "fieldManager")
            .map(|(_, v)| v.into_owned())
            .unwrap_or_default();
        if !authorized {
            state.journal.push(format!("{method} {path} unauthorized"));
            return status(401, "Unauthorized", "Unauthorized");
        }

        if let Some(pod) = path.strip_prefix(&pods_path) {
            let labels = body["metadata"]["labels"].as_object().cloned();
            let line = match (&*method, content_type.as_str(), labels) {
                ("PATCH", "application/merge-patch+json", Some(labels)) => {
                    let entry = state.pod_labels.entry(pod.to_string()).or_default();
                    let mut said = Vec::new();
                    for (k, v) in labels {
                        match v.as_str() {
                            Some(v) => {
                                entry.insert(k.clone(), v.to_string());
                                said.push(format!("{k}={v}"));
                            }
                            None => {
                                entry.remove(&k);
                                said.push(format!("{k}=null"));
                            }
                        }
                    }
                    format!("PATCH pod/{pod} {}", said.join(","))
                }
                _ => format!("{method} pod/{pod} {content_type} unexpected"),
            };
            state.journal.push(line);
            return ResponseTemplate::new(200).set_body_json(json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": pod, "namespace": NAMESPACE,
                             "labels": state.pod_labels.get(pod).cloned().unwrap_or_default()},
            }));
        }

        if path == lease_path && method == "POST" {
            state.journal.push("POST lease".to_string());
            if state.lease.is_some() {
                return status(409, "AlreadyExists", "leases \"tagpilot\" already exists");
            }
            state.lease = Some(Default::default());
            state.resource_version += 1;
            return ResponseTemplate::new(201).set_body_json(LeaseApi::lease_object(&state));
        }
        if path != format!("{lease_path}/{LEASE}") {
            state.journal.push(format!("{method} {path} unexpected"));
            return status(404, "NotFound", "not scripted");
        }
        match method.as_str() {
            "GET" => {
                state.journal.push("GET lease".to_string());
                if state.lease.is_none() {
                    return status(404, "NotFound", "leases \"tagpilot\" not found");
                }
                ResponseTemplate::new(200).set_body_json(LeaseApi::lease_object(&state))
            }
            "PATCH" => {
                let apply = content_type == "application/apply-patch+yaml";
                let kind = if apply {
                    "APPLY"
                } else if content_type == "application/strategic-merge-patch+json" {
                    "PATCH"
                } else {
                    "PATCH(unexpected content type)"
                };
                state.journal.push(format!(
                    "{kind} lease {} by {field_manager}",
                    describe_spec(&body)
                ));
                match state.fault {
                    Some(Fault::ServerError) => {
                        return status(500, "InternalError", "etcdserver: request timed out");
                    }
                    Some(Fault::Hang) => {
                        if let Some((clock, by)) = &state.on_hang {
                            clock.advance(*by);
                        }
                        return ResponseTemplate::new(200).set_delay(Duration::from_secs(60));
                    }
                    None => {}
                }
                let Some(spec) = state.lease.clone() else {
                    return status(404, "NotFound", "leases \"tagpilot\" not found");
                };
                let mut spec = spec;
                let patch = body["spec"].as_object().cloned().unwrap_or_default();
                let current = spec
                    .get("holderIdentity")
                    .and_then(Value::as_str)
                    .map(str::to_string);
                if let Some(Value::String(wanted)) = patch.get("holderIdentity") {
                    let owner = state.holder_manager.as_deref();
                    // Server-side apply: a field another manager set is not taken over
                    // without force.
                    if apply
                        && current.as_deref().is_some_and(|c| c != wanted)
                        && owner != Some(field_manager.as_str())
                    {
                        return status(
                            409,
                            "Conflict",
                            "Apply failed with 1 conflict: conflict with another manager: .spec.holderIdentity",
                        );
                    }
                    state.holder_manager = Some(field_manager.clone());
                }
                for (k, v) in patch {
                    if v.is_null() {
                        spec.remove(&k);
                        if k == "holderIdentity" {
                            state.holder_manager = None;
                        }
                    } else {
                        spec.insert(k, v);
                    }
                }
                state.lease = Some(spec);
                state.resource_version += 1;
                ResponseTemplate::new(200).set_body_json(LeaseApi::lease_object(&state))
            }
            _ => {
                state.journal.push(format!("{method} lease unexpected"));
                status(405, "MethodNotAllowed", "not scripted")
            }
        }
    }
}

/// A kubeconfig that reaches `server` with [`TOKEN`], namespace [`NAMESPACE`].
pub fn kubeconfig(server: &MockServer) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: t\n  cluster: {{server: '{}'}}\nusers:\n- name: t\n  user: {{token: {TOKEN}}}\ncontexts:\n- name: t\n  context: {{cluster: t, user: t, namespace: {NAMESPACE}}}\ncurrent-context: t\n",
        server.uri()
    )
}

/// A client for `server` whose requests give up after `timeout`, as the lease client's do.
pub async fn cluster(
    server: &MockServer,
    timeout: Duration,
) -> tagpilot::argocd::read::cluster::Cluster {
    let kc = kube::config::Kubeconfig::from_yaml(&kubeconfig(server)).unwrap();
    let mut config = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .unwrap();
    config.connect_timeout = Some(timeout);
    config.read_timeout = Some(timeout);
    config.write_timeout = Some(timeout);
    tagpilot::argocd::read::cluster::Cluster::new(kube::Client::try_from(config).unwrap())
}

/// The election's time: the library's manual clock, moved by the test.
pub use tagpilot::clock::ManualClock;
