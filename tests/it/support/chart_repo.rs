//! A Helm chart repository on 127.0.0.1: the files of a directory (`helm package` archives and
//! the `index.yaml` of `helm repo index`) served over HTTP, as a static web server or a chart
//! museum serves them, with an `ETag` per file that `If-None-Match` is answered against (`304`),
//! and HTTP basic authentication when given a user.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use axum::http::{HeaderMap, StatusCode, Uri, header};
use base64::Engine as _;

/// A running chart repository.
pub struct ChartRepo {
    pub url: String,
    /// The status of every answer to `/index.yaml`, in order.
    index_answers: Arc<Mutex<Vec<u16>>>,
}

impl ChartRepo {
    /// Serves `dir`; with `user`, every request needs that user and password.
    pub async fn serve(dir: PathBuf, user: Option<(&str, &str)>) -> ChartRepo {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let expected = user.map(|(u, p)| {
            format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode(format!("{u}:{p}"))
            )
        });
        let index_answers = Arc::new(Mutex::new(Vec::new()));
        let answers = index_answers.clone();
        let app = axum::Router::new().fallback(move |uri: Uri, headers: HeaderMap| {
            let file = dir.join(uri.path().trim_start_matches('/'));
            let expected = expected.clone();
            let answers = answers.clone();
            async move {
                let (status, etag, body) = answer(&file, &headers, expected.as_deref());
                if uri.path() == "/index.yaml" {
                    answers.lock().unwrap().push(status.as_u16());
                }
                let mut response = axum::response::Response::new(axum::body::Body::from(body));
                *response.status_mut() = status;
                if let Some(etag) = etag {
                    response
                        .headers_mut()
                        .insert(header::ETAG, etag.parse().unwrap());
                }
                response
            }
        });
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        ChartRepo { url, index_answers }
    }

    /// The statuses `/index.yaml` was answered with so far.
    pub fn index_answers(&self) -> Vec<u16> {
        self.index_answers.lock().unwrap().clone()
    }
}

fn answer(
    file: &std::path::Path,
    headers: &HeaderMap,
    expected: Option<&str>,
) -> (StatusCode, Option<String>, Vec<u8>) {
    let sent = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    if expected.is_some() && sent != expected {
        return (StatusCode::UNAUTHORIZED, None, Vec::new());
    }
    let Ok(bytes) = std::fs::read(file) else {
        return (StatusCode::NOT_FOUND, None, Vec::new());
    };
    let etag = format!("\"{}\"", super::registry::sha256(&bytes));
    let matches = headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v == etag);
    match matches {
        true => (StatusCode::NOT_MODIFIED, Some(etag), Vec::new()),
        false => (StatusCode::OK, Some(etag), bytes),
    }
}
