//! A proxy in front of the real registry that passes every request on unchanged, except those
//! its rule picks, which get a fault instead: a status (500, 429) or no answer at all. For
//! faults distribution 2.8 cannot be made to produce on one path while serving the others (a
//! registry that serves tags and manifests but fails on the signature lookups).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderName, StatusCode};
use axum::response::Response;

/// What a picked request gets.
#[derive(Debug, Clone, Copy)]
pub enum Fault {
    /// This status, with an empty body.
    Status(u16),
    /// No answer, ever: the client has to give up.
    Hang,
}

type Rule = dyn Fn(&str) -> Option<Fault> + Send + Sync;

struct Shared {
    upstream: String,
    http: reqwest::Client,
    rule: Box<Rule>,
    faulted: AtomicUsize,
}

/// The running proxy; stops when dropped.
pub struct FaultProxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

impl FaultProxy {
    /// Proxies to `upstream` (`host:port`, plain HTTP); `rule` sees each request's path and
    /// query and picks the fault, if any.
    pub async fn start(
        upstream: &str,
        rule: impl Fn(&str) -> Option<Fault> + Send + Sync + 'static,
    ) -> FaultProxy {
        let shared = Arc::new(Shared {
            upstream: format!("http://{upstream}"),
            http: reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .unwrap(),
            rule: Box::new(rule),
            faulted: AtomicUsize::new(0),
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let app = axum::Router::new()
            .fallback(forward)
            .with_state(shared.clone());
        let task = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        FaultProxy { addr, shared, task }
    }

    /// `127.0.0.1:port`: the registry host to name in images and `registries:`.
    pub fn host(&self) -> String {
        self.addr.to_string()
    }

    /// How many requests got a fault so far.
    pub fn faulted(&self) -> usize {
        self.shared.faulted.load(Ordering::SeqCst)
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn forward(State(shared): State<Arc<Shared>>, request: Request) -> Response {
    let target = request
        .uri()
        .path_and_query()
        .map(|p| p.as_str().to_string())
        .unwrap_or_default();
    match (shared.rule)(&target) {
        Some(Fault::Status(status)) => {
            shared.faulted.fetch_add(1, Ordering::SeqCst);
            return Response::builder()
                .status(status)
                .body(Body::empty())
                .unwrap();
        }
        Some(Fault::Hang) => {
            shared.faulted.fetch_add(1, Ordering::SeqCst);
            std::future::pending::<()>().await;
        }
        None => {}
    }
    let (parts, body) = request.into_parts();
    let body = axum::body::to_bytes(body, usize::MAX).await.unwrap();
    let mut sent = shared
        .http
        .request(parts.method, format!("{}{target}", shared.upstream))
        .body(body);
    for (name, value) in &parts.headers {
        if name != "host" {
            sent = sent.header(name, value);
        }
    }
    let Ok(answer) = sent.send().await else {
        return Response::builder()
            .status(StatusCode::BAD_GATEWAY)
            .body(Body::empty())
            .unwrap();
    };
    let mut response = Response::builder().status(answer.status().as_u16());
    for (name, value) in answer.headers() {
        let skip: [HeaderName; 2] = [
            axum::http::header::TRANSFER_ENCODING,
            axum::http::header::CONNECTION,
        ];
        if !skip.contains(name) {
            response = response.header(name, value);
        }
    }
    let bytes = answer.bytes().await.unwrap_or_default();
    response.body(Body::from(bytes)).unwrap()
}
