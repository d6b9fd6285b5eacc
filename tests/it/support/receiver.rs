//! A receiver of notifications on 127.0.0.1: an axum server that records every request
//! (path, headers, body) and answers 200, or 500 to as many requests as it was told to refuse
//! first; `/api/chat.postMessage` answers as Slack's Web API does (`{"ok": true}`).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri};
use tokio::sync::mpsc;

/// One request received.
#[derive(Debug, Clone)]
pub struct Received {
    pub path: String,
    pub headers: HeaderMap,
    pub body: Bytes,
    /// Whether it was refused (answered 500).
    pub refused: bool,
}

impl Received {
    pub fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .map_or("", |v| v.to_str().unwrap_or(""))
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).expect("a JSON body")
    }
}

struct Inner {
    refuse: AtomicUsize,
    tx: mpsc::UnboundedSender<Received>,
}

pub struct Receiver {
    /// `http://127.0.0.1:<port>`.
    pub base: String,
    inner: Arc<Inner>,
    rx: mpsc::UnboundedReceiver<Received>,
    task: tokio::task::JoinHandle<()>,
}

impl Receiver {
    pub async fn start() -> Receiver {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let (tx, rx) = mpsc::unbounded_channel();
        let inner = Arc::new(Inner {
            refuse: AtomicUsize::new(0),
            tx,
        });
        let app = axum::Router::new()
            .fallback(receive)
            .with_state(inner.clone());
        let task = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        Receiver {
            base,
            inner,
            rx,
            task,
        }
    }

    /// The next `n` requests are answered 500.
    pub fn refuse_next(&self, n: usize) {
        self.inner.refuse.store(n, Ordering::SeqCst);
    }

    /// The next request, refused or not; fails after [`super::PATIENCE`].
    pub async fn next(&mut self) -> Received {
        tokio::time::timeout(super::PATIENCE, self.rx.recv())
            .await
            .expect("no request within PATIENCE")
            .expect("the receiver runs")
    }

    /// A request already received, if any.
    pub fn try_next(&mut self) -> Option<Received> {
        self.rx.try_recv().ok()
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn receive(
    State(inner): State<Arc<Inner>>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> (StatusCode, String) {
    let refused = inner
        .refuse
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
        .is_ok();
    let path = uri.path().to_string();
    let _ = inner.tx.send(Received {
        path: path.clone(),
        headers,
        body,
        refused,
    });
    if refused {
        (StatusCode::INTERNAL_SERVER_ERROR, "down".into())
    } else if path.ends_with("/chat.postMessage") {
        (StatusCode::OK, r#"{"ok":true}"#.into())
    } else {
        (StatusCode::OK, String::new())
    }
}
