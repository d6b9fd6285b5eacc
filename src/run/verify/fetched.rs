//! Judging again after a fetch. Argo CD may sync a commit pushed on top of tagpilot's change
//! before tagpilot's clone has that commit; the follower then cannot tell that the revision
//! contains the change, and keeps waiting. Argo CD writes the Application's status again only
//! when something changes (minutes later, or never), so after every fetch of a repository, by a
//! cycle or a re-check, the followers of its changes judge the state they saw last again.

use std::collections::BTreeSet;

use super::Verifier;

impl Verifier {
    /// After a cycle or re-check fetched `repositories`: every follower with a change of one
    /// of them judges the state it saw last again. Argo CD may have synced a commit on top of
    /// the change before the clone had it; that revision was then not known to contain the
    /// change, and nothing else would judge it again until Argo CD writes its status again.
    pub(super) fn fetched<'r>(&self, repositories: impl Iterator<Item = &'r str>) {
        let fetched: BTreeSet<&str> = repositories.collect();
        let followers = self.followers.lock().unwrap_or_else(|e| e.into_inner());
        for following in followers.values() {
            if following
                .pending
                .iter()
                .any(|p| fetched.contains(p.repository.as_str()))
            {
                following.fetched.notify_one();
            }
        }
    }
}
