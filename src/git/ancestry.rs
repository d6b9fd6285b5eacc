//! Whether a commit contains another, as the clone cache knows the history (issue 19's
//! verification: an Application synced to a descendant of the change's commit runs the change).

use git2::{Oid, Repository};

use super::RepoCache;
use crate::config::repository::RepositoryConfig;

/// Whether `revision` is `change` or one of its descendants in `repo`'s clone. A revision the
/// clone has not fetched yet (pushed since, by someone else) is answered `false`: not known to
/// contain the change, so the follower keeps waiting and the next fetch can tell.
pub fn contains(cache: &RepoCache, repo: &RepositoryConfig, revision: &str, change: &str) -> bool {
    if revision == change {
        return true;
    }
    let (Ok(revision), Ok(change)) = (Oid::from_str(revision), Oid::from_str(change)) else {
        return false;
    };
    let Ok(git) = Repository::open_bare(cache.repo_dir(repo)) else {
        return false;
    };
    git.graph_descendant_of(revision, change).unwrap_or(false)
}
