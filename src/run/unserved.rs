//! Policies `tagpilot run` reads but does not serve. A target without `repository:` is the
//! local directory, which only `tagpilot plan` and `tagpilot apply` write: the service writes
//! to configured repositories and Applications, never to the directory its policies are read
//! from. Such a policy would otherwise look planned and up to date every cycle while `plan`
//! shows its changes, so it is named at start-up (and whenever the set changes, since policies
//! are read every cycle) and counted in `tagpilot_policies_not_served{reason="local_directory"}`.

use std::sync::Mutex;

use crate::policy::ImagePolicy;

use super::metrics::Metrics;

/// The policies last named, so that an unchanged set is not warned about every cycle.
#[derive(Debug, Default)]
pub(super) struct NotServed {
    last: Mutex<Option<Vec<String>>>,
}

impl NotServed {
    /// Counts the policies of this cycle that have a local-directory target, and names them
    /// when they differ from the last cycle's (the first cycle: at start-up).
    pub(super) fn check(&self, policies: &[ImagePolicy], metrics: &Metrics) {
        let names = local_directory(policies);
        metrics.set_policies_not_served(names.len());
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        if last.as_ref() == Some(&names) {
            return;
        }
        if !names.is_empty() {
            tracing::warn!(
                policies = %names.join(", "),
                reason = "local_directory",
                "not served by tagpilot run: {} has a target without repository:, which is the \
                 local directory; tagpilot run writes only to configured repositories and \
                 Applications, the local directory is written by tagpilot plan and apply. Give \
                 the target a repository: from tagpilot.yaml to have it served",
                names.join(", ")
            );
        } else if last.as_ref().is_some_and(|l| !l.is_empty()) {
            tracing::info!("every policy's targets name a repository again: all are served");
        }
        *last = Some(names);
    }
}

/// The names of the policies with a target that is the local directory, sorted.
fn local_directory(policies: &[ImagePolicy]) -> Vec<String> {
    let mut names: Vec<String> = policies
        .iter()
        .filter(|p| p.targets.iter().any(|t| t.repository.is_none()))
        .map(|p| p.name.clone())
        .collect();
    names.sort();
    names.dedup();
    names
}
