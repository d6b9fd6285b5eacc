//! The planner: from a directory of manifests, the policies and a registry, the complete set of
//! edits tagpilot would make, held in memory.
//!
//! Plan first, write last: nothing here writes a file. `tagpilot plan` renders a [`Plan`];
//! `tagpilot apply` renders it and then hands [`Plan::files`] to [`crate::apply`]. A problem with
//! one policy, file or repository is recorded in the plan and the rest is still planned.
//!
//! Registry traffic is bounded by design: each distinct repository is listed once however many
//! policies and files name it, and each (repository, tag) is inspected at most once per plan.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};

use futures_util::stream::{self, StreamExt};
use serde::Serialize;
use tracing::{debug, instrument, warn};

use crate::image::Repository;
use crate::manifest::{self, Edit, FieldKind, ImageField, MarkerPart, Update};
use crate::policy::{HelmPaths, ImagePolicy, Strategy};
use crate::registry::{ImageInfo, Registry, RegistryError};
use crate::select::{self, Decision, TagCandidate};

/// How many registry requests the planner keeps in flight at once. The registry client applies
/// per-registry rate limits underneath; this only bounds fan-out.
const REGISTRY_CONCURRENCY: usize = 16;

#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    #[error("cannot read manifest directory {path}: {source}")]
    Walk {
        path: PathBuf,
        source: walkdir::Error,
    },
}

/// One image field that will move.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Change {
    /// The configured repository (`repositories[].name`); absent for the local directory.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub repository: Option<String>,
    pub policy: String,
    /// The repository the policy follows (`127.0.0.1:5000/shop/api`).
    pub image: String,
    /// Path relative to the root, with `/` separators.
    pub file: String,
    pub line: usize,
    /// What kind of field: `Deployment/web container app`, `kustomize images[web]`, …
    pub field: String,
    pub strategy: &'static str,
    pub from: String,
    pub to: String,
}

/// A reference the policy found but chose not to move, with the reason (pinned above the range,
/// no candidate, …). Shown so that "why didn't it update?" has an answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Hold {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub repository: Option<String>,
    pub policy: String,
    pub file: String,
    pub line: usize,
    pub current: String,
    pub reason: String,
}

/// Something that stopped part of the plan. The rest of the plan is still valid.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Problem {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub repository: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub policy: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub line: Option<usize>,
    pub message: String,
}

/// A file that was not read as YAML and is left alone (a Helm template, say).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SkippedFile {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub repository: Option<String>,
    pub file: String,
    pub reason: String,
}

/// What tagpilot did, or would do, in one configured repository.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RepositoryOutcome {
    pub repository: String,
    /// Without userinfo.
    pub url: String,
    pub branch: String,
    /// `pushed`, `would push`, `up to date`, `planned` or `failed`.
    pub status: String,
    pub commits: Vec<CommitSummary>,
    /// Pull-request mode: what happened (or would) to each group's pull request.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub pull_requests: Vec<PullRequestSummary>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// One change group's pull request in a repository's outcome.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PullRequestSummary {
    pub group: String,
    pub branch: String,
    /// `would open`, `opened`, `updated`, `closed`, `up to date`, `left alone: …`, …
    pub status: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub number: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// What did not go as configured but did not stop the pull request (an unknown reviewer).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CommitSummary {
    pub id: String,
    pub summary: String,
}

/// The new text of one file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileUpdate {
    /// Relative to the root.
    pub path: PathBuf,
    pub original: String,
    pub updated: String,
    /// The edits behind `updated`, per policy, so the plan can be split into commits per policy.
    pub edits: Vec<(String, Vec<Edit>)>,
}

/// Everything tagpilot would do, and everything that stopped it.
#[derive(Debug, Clone, Default)]
pub struct Plan {
    pub changes: Vec<Change>,
    pub holds: Vec<Hold>,
    pub problems: Vec<Problem>,
    pub skipped: Vec<SkippedFile>,
    pub files: Vec<FileUpdate>,
    /// What happened in each configured repository (`tagpilot apply`) or would (`plan`).
    pub repositories: Vec<RepositoryOutcome>,
    /// References found that are already where their policy wants them.
    pub up_to_date: usize,
    /// Policies that matched at least one reference.
    pub policies_used: usize,
}

impl Plan {
    pub fn has_changes(&self) -> bool {
        !self.files.is_empty()
    }
}

/// Reports progress to whoever is watching (a terminal spinner in the CLI, nothing in tests).
pub trait Progress: Sync {
    fn phase(&self, _name: &str, _total: u64) {}
    fn advance(&self) {}
    fn done(&self) {}
}

impl Progress for () {}

/// A field matched to the policy that owns it.
struct Found {
    file: usize,
    field: ImageField,
    policy: usize,
}

struct ScannedFile {
    rel: PathBuf,
    src: String,
}

/// What the registry said for one policy.
enum Candidates {
    Ready(Vec<TagCandidate>),
    Failed(String),
}

/// Where a plan looks: a directory, and which repository it is (targets name repositories; a
/// target without one means the local directory).
#[derive(Debug, Clone, Default)]
pub struct Scope {
    pub root: PathBuf,
    /// The `repositories[].name` this root is a checkout of; `None` for the local directory.
    pub repository: Option<String>,
    /// Files to leave out: tagpilot's own config and policy files when they live under the root
    /// (they are YAML, but not manifests).
    pub exclude: Vec<PathBuf>,
}

impl Scope {
    pub fn local(root: impl Into<PathBuf>) -> Self {
        Scope {
            root: root.into(),
            ..Scope::default()
        }
    }
}

/// Builds the plan for every policy over the manifests in `scope`.
#[instrument(skip_all, fields(root = %scope.root.display(), repository = scope.repository.as_deref().unwrap_or("(local)"), policies = policies.len()))]
pub async fn plan<R: Registry>(
    scope: &Scope,
    policies: &[ImagePolicy],
    registry: &R,
    progress: &dyn Progress,
) -> Result<Plan, PlanError> {
    let root = scope.root.as_path();
    let excluded: BTreeSet<PathBuf> = scope
        .exclude
        .iter()
        .filter_map(|p| {
            let p = std::fs::canonicalize(p).ok()?;
            let root = std::fs::canonicalize(root).ok()?;
            p.strip_prefix(root).ok().map(Path::to_path_buf)
        })
        .collect();
    let mut plan = Plan::default();

    // 1. Read and scan every file at least one policy may touch.
    let paths: Vec<PathBuf> = discover(root)?
        .into_iter()
        .filter(|p| !excluded.contains(p))
        .collect();
    progress.phase("scanning manifests", paths.len() as u64);
    let mut files = Vec::new();
    let mut found = Vec::new();
    for rel in paths {
        progress.advance();
        let applicable: Vec<usize> = (0..policies.len())
            .filter(|&i| applies_to(&policies[i], scope.repository.as_deref(), &rel))
            .collect();
        if applicable.is_empty() {
            continue;
        }
        let display = display_path(&rel);
        let src = match std::fs::read(root.join(&rel)) {
            Ok(bytes) => match String::from_utf8(bytes) {
                Ok(s) => s,
                Err(_) => {
                    plan.skipped.push(SkippedFile {
                        repository: None,
                        file: display,
                        reason: "not UTF-8 text".into(),
                    });
                    continue;
                }
            },
            Err(e) => {
                plan.problems.push(Problem {
                    file: Some(display),
                    message: format!("cannot read: {e}"),
                    ..Problem::default()
                });
                continue;
            }
        };
        let helm: Vec<HelmPaths> = applicable
            .iter()
            .flat_map(|&i| policies[i].targets.iter())
            .filter(|t| t.repository.as_deref() == scope.repository.as_deref() && t.matches(&rel))
            .filter_map(|t| t.helm.clone())
            .collect();
        let fields = match manifest::scan(&rel, &src, &helm) {
            Ok(fields) => fields,
            Err(e) => {
                debug!(file = %rel.display(), error = %e, "not a YAML document tagpilot can edit");
                plan.skipped.push(SkippedFile {
                    repository: None,
                    file: display,
                    reason: e.to_string(),
                });
                continue;
            }
        };
        let file_index = files.len();
        for field in fields {
            match owner(&field, &applicable, policies, &helm) {
                Ok(Some(policy)) => found.push(Found {
                    file: file_index,
                    field,
                    policy,
                }),
                Ok(None) => {}
                Err(message) => plan.problems.push(Problem {
                    file: Some(display.clone()),
                    line: Some(field.line),
                    message,
                    ..Problem::default()
                }),
            }
        }
        files.push(ScannedFile { rel, src });
    }

    // 2. Ask the registries: one tag listing per distinct repository.
    let used: BTreeSet<usize> = found.iter().map(|f| f.policy).collect();
    plan.policies_used = used.len();
    // Owned items: borrowed ones make the stream's future not provably `Send` (rust#100013).
    let repositories: BTreeSet<Repository> =
        used.iter().map(|&i| policies[i].image.clone()).collect();
    progress.phase("listing tags", repositories.len() as u64);
    let listings: HashMap<Repository, Result<Vec<String>, RegistryError>> =
        stream::iter(repositories)
            .map(|repo| async move {
                let result = registry.list_tags(&repo).await;
                progress.advance();
                (repo, result)
            })
            .buffer_unordered(REGISTRY_CONCURRENCY)
            .collect()
            .await;

    // 3. Per policy, the candidates its strategy ranks (with build times where it needs them).
    let inspector = Inspector::new(registry);
    let mut candidates: HashMap<usize, Candidates> = HashMap::new();
    for &i in &used {
        let policy = &policies[i];
        let entry = match &listings[&policy.image] {
            Err(e) => Candidates::Failed(e.to_string()),
            Ok(tags) => match inspector.candidates(policy, tags, progress).await {
                Ok(c) => Candidates::Ready(c),
                Err(e) => Candidates::Failed(e.to_string()),
            },
        };
        candidates.insert(i, entry);
    }

    // 4. Decide every field, and collect the edits per file.
    let mut failed_policies = BTreeSet::new();
    let mut pending: BTreeMap<usize, Vec<(Change, Vec<Edit>)>> = BTreeMap::new();
    for f in &found {
        let policy = &policies[f.policy];
        let file = display_path(&files[f.file].rel);
        let list = match &candidates[&f.policy] {
            Candidates::Failed(message) => {
                if failed_policies.insert(f.policy) {
                    plan.problems.push(Problem {
                        policy: Some(policy.name.clone()),
                        image: Some(policy.image.to_string()),
                        message: message.clone(),
                        ..Problem::default()
                    });
                }
                continue;
            }
            Candidates::Ready(list) => list,
        };
        match decide(policy, &f.field, list, &inspector).await {
            Ok(Outcome::Move { tag, digest }) => {
                let (from_tag, from_digest) = f.field.current();
                let update = Update {
                    name: &policy.image_name,
                    tag: Some(&tag),
                    digest: digest.as_deref(),
                };
                let field_edits = match f.field.edits(&update) {
                    Ok(edits) => edits,
                    Err(e) => {
                        plan.problems.push(Problem {
                            repository: None,
                            policy: Some(policy.name.clone()),
                            image: Some(policy.image.to_string()),
                            file: Some(file),
                            line: Some(f.field.line),
                            message: e.to_string(),
                        });
                        continue;
                    }
                };
                if field_edits.is_empty() {
                    plan.up_to_date += 1;
                    continue;
                }
                // A `:name` marker moves a name, not a version: show the names.
                let (from, to) = match f.field.kind {
                    FieldKind::Marker {
                        part: MarkerPart::Name,
                        ..
                    } => {
                        let old = &files[f.file].src[field_edits[0].span.clone()];
                        (
                            old.trim_matches(|c| c == '"' || c == '\'').to_string(),
                            policy.image_name.clone(),
                        )
                    }
                    _ => (
                        version_text(from_tag, from_digest),
                        version_text(Some(&tag), digest.as_deref()),
                    ),
                };
                let change = Change {
                    repository: None,
                    policy: policy.name.clone(),
                    image: policy.image.to_string(),
                    file: file.clone(),
                    line: f.field.line,
                    field: describe(&f.field.kind),
                    strategy: policy.strategy.name(),
                    from,
                    to,
                };
                pending
                    .entry(f.file)
                    .or_default()
                    .push((change, field_edits));
            }
            Ok(Outcome::Stay) => plan.up_to_date += 1,
            Ok(Outcome::Hold(reason)) => {
                let (tag, digest) = f.field.current();
                plan.holds.push(Hold {
                    repository: None,
                    policy: policy.name.clone(),
                    file,
                    line: f.field.line,
                    current: version_text(tag, digest),
                    reason,
                });
            }
            Err(message) => plan.problems.push(Problem {
                repository: None,
                policy: Some(policy.name.clone()),
                image: Some(policy.image.to_string()),
                file: Some(file),
                line: Some(f.field.line),
                message,
            }),
        }
    }

    // 5. Apply the edits in memory, one file at a time; a file whose edit fails verification is
    // left out whole, with the reason.
    for (index, changes) in pending {
        let file = &files[index];
        let mut by_policy: BTreeMap<String, Vec<Edit>> = BTreeMap::new();
        for (change, edits) in &changes {
            by_policy
                .entry(change.policy.clone())
                .or_default()
                .extend(edits.iter().cloned());
        }
        let all: Vec<Edit> = by_policy.values().flatten().cloned().collect();
        match apply_sorted(&file.rel, &file.src, all) {
            Ok(updated) => {
                plan.changes.extend(changes.into_iter().map(|(c, _)| c));
                plan.files.push(FileUpdate {
                    path: file.rel.clone(),
                    original: file.src.clone(),
                    updated,
                    edits: by_policy.into_iter().collect(),
                });
            }
            Err(e) => {
                let names: BTreeSet<String> =
                    changes.iter().map(|(c, _)| c.policy.clone()).collect();
                warn!(file = %display_path(&file.rel), error = %e, "edit dropped");
                plan.problems.push(Problem {
                    policy: Some(names.into_iter().collect::<Vec<_>>().join(", ")),
                    file: Some(display_path(&file.rel)),
                    message: format!("edit dropped: {e}"),
                    ..Problem::default()
                });
            }
        }
    }

    plan.changes
        .sort_by(|a, b| (&a.file, a.line, &a.policy).cmp(&(&b.file, b.line, &b.policy)));
    plan.holds
        .sort_by(|a, b| (&a.file, a.line).cmp(&(&b.file, b.line)));
    plan.files.sort_by(|a, b| a.path.cmp(&b.path));
    if let Some(name) = &scope.repository {
        plan.set_repository(name);
    }
    progress.done();
    Ok(plan)
}

fn apply_sorted(
    path: &Path,
    src: &str,
    mut edits: Vec<Edit>,
) -> Result<String, manifest::ManifestError> {
    edits.sort_by_key(|e| (e.span.start, e.span.end));
    edits.dedup();
    manifest::apply_edits(path, src, &edits)
}

/// One policy's share of a plan, as a commit per policy needs it: the files it changes, with
/// content that already includes every earlier group's edits (groups apply in order).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyGroup {
    pub policy: String,
    /// Path relative to the root → whole new content.
    pub files: BTreeMap<PathBuf, String>,
    pub changes: Vec<Change>,
}

impl Plan {
    /// Splits the plan into one group per policy (by name), each group's file contents built
    /// cumulatively on the groups before it. The last group's contents equal [`Plan::files`].
    pub fn groups_by_policy(&self) -> Result<Vec<PolicyGroup>, manifest::ManifestError> {
        self.policy_groups(true)
    }

    /// One group per policy whose file contents carry only that policy's edits, for proposals
    /// that each start from the base (one pull request per policy).
    pub fn groups_by_policy_alone(&self) -> Result<Vec<PolicyGroup>, manifest::ManifestError> {
        self.policy_groups(false)
    }

    fn policy_groups(&self, cumulative: bool) -> Result<Vec<PolicyGroup>, manifest::ManifestError> {
        let names: BTreeSet<&str> = self.changes.iter().map(|c| c.policy.as_str()).collect();
        let mut groups = Vec::new();
        for (n, name) in names.iter().enumerate() {
            let upto: BTreeSet<&str> = if cumulative {
                names.iter().take(n + 1).copied().collect()
            } else {
                BTreeSet::from([*name])
            };
            let mut files = BTreeMap::new();
            for f in self
                .files
                .iter()
                .filter(|f| f.edits.iter().any(|(p, _)| p == name))
            {
                let edits = f
                    .edits
                    .iter()
                    .filter(|(p, _)| upto.contains(p.as_str()))
                    .flat_map(|(_, e)| e.iter().cloned());
                files.insert(
                    f.path.clone(),
                    apply_sorted(&f.path, &f.original, edits.collect())?,
                );
            }
            let changes = self
                .changes
                .iter()
                .filter(|c| c.policy == *name)
                .cloned()
                .collect();
            groups.push(PolicyGroup {
                policy: name.to_string(),
                files,
                changes,
            });
        }
        Ok(groups)
    }

    /// Marks everything in the plan as belonging to the repository `name`.
    fn set_repository(&mut self, name: &str) {
        let name = Some(name.to_string());
        self.changes
            .iter_mut()
            .for_each(|c| c.repository = name.clone());
        self.holds
            .iter_mut()
            .for_each(|h| h.repository = name.clone());
        self.problems
            .iter_mut()
            .for_each(|p| p.repository = name.clone());
        self.skipped
            .iter_mut()
            .for_each(|s| s.repository = name.clone());
    }

    /// Adds another scope's plan to this one, for one report over every repository.
    pub fn merge(&mut self, other: Plan) {
        self.changes.extend(other.changes);
        self.holds.extend(other.holds);
        self.problems.extend(other.problems);
        self.skipped.extend(other.skipped);
        self.files.extend(other.files);
        self.repositories.extend(other.repositories);
        self.up_to_date += other.up_to_date;
        self.policies_used += other.policies_used;
    }
}

/// What one image reference should become.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Move { tag: String, digest: Option<String> },
    Stay,
    Hold(String),
}

/// Decides one field: a `:name` or `:digest` marker holds no tag (the policy's best tag is the
/// target), and a `:digest` marker always pins.
async fn decide<R: Registry>(
    policy: &ImagePolicy,
    field: &ImageField,
    candidates: &[TagCandidate],
    inspector: &Inspector<'_, R>,
) -> Result<Outcome, String> {
    let (current_tag, current_digest) = field.current();
    let (current_tag, pin) = match field.kind {
        FieldKind::Marker {
            part: MarkerPart::Name,
            ..
        } => (None, false),
        FieldKind::Marker {
            part: MarkerPart::Digest,
            ..
        } => (None, true),
        _ => (current_tag, false),
    };
    decide_reference(
        policy,
        current_tag,
        current_digest,
        pin,
        candidates,
        inspector,
    )
    .await
}

/// Decides a reference currently on `current_tag`/`current_digest`, wherever it is written (a
/// manifest field, an Argo CD override). Digest pinning applies when `pin` is set, when the
/// policy asks for it, when its strategy is `digest`, or when the reference already carries a
/// digest (leaving an old digest beside a new tag would pin the old image).
pub async fn decide_reference<R: Registry>(
    policy: &ImagePolicy,
    current_tag: Option<&str>,
    current_digest: Option<&str>,
    pin: bool,
    candidates: &[TagCandidate],
    inspector: &Inspector<'_, R>,
) -> Result<Outcome, String> {
    let tag = match &policy.strategy {
        Strategy::Digest { tag } => tag.clone(),
        _ => match select::choose(policy, current_tag, candidates) {
            Decision::Update(c) => c.tag,
            Decision::UpToDate => match current_tag {
                Some(t) => t.to_string(),
                None => return Ok(Outcome::Stay),
            },
            Decision::Hold(reason) => return Ok(Outcome::Hold(reason)),
        },
    };
    let pin = pin
        || policy.pin_digest
        || matches!(policy.strategy, Strategy::Digest { .. })
        || current_digest.is_some();
    let digest = if pin {
        Some(inspector.digest(policy, &tag).await?)
    } else {
        None
    };
    if Some(tag.as_str()) == current_tag && digest.as_deref() == current_digest {
        return Ok(Outcome::Stay);
    }
    Ok(Outcome::Move { tag, digest })
}

/// Registry look-ups by (repository, tag), each done at most once per plan.
pub struct Inspector<'r, R> {
    registry: &'r R,
    seen: tokio::sync::Mutex<HashMap<(Repository, String), ImageInfo>>,
}

impl<'r, R: Registry> Inspector<'r, R> {
    pub fn new(registry: &'r R) -> Self {
        Inspector {
            registry,
            seen: Default::default(),
        }
    }

    async fn info(&self, policy: &ImagePolicy, tag: &str) -> Result<ImageInfo, RegistryError> {
        let key = (policy.image.clone(), tag.to_string());
        if let Some(info) = self.seen.lock().await.get(&key) {
            return Ok(info.clone());
        }
        let info = self
            .registry
            .inspect(&policy.image, tag, &policy.platforms)
            .await?;
        self.seen.lock().await.insert(key, info.clone());
        Ok(info)
    }

    /// The digest a tag points at: from an earlier inspection when there was one, else one HEAD
    /// request (which Docker Hub does not count as a pull).
    async fn digest(&self, policy: &ImagePolicy, tag: &str) -> Result<String, String> {
        let key = (policy.image.clone(), tag.to_string());
        if let Some(info) = self.seen.lock().await.get(&key) {
            return Ok(info.digest.clone());
        }
        self.registry
            .digest(&policy.image, tag)
            .await
            .map_err(|e| e.to_string())
    }

    /// The tags that pass the policy's filters, with build times when its strategy needs them.
    pub async fn candidates(
        &self,
        policy: &ImagePolicy,
        tags: &[String],
        progress: &dyn Progress,
    ) -> Result<Vec<TagCandidate>, RegistryError> {
        let kept = select::filter_tags(policy, tags);
        if !select::needs_build_time(policy) {
            return Ok(kept.into_iter().map(TagCandidate::new).collect());
        }
        progress.phase("reading build times", kept.len() as u64);
        self.inspect_many(policy, &kept, progress).await
    }

    /// Build times for every kept tag; the strategy that needs them cannot rank without them.
    async fn inspect_many(
        &self,
        policy: &ImagePolicy,
        tags: &[&str],
        progress: &dyn Progress,
    ) -> Result<Vec<TagCandidate>, RegistryError> {
        let owned: Vec<String> = tags.iter().map(|t| t.to_string()).collect();
        let results: Vec<Result<TagCandidate, RegistryError>> = stream::iter(owned)
            .map(|tag| async move {
                let info = self.info(policy, &tag).await;
                progress.advance();
                info.map(|i| TagCandidate {
                    tag,
                    created: i.created,
                    digest: Some(i.digest),
                })
            })
            .buffered(REGISTRY_CONCURRENCY)
            .collect()
            .await;
        results.into_iter().collect()
    }
}

/// Which policy owns a field, if any. Two policies claiming one field is an error: picking one
/// silently would make the result depend on file order.
fn owner(
    field: &ImageField,
    applicable: &[usize],
    policies: &[ImagePolicy],
    helm: &[HelmPaths],
) -> Result<Option<usize>, String> {
    if let FieldKind::Marker {
        policy, namespace, ..
    } = &field.kind
    {
        let named = |p: &ImagePolicy| {
            &p.name == policy
                && match (namespace, &p.namespace) {
                    (Some(want), Some(have)) => want == have,
                    _ => true,
                }
        };
        return match applicable.iter().copied().find(|&i| named(&policies[i])) {
            Some(i) => Ok(Some(i)),
            None if policies.iter().any(named) => Ok(None),
            None => Err(format!(
                "marker names policy {policy:?}, which is not defined"
            )),
        };
    }
    // A kustomization may call the image by another name (`kustomize.imageName` on the target).
    let kustomize_alias = |i: usize| match &field.kind {
        FieldKind::Kustomize { name } => policies[i]
            .targets
            .iter()
            .any(|t| t.kustomize_image_name.as_deref() == Some(name.as_str())),
        _ => false,
    };
    let matching: Vec<usize> = match field.repository() {
        Some(repo) => applicable
            .iter()
            .copied()
            .filter(|&i| &policies[i].image == repo || kustomize_alias(i))
            .collect(),
        // An explicit Helm path without a repository value belongs to the policy that declared it.
        None if matches!(field.kind, FieldKind::HelmValues { .. }) && !helm.is_empty() => {
            applicable
                .iter()
                .copied()
                .filter(|&i| policies[i].targets.iter().any(|t| t.helm.is_some()))
                .collect()
        }
        None => Vec::new(),
    };
    match matching.as_slice() {
        [] => Ok(None),
        [one] => Ok(Some(*one)),
        many => {
            let names: Vec<&str> = many.iter().map(|&i| policies[i].name.as_str()).collect();
            Err(format!(
                "policies {} all follow {}; the reference is left alone until one policy owns it",
                names.join(", "),
                policies[many[0]].image
            ))
        }
    }
}

/// A policy without targets covers every file of the local directory; otherwise a target must
/// name this scope's repository (or none, for the local directory) and match the path.
fn applies_to(policy: &ImagePolicy, repository: Option<&str>, rel: &Path) -> bool {
    if policy.targets.is_empty() {
        return repository.is_none();
    }
    policy
        .targets
        .iter()
        .any(|t| t.repository.as_deref() == repository && t.matches(rel))
}

/// Every `.yaml`/`.yml` file under the root, relative, sorted; hidden directories (`.git`) are
/// skipped.
fn discover(root: &Path) -> Result<Vec<PathBuf>, PlanError> {
    let mut out = Vec::new();
    let walker = walkdir::WalkDir::new(root)
        .sort_by_file_name()
        .into_iter()
        .filter_entry(|e| {
            e.depth() == 0
                || !e.file_name().to_string_lossy().starts_with('.')
                || e.file_type().is_file()
        });
    for entry in walker {
        let entry = entry.map_err(|source| PlanError::Walk {
            path: root.to_path_buf(),
            source,
        })?;
        if !entry.file_type().is_file() {
            continue;
        }
        let name = entry.file_name().to_string_lossy();
        if name.ends_with(".yaml") || name.ends_with(".yml") {
            let rel = entry
                .path()
                .strip_prefix(root)
                .unwrap_or(entry.path())
                .to_path_buf();
            out.push(rel);
        }
    }
    Ok(out)
}

fn display_path(p: &Path) -> String {
    p.components()
        .map(|c| c.as_os_str().to_string_lossy())
        .collect::<Vec<_>>()
        .join("/")
}

/// `tag`, `tag@digest` or `digest`, as reports show a reference's version.
pub fn version_text(tag: Option<&str>, digest: Option<&str>) -> String {
    match (tag, digest) {
        (Some(t), Some(d)) => format!("{t}@{d}"),
        (Some(t), None) => t.to_string(),
        (None, Some(d)) => d.to_string(),
        (None, None) => "(none)".to_string(),
    }
}

fn describe(kind: &FieldKind) -> String {
    match kind {
        FieldKind::Container {
            resource,
            container,
        } => format!("{resource} container {container}"),
        FieldKind::Kustomize { name } => format!("kustomize image {name}"),
        FieldKind::HelmValues { path } => format!("helm value {path}"),
        FieldKind::Marker { policy, part, .. } => {
            let part = match part {
                MarkerPart::Whole => "",
                MarkerPart::Name => ":name",
                MarkerPart::Tag => ":tag",
                MarkerPart::Digest => ":digest",
            };
            format!("marker {policy}{part}")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::MemoryRegistry;

    const API: &str = "127.0.0.1:5000/shop/api";
    const WEB: &str = "127.0.0.1:5000/shop/web";

    fn policies(yaml: &str) -> Vec<ImagePolicy> {
        crate::policy::parse_file(Path::new("policies.yaml"), yaml).expect("valid policies")
    }

    fn policy(name: &str, image: &str, extra: &str) -> String {
        format!(
            "apiVersion: tagpilot.dev/v1alpha1\nkind: ImagePolicy\nmetadata:\n  name: {name}\nspec:\n  image: {image}\n{extra}---\n"
        )
    }

    fn semver(name: &str, image: &str) -> String {
        policy(
            name,
            image,
            "  strategy:\n    semver: {range: \"<2.0.0\"}\n",
        )
    }

    fn deployment(image: &str) -> String {
        format!(
            "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: app\nspec:\n  template:\n    spec:\n      containers:\n        - name: app\n          image: {image}\n"
        )
    }

    fn tree(files: &[(&str, String)]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for (path, text) in files {
            let p = dir.path().join(path);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        }
        dir
    }

    fn registry() -> MemoryRegistry {
        let reg = MemoryRegistry::new();
        reg.add_tags(
            &Repository::parse(API).unwrap(),
            &["1.2.3", "1.3.0", "2.0.0"],
        );
        reg.add_tags(&Repository::parse(WEB).unwrap(), &["0.9.0", "1.0.0"]);
        reg
    }

    async fn run(dir: &Path, policies: &[ImagePolicy], reg: &MemoryRegistry) -> Plan {
        plan(&Scope::local(dir), policies, reg, &()).await.unwrap()
    }

    #[tokio::test]
    async fn lists_each_repository_once_however_many_files_and_policies_name_it() {
        let dir = tree(&[
            ("a/one.yaml", deployment(&format!("{API}:1.2.3"))),
            ("a/two.yaml", deployment(&format!("{API}:1.2.3"))),
            ("b/three.yaml", deployment(&format!("{API}:1.2.3"))),
            ("b/web.yaml", deployment(&format!("{WEB}:0.9.0"))),
        ]);
        let a = policy(
            "api-a",
            API,
            "  strategy: {semver: {}}\n  targets: [{paths: [\"a/**\"]}]\n",
        );
        let b = policy(
            "api-b",
            API,
            "  strategy: {semver: {}}\n  targets: [{paths: [\"b/**\"]}]\n",
        );
        let ps = policies(&(a + &b + &semver("web", WEB)));
        let reg = registry();
        let p = run(dir.path(), &ps, &reg).await;
        assert_eq!(p.changes.len(), 4, "{:?}", p.changes);
        assert_eq!(reg.tag_list_calls(), 2);
        assert_eq!(reg.inspect_calls(), 0, "semver needs no image metadata");
        assert!(p.problems.is_empty(), "{:?}", p.problems);
    }

    #[tokio::test]
    async fn a_failing_repository_does_not_stop_other_policies() {
        let dir = tree(&[
            ("api.yaml", deployment(&format!("{API}:1.2.3"))),
            ("gone.yaml", deployment("127.0.0.1:5000/shop/gone:1.0.0")),
        ]);
        let ps = policies(&(semver("api", API) + &semver("gone", "127.0.0.1:5000/shop/gone")));
        let p = run(dir.path(), &ps, &registry()).await;
        assert_eq!(p.changes.len(), 1);
        assert_eq!(p.changes[0].policy, "api");
        assert_eq!(p.problems.len(), 1);
        let problem = &p.problems[0];
        assert_eq!(problem.policy.as_deref(), Some("gone"));
        assert!(problem.message.contains("shop/gone"), "{}", problem.message);
    }

    #[tokio::test]
    async fn two_policies_claiming_one_reference_leave_it_alone_with_a_problem() {
        let dir = tree(&[("api.yaml", deployment(&format!("{API}:1.2.3")))]);
        let ps = policies(&(semver("first", API) + &semver("second", API)));
        let p = run(dir.path(), &ps, &registry()).await;
        assert!(p.changes.is_empty());
        assert_eq!(p.problems.len(), 1);
        let message = &p.problems[0].message;
        assert!(
            message.contains("first") && message.contains("second"),
            "{message}"
        );
        assert_eq!(p.problems[0].file.as_deref(), Some("api.yaml"));
    }

    #[tokio::test]
    async fn a_marker_naming_an_undefined_policy_is_reported_with_its_line() {
        let dir = tree(&[(
            "values.yaml",
            "version: 1.2.3 # tagpilot: nobody:tag\n".to_string(),
        )]);
        let ps = policies(&semver("api", API));
        let p = run(dir.path(), &ps, &registry()).await;
        assert_eq!(p.problems.len(), 1, "{:?}", p.problems);
        assert_eq!(p.problems[0].line, Some(1));
        assert!(p.problems[0].message.contains("nobody"));
    }

    #[tokio::test]
    async fn pin_digest_writes_tag_and_digest_and_is_stable() {
        let dir = tree(&[("api.yaml", deployment(&format!("{API}:1.2.3")))]);
        let ps = policies(&policy(
            "api",
            API,
            "  strategy: {semver: {range: \"<2\"}}\n  pinDigest: true\n",
        ));
        let reg = registry();
        let p = run(dir.path(), &ps, &reg).await;
        let want = reg
            .digest(&Repository::parse(API).unwrap(), "1.3.0")
            .await
            .unwrap();
        assert_eq!(p.changes[0].to, format!("1.3.0@{want}"));
        assert!(p.files[0].updated.contains(&format!("{API}:1.3.0@{want}")));
        crate::apply::write_files(dir.path(), &p.files).unwrap();
        assert!(!run(dir.path(), &ps, &reg).await.has_changes());
    }

    #[tokio::test]
    async fn digest_strategy_follows_a_mutable_tag() {
        let repo = Repository::parse(API).unwrap();
        let reg = MemoryRegistry::new();
        let info = |d: char| ImageInfo {
            digest: format!("sha256:{}", d.to_string().repeat(64)),
            created: None,
            platforms: vec![],
        };
        reg.add(&repo, "stable", info('a'));
        let dir = tree(&[("api.yaml", deployment(&format!("{API}:stable")))]);
        let ps = policies(&policy("api", API, "  strategy: {digest: {tag: stable}}\n"));
        let p = run(dir.path(), &ps, &reg).await;
        assert_eq!(p.changes[0].to, format!("stable@sha256:{}", "a".repeat(64)));
        crate::apply::write_files(dir.path(), &p.files).unwrap();
        // The tag is pushed again with new content: the pin moves.
        reg.add(&repo, "stable", info('b'));
        let p = run(dir.path(), &ps, &reg).await;
        assert_eq!(p.changes.len(), 1);
        assert_eq!(
            p.changes[0].from,
            format!("stable@sha256:{}", "a".repeat(64))
        );
        assert_eq!(p.changes[0].to, format!("stable@sha256:{}", "b".repeat(64)));
    }

    #[tokio::test]
    async fn newest_build_ranks_by_build_time_not_by_name() {
        let repo = Repository::parse(API).unwrap();
        let reg = MemoryRegistry::new();
        for (tag, day) in [("zeta", "01"), ("alpha", "03"), ("mid", "02")] {
            let created = format!("2024-01-{day}T00:00:00Z").parse().ok();
            let digest = format!("sha256:{}", day.repeat(32));
            reg.add(
                &repo,
                tag,
                ImageInfo {
                    digest,
                    created,
                    platforms: vec![],
                },
            );
        }
        let dir = tree(&[("api.yaml", deployment(&format!("{API}:zeta")))]);
        let ps = policies(&policy("api", API, "  strategy: {newestBuild: {}}\n"));
        let p = run(dir.path(), &ps, &reg).await;
        assert_eq!(p.changes[0].to, "alpha");
        assert_eq!(reg.inspect_calls(), 3, "one inspection per tag");
    }

    #[tokio::test]
    async fn a_reference_pinned_above_the_range_is_held_with_the_reason() {
        let dir = tree(&[("api.yaml", deployment(&format!("{API}:2.0.0")))]);
        let ps = policies(&semver("api", API));
        let p = run(dir.path(), &ps, &registry()).await;
        assert!(p.changes.is_empty());
        assert_eq!(p.holds.len(), 1, "{:?}", p.holds);
        assert_eq!(p.holds[0].current, "2.0.0");
        assert!(!p.holds[0].reason.is_empty());
    }

    #[tokio::test]
    async fn targets_naming_a_repository_do_not_touch_the_local_directory() {
        let dir = tree(&[("api.yaml", deployment(&format!("{API}:1.2.3")))]);
        let remote = policy(
            "remote",
            API,
            "  strategy: {semver: {}}\n  targets: [{repository: manifests}]\n",
        );
        let ps = policies(&remote);
        let reg = registry();
        assert!(!run(dir.path(), &ps, &reg).await.has_changes());
        let scope = Scope {
            root: dir.path().to_path_buf(),
            repository: Some("manifests".into()),
            exclude: vec![],
        };
        let p = plan(&scope, &ps, &reg, &()).await.unwrap();
        assert_eq!(p.changes.len(), 1);
    }

    #[tokio::test]
    async fn tagpilot_own_files_are_not_scanned() {
        // A policy file is YAML with an `image:` key; it must never be rewritten.
        let text = semver("api", API);
        let dir = tree(&[
            ("policies/api.yaml", text.clone()),
            ("api.yaml", deployment(&format!("{API}:1.2.3"))),
        ]);
        let ps = crate::policy::parse_file(&dir.path().join("policies/api.yaml"), &text).unwrap();
        let scope = Scope {
            root: dir.path().to_path_buf(),
            repository: None,
            exclude: vec![dir.path().join("policies/api.yaml")],
        };
        let p = plan(&scope, &ps, &registry(), &()).await.unwrap();
        assert_eq!(p.files.len(), 1);
        assert_eq!(p.files[0].path, Path::new("api.yaml"));
    }
}
