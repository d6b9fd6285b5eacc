//! Test harness shared by the integration tests: real servers on 127.0.0.1 with free ports.

pub mod azure_devops;
pub mod bin;
pub mod bitbucket_cloud;
pub mod bitbucket_dc;
pub mod chart_repo;
pub mod corpus;
pub mod engine;
pub mod fault_proxy;
pub mod forge_double;
pub mod git;
pub mod gitea;
pub mod github;
pub mod gitlab;
pub mod kube;
pub mod receiver;
pub mod registry;
pub mod scripted;
pub mod service;

/// How long a test waits, on the wall clock, for something that happens within moments on an idle
/// machine (a server to listen, a cycle to push, a process to exit) before it fails. A failure
/// bound, never a timing: CI runs the suite on two loaded cores, where a debug build can take
/// many times longer than here. Timings are measured in `bench/`.
pub const PATIENCE: std::time::Duration = std::time::Duration::from_secs(60);

/// Every `.rs` file under `dir`, for the tests that read the source itself (layers, errors,
/// the clock rule).
pub fn rust_files(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Makes the logs a test listens for reach its subscriber, whichever other test thread met
/// them first (see the library's `testing::listen_to_every_callsite` for the race in
/// tracing-core it closes): a global subscriber that wants nothing but asks about every
/// callsite each time, so none is ever cached as unwanted. Call it before listening.
pub fn listen_to_every_callsite() {
    use tracing_subscriber::layer::SubscriberExt;
    static GLOBAL: std::sync::Once = std::sync::Once::new();
    GLOBAL.call_once(|| {
        let asks = tracing_subscriber::filter::DynFilterFn::new(|_, _| false)
            .with_callsite_filter(|_| tracing::subscriber::Interest::sometimes());
        let _ = tracing::subscriber::set_global_default(tracing_subscriber::registry().with(asks));
    });
}
