//! Runs one engine cycle the way `tagpilot plan`/`apply` do, for tests that drive the library.

use tagpilot::argocd::read::cluster::Loaded;
use tagpilot::config::Config;
use tagpilot::engine::{self, Cycle};
use tagpilot::git::RepoCache;
use tagpilot::plan::Progress;
use tagpilot::registry::Registry;

/// One cycle over `config`'s Applications and configured repositories (no policy files, no
/// local directory), as a dry run or for real.
pub async fn cycle<R: Registry>(
    config: &Config,
    cluster: Option<&Loaded>,
    cache: &RepoCache,
    registry: &R,
    progress: &dyn Progress,
    dry_run: bool,
) -> Cycle {
    let options = engine::Options {
        dry_run,
        ..Default::default()
    };
    cycle_with(config, cluster, cache, registry, progress, options).await
}

/// [`cycle`] with every option (`diff`, `only_images`) in the test's hands.
pub async fn cycle_with<R: Registry>(
    config: &Config,
    cluster: Option<&Loaded>,
    cache: &RepoCache,
    registry: &R,
    progress: &dyn Progress,
    options: engine::Options<'_>,
) -> Cycle {
    let input = engine::Input {
        config,
        policies: &[],
        broken_policies: &[],
        local: None,
        cluster,
    };
    let context = engine::Context {
        registry,
        cache: Some(cache),
        progress,
        cancel: Default::default(),
        state: None,
        clock: &tagpilot::clock::SystemClock,
        freeze: None,
    };
    engine::run(&input, &context, options)
        .await
        .expect("engine cycle")
}
