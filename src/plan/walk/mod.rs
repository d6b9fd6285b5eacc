//! The planner proper: read every file a policy may touch, find its image fields, match each
//! field to the policy that owns it (a pattern policy's fields to an instance per image, see
//! `patterns`), ask the registry once per repository, decide, and apply the edits in memory
//! (verified by re-parsing).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::hash::{DefaultHasher, Hasher};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use futures_util::stream::{self, StreamExt};
use tracing::{instrument, warn};

use super::decide::{FieldFacts, Inspector, Outcome, version_text};
use super::index::PolicyIndex;
use super::model::{Change, FileUpdate, Finding, Hold, Plan, Problem, SkippedFile};
use super::reasons::ProblemReason;
use super::{PlanError, Progress, REGISTRY_CONCURRENCY, Scope};
use crate::error_chain::Failure;
use crate::files::{Directory, Files, blocking, parallel_map};
use crate::holds::Holds;
use crate::image::Repository;
use crate::policy::ImagePolicy;
use crate::promotion::Promotions;
use crate::registry::{Registry, RegistryError};
use crate::select::TagCandidate;

mod edit;
mod held;
mod labels;
mod owner;
mod patterns;
mod promote;
mod scan;

pub(super) use self::edit::apply_sorted;
pub(in crate::plan) use self::edit::describe;
use self::edit::edit_file;
use self::held::{HeldContext, Labels};
pub use self::held::{Veto, policy_order, unknown_holds, veto};
#[cfg(test)]
pub(super) use self::owner::edit_distance;
pub use self::scan::MAX_MANIFEST_BYTES;
use self::scan::{TreeScan, scan_tree};

/// Two policies claiming one field, or a marker naming no policy (or one whose targets skip the
/// file): the field is left alone.
#[derive(Debug, thiserror::Error)]
pub enum OwnerError {
    #[error("marker names policy {policy:?}, which is not defined; {found}")]
    UndefinedMarker {
        /// As the marker writes it: `[namespace:]name`.
        policy: String,
        /// What tagpilot does have that the marker may have meant.
        found: String,
    },
    #[error(
        "marker names policy {policy:?}, whose targets do not cover this file; nothing is written here"
    )]
    MarkerOutsideTargets { policy: String },
    #[error(
        "policies {} all follow {image}; the reference is left alone until one policy owns it",
        policies.join(", ")
    )]
    Contested {
        policies: Vec<String>,
        image: String,
    },
    #[error(
        "the patterns of policies {} all match {image}; the reference is left alone until one \
         owns it: set a higher priority on one, exclude the image from the others, or write a \
         policy naming it exactly",
        policies.join(" and ")
    )]
    OverlappingPatterns {
        /// Each as `name (pattern, priority at file:line)`.
        policies: Vec<String>,
        image: String,
    },
    #[error("marker names policy {policy:?}, whose pattern {pattern} does not match {image}")]
    MarkerOutsidePattern {
        policy: String,
        pattern: String,
        image: String,
    },
}

/// A field matched to the policy that owns it.
struct Found<'a> {
    file: usize,
    field: &'a Owned,
}

/// An owned field as kept until the registries have answered: what deciding it needs, and
/// where to find it again. How it is written (its slots, its resource and container names) is
/// not kept: most fields of a large tree need no edit, and the few files that get edits are
/// scanned again, so memory grows with the edits instead of with the tree.
struct Owned {
    /// The field's place among its file's scanned fields: scanning the same text again finds
    /// it there.
    ordinal: u32,
    policy: usize,
    /// When `policy` is a pattern policy: the image it follows here, until the pattern's
    /// instance for it is made (`patterns::expand`); `None` afterwards and for other policies.
    image: Option<Box<Repository>>,
    line: usize,
    facts: FieldFacts,
}

/// A file with at least one owned field. Its text is not kept either; the fingerprint makes
/// sure a file read again for its edits still holds the text the fields were found in.
struct ScannedFile {
    rel: PathBuf,
    fingerprint: Fingerprint,
    fields: Vec<Owned>,
}

/// Length and hash of a file's text as scanned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Fingerprint {
    len: usize,
    hash: u64,
}

impl Fingerprint {
    fn of(text: &str) -> Self {
        let mut hasher = DefaultHasher::new();
        hasher.write(text.as_bytes());
        Fingerprint {
            len: text.len(),
            hash: hasher.finish(),
        }
    }
}

/// What scanning one file came to; one per file of the tree until all are scanned, so the
/// rare outcomes are boxed to keep the common ones small.
enum Scan {
    /// No policy applies to the file.
    NotTargeted,
    Skipped(Box<SkippedFile>),
    Unreadable(Box<Problem>),
    Scanned {
        fingerprint: Fingerprint,
        fields: Vec<Owned>,
        /// Fields that two policies claim, markers that name no policy or resolve to nothing.
        problems: Vec<Problem>,
        /// Policies that contest a field: they found their image, though they own nothing.
        named: Vec<usize>,
        /// Patterns passed over for a reference, and why (issue 31).
        precedence: Vec<Finding>,
    },
}

/// What the registry said for one policy.
enum Candidates {
    Ready(Vec<TagCandidate>),
    Failed(Failure),
}

/// A field the registry's answer moves, waiting for its file to be scanned again and edited.
struct Move {
    ordinal: u32,
    policy: usize,
    line: usize,
    tag: String,
    digest: Option<String>,
    /// The version text the field holds now, as the report shows it.
    from: String,
    /// What the field will hold: a kustomize entry that pins only a digest keeps its tag from
    /// the base.
    to: String,
    /// A promotion's evidence, for its pull request.
    promotion: Option<Box<crate::change::PromotionEvidence>>,
}

/// What editing one file came to.
#[derive(Debug)]
struct Edited {
    /// `None` when every move turned out to need no edit.
    update: Option<FileUpdate>,
    changes: Vec<Change>,
    up_to_date: usize,
    problems: Vec<Problem>,
    /// Version labels left alone.
    findings: Vec<Finding>,
}

/// Builds the plan for every policy over the manifests in the directory `scope.root`.
#[instrument(skip_all, fields(root = %scope.root.display(), repository = scope.repository.as_deref().unwrap_or("(local)"), policies = policies.len()))]
pub async fn plan<R: Registry>(
    scope: &Scope,
    policies: &[ImagePolicy],
    registry: &R,
    progress: &dyn Progress,
) -> Result<Plan, PlanError> {
    let root = scope.root.as_path();
    // A directory no policy targets (only Applications configured, say) has no file to read:
    // its tree, however large (a checkout, the clone cache), is not listed. The plan of it is
    // empty, as a walk of it would find.
    if !PolicyIndex::new(policies, scope.repository.as_deref()).touches_files() {
        let mut plan = Plan::default();
        if let Some(name) = &scope.repository {
            plan.set_repository(name);
        }
        progress.done();
        return Ok(plan);
    }
    let excluded = excluded(scope);
    let files = blocking(|| Directory::open(root))?;
    let tree = Tree {
        files: &files,
        repository: scope.repository.as_deref(),
        excluded: &excluded,
        holds: &scope.holds,
        promotions: &scope.promotions,
    };
    plan_tree(tree, policies, registry, progress, None).await
}

/// What `tagpilot check` can tell of the directory `scope.root` without asking a registry: the
/// findings (targets that match no file, images in none of the files matched), markers that
/// resolve to nothing or name no policy, fields two policies claim, and skipped files.
pub fn survey(scope: &Scope, policies: &[ImagePolicy]) -> Result<Plan, PlanError> {
    let excluded = excluded(scope);
    let files = blocking(|| Directory::open(&scope.root))?;
    let index = PolicyIndex::new(policies, scope.repository.as_deref());
    let TreeScan { plan, .. } = scan_tree(&files, &excluded, &index, &());
    Ok(plan)
}

/// [`survey`] of a repository's tree (`files`, as the clone cache last fetched it), for the
/// policies' targets naming `repository`.
pub fn survey_files(files: &dyn Files, repository: &str, policies: &[ImagePolicy]) -> Plan {
    let index = PolicyIndex::new(policies, Some(repository));
    let TreeScan { mut plan, .. } = scan_tree(files, &BTreeSet::new(), &index, &());
    plan.set_repository(repository);
    plan
}

/// `scope.exclude` as paths relative to its root.
fn excluded(scope: &Scope) -> BTreeSet<PathBuf> {
    let root = std::fs::canonicalize(&scope.root).ok();
    scope
        .exclude
        .iter()
        .filter_map(|p| {
            let p = std::fs::canonicalize(p).ok()?;
            p.strip_prefix(root.as_ref()?).ok().map(Path::to_path_buf)
        })
        .collect()
}

/// Builds the plan for every policy over the manifests of `files` (a repository's tree), for
/// the repository named `repository`. Also says, per policy, whether it matched at least one
/// reference (a policy without changes, holds or problems is then up to date, not unused).
pub async fn plan_files<R: Registry>(
    files: &dyn Files,
    repository: &str,
    policies: &[ImagePolicy],
    registry: &R,
    progress: &dyn Progress,
) -> Result<(Plan, Vec<bool>), PlanError> {
    plan_files_held(
        files,
        repository,
        policies,
        registry,
        progress,
        &Holds::none(),
    )
    .await
}

/// [`plan_files`] honouring `holds`: a held tag is not proposed again for its policy and field
/// (see [`crate::holds`]); the rollback holds a newer tag outlives come back in
/// [`Plan::ended_holds`].
pub async fn plan_files_held<R: Registry>(
    files: &dyn Files,
    repository: &str,
    policies: &[ImagePolicy],
    registry: &R,
    progress: &dyn Progress,
    holds: &Holds,
) -> Result<(Plan, Vec<bool>), PlanError> {
    let none = Promotions::default();
    plan_files_promoted(
        files,
        repository,
        policies,
        registry,
        progress,
        (holds, &none),
    )
    .await
}

/// [`plan_files_held`] where the promoting policies (`promote:`) decide by what their
/// upstreams run ([`crate::promotion`]) instead of by the registry's newest tag.
#[instrument(skip_all, fields(repository = %repository, policies = policies.len()))]
pub async fn plan_files_promoted<R: Registry>(
    files: &dyn Files,
    repository: &str,
    policies: &[ImagePolicy],
    registry: &R,
    progress: &dyn Progress,
    (holds, promotions): (&Holds, &Promotions),
) -> Result<(Plan, Vec<bool>), PlanError> {
    let mut matched = vec![false; policies.len()];
    let tree = Tree {
        files,
        repository: Some(repository),
        excluded: &BTreeSet::new(),
        holds,
        promotions,
    };
    let plan = plan_tree(tree, policies, registry, progress, Some(&mut matched)).await?;
    Ok((plan, matched))
}

/// The tree one plan walks: its files, which repository it is, what to leave out, and the holds
/// to honour.
struct Tree<'a> {
    files: &'a dyn Files,
    repository: Option<&'a str>,
    excluded: &'a BTreeSet<PathBuf>,
    holds: &'a Holds,
    promotions: &'a Promotions,
}

async fn plan_tree<R: Registry>(
    tree: Tree<'_>,
    policies: &[ImagePolicy],
    registry: &R,
    progress: &dyn Progress,
    matched: Option<&mut Vec<bool>>,
) -> Result<Plan, PlanError> {
    let Tree {
        files: files_in,
        repository,
        excluded,
        holds,
        promotions,
    } = tree;
    let index = PolicyIndex::new(policies, repository);

    // 1. Read and scan every file at least one policy may touch, on every core.
    let TreeScan {
        mut plan,
        mut files,
    } = scan_tree(files_in, excluded, &index, progress);
    // Each image a pattern policy owns becomes a policy of its own, after the policies as given.
    let expanded = patterns::expand(policies, &mut files);
    let policies: &[ImagePolicy] = &expanded.policies;
    let found: Vec<Found<'_>> = files
        .iter()
        .enumerate()
        .flat_map(|(file, scanned)| {
            scanned
                .fields
                .iter()
                .map(move |field| Found { file, field })
        })
        .collect();

    // 2. Ask the registries: one tag listing per distinct repository.
    let used: BTreeSet<usize> = found.iter().map(|f| f.field.policy).collect();
    if let Some(matched) = matched {
        for &i in &used {
            matched[expanded.given(i)] = true;
        }
    }
    let listings = list_tags(policies, &used, registry, progress).await;

    // 3. Per policy, the candidates its strategy ranks (with build times where it needs them).
    let asked = Asked {
        policies,
        inspector: Inspector::new(registry),
        progress,
        promotions,
        held: (!holds.is_empty()).then_some(HeldContext {
            holds,
            repository,
            files: files_in,
            index: &index,
        }),
    };
    let candidates = asked.candidates(&used, &listings).await;

    // 4. Decide every field, and collect the moves per file.
    let moves = asked
        .decide_fields(&found, &files, &candidates, &mut plan)
        .await;
    drop(found);
    plan.skipped_tags = asked.inspector.into_skipped();

    // 5. Scan the files with moves again and apply their edits in memory (files in parallel);
    // a file whose edit fails verification is left out whole, with the reason.
    edit_files(files_in, &index, policies, &files, moves, &mut plan);

    // 6. The plan in the files' order.
    plan.changes
        .sort_by(|a, b| (&a.file, a.line, &a.policy).cmp(&(&b.file, b.line, &b.policy)));
    plan.holds
        .sort_by(|a, b| (&a.file, a.line).cmp(&(&b.file, b.line)));
    plan.files.sort_by(|a, b| a.path.cmp(&b.path));
    if let Some(name) = repository {
        plan.set_repository(name);
    }
    progress.done();
    Ok(plan)
}

/// Lists the tags of each repository the `used` policies follow, each once, a few at a time.
async fn list_tags<R: Registry>(
    policies: &[ImagePolicy],
    used: &BTreeSet<usize>,
    registry: &R,
    progress: &dyn Progress,
) -> HashMap<Repository, Result<Vec<String>, RegistryError>> {
    // Owned items: borrowed ones make the stream's future not provably `Send` (rust#100013).
    let repositories: BTreeSet<Repository> =
        used.iter().map(|&i| policies[i].image.clone()).collect();
    // An OCI chart's tags carry its versions' `+` as `_` (Helm's mapping): read back here, so
    // that a version compares, and is written, as Helm and the files spell it.
    let oci_charts: BTreeSet<&Repository> = used
        .iter()
        .map(|&i| &policies[i])
        .filter(|p| p.chart.as_ref().is_some_and(|c| c.oci))
        .map(|p| &p.image)
        .collect();
    let oci_charts = &oci_charts;
    progress.phase("listing tags", repositories.len() as u64);
    stream::iter(repositories)
        .map(|repo| async move {
            let mut result = registry.list_tags(&repo).await;
            if oci_charts.contains(&repo)
                && let Ok(tags) = &mut result
            {
                for tag in tags.iter_mut() {
                    *tag = crate::policy::chart::version_of_tag(tag);
                }
            }
            progress.advance();
            (repo, result)
        })
        .buffer_unordered(REGISTRY_CONCURRENCY)
        .collect()
        .await
}

/// What the phases after the tag listings read: the policies, the registry (through its
/// inspector), and where progress goes.
struct Asked<'a, R> {
    policies: &'a [ImagePolicy],
    inspector: Inspector<'a, R>,
    progress: &'a dyn Progress,
    /// The holds to honour, when there are any (or they are unknown).
    held: Option<HeldContext<'a>>,
    /// What the promoting policies' upstreams run.
    promotions: &'a Promotions,
}

impl<R: Registry> Asked<'_, R> {
    /// Each `used` policy's ranked candidates. Policies that filter and rank one image alike
    /// (thousands of Applications on a few images) share one list.
    async fn candidates(
        &self,
        used: &BTreeSet<usize>,
        listings: &HashMap<Repository, Result<Vec<String>, RegistryError>>,
    ) -> HashMap<usize, Arc<Candidates>> {
        let (policies, inspector, progress) = (self.policies, &self.inspector, self.progress);
        let mut candidates: HashMap<usize, Arc<Candidates>> = HashMap::new();
        let mut by_settings: HashMap<(&Repository, String), Arc<Candidates>> = HashMap::new();
        for &i in used {
            let policy = &policies[i];
            let key = (&policy.image, candidate_settings(policy));
            let entry = match by_settings.get(&key) {
                Some(shared) => shared.clone(),
                None => {
                    let entry = Arc::new(match &listings[&policy.image] {
                        Err(e) => Candidates::Failed(Failure::new(e.clone())),
                        Ok(tags) => match inspector.candidates(policy, tags, progress).await {
                            Ok(c) => Candidates::Ready(c),
                            Err(e) => Candidates::Failed(Failure::new(e)),
                        },
                    });
                    by_settings.insert(key, entry.clone());
                    entry
                }
            };
            candidates.insert(i, entry);
        }
        candidates
    }

    /// Decides every found field: its stays, holds and problems go into `plan`, its moves come
    /// back by file.
    async fn decide_fields(
        &self,
        found: &[Found<'_>],
        files: &[ScannedFile],
        candidates: &HashMap<usize, Arc<Candidates>>,
        plan: &mut Plan,
    ) -> BTreeMap<usize, Vec<Move>> {
        let policies = self.policies;
        let mut labels = Labels::new();
        let mut failed_policies = BTreeSet::new();
        let mut moves: BTreeMap<usize, Vec<Move>> = BTreeMap::new();
        for f in found {
            let owned = f.field;
            let policy = &policies[owned.policy];
            let list = match candidates[&owned.policy].as_ref() {
                Candidates::Failed(failure) => {
                    if failed_policies.insert(owned.policy) {
                        plan.problems.push(Problem {
                            policy: Some(policy.name.clone()),
                            image: Some(policy.image.to_string()),
                            ..Problem::new(ProblemReason::Registry(failure.clone()))
                        });
                    }
                    continue;
                }
                Candidates::Ready(list) => list,
            };
            let (from_tag, from_digest) = owned.facts.current();
            let (decided, promotion) = match &policy.promote {
                None => (
                    self.decide_held(f, &files[f.file], list, plan, &mut labels)
                        .await,
                    None,
                ),
                Some(promote) => {
                    self.decide_promoted(f, &files[f.file], list, promote, plan, &mut labels)
                        .await
                }
            };
            match decided {
                Ok(Outcome::Move { tag, digest }) => {
                    let pins_tag = owned.facts.pins().tag;
                    moves.entry(f.file).or_default().push(Move {
                        ordinal: owned.ordinal,
                        policy: owned.policy,
                        line: owned.line,
                        from: version_text(from_tag, from_digest),
                        to: version_text(pins_tag.then_some(tag.as_str()), digest.as_deref()),
                        tag,
                        digest,
                        promotion,
                    });
                }
                Ok(Outcome::Stay) => {
                    plan.up_to_date += 1;
                    plan.claims.push(crate::plan::Claim {
                        policy: policy.name.clone(),
                        image: policy.image.to_string(),
                        file: display_path(&files[f.file].rel),
                        line: owned.line,
                        current: version_text(from_tag, from_digest),
                    });
                }
                Ok(Outcome::Hold(reason)) => plan.holds.push(Hold {
                    repository: None,
                    policy: policy.name.clone(),
                    file: display_path(&files[f.file].rel),
                    line: owned.line,
                    current: version_text(from_tag, from_digest),
                    reason,
                }),
                Err(e) => plan.problems.push(Problem {
                    repository: None,
                    policy: Some(policy.name.clone()),
                    image: Some(policy.image.to_string()),
                    file: Some(display_path(&files[f.file].rel)),
                    line: Some(owned.line),
                    reason: ProblemReason::Registry(Failure::new(e)),
                }),
            }
        }
        moves
    }
}

/// Edits the files with `moves` (by index into `files`), in parallel, into `plan`; a file whose
/// edit fails verification is left out whole, with the reason.
fn edit_files(
    files_in: &dyn Files,
    index: &PolicyIndex<'_>,
    policies: &[ImagePolicy],
    files: &[ScannedFile],
    moves: BTreeMap<usize, Vec<Move>>,
    plan: &mut Plan,
) {
    let moves: Vec<(&ScannedFile, Vec<Move>)> = moves
        .into_iter()
        .map(|(index, moves)| (&files[index], moves))
        .collect();
    let edited = blocking(|| {
        parallel_map(&moves, |(file, moves)| {
            edit_file(files_in, index, policies, file, moves)
        })
    });
    for ((file, moves), result) in moves.into_iter().zip(edited) {
        match result {
            Ok(edited) => {
                plan.changes.extend(edited.changes);
                plan.up_to_date += edited.up_to_date;
                plan.problems.extend(edited.problems);
                plan.findings.extend(edited.findings);
                plan.files.extend(edited.update);
            }
            Err(dropped) => {
                let names: BTreeSet<&str> = moves
                    .iter()
                    .map(|m| policies[m.policy].name.as_str())
                    .collect();
                let dropped = Failure::new(dropped);
                warn!(file = %display_path(&file.rel), error = %dropped, "edit dropped");
                plan.problems.push(Problem {
                    policy: Some(names.into_iter().collect::<Vec<_>>().join(", ")),
                    file: Some(display_path(&file.rel)),
                    ..Problem::new(ProblemReason::EditDropped(dropped))
                });
            }
        }
    }
}

/// Everything of a policy that decides its candidate list besides the image (the strategy,
/// the tag filters, the platforms whose build times it reads): two policies that agree on it
/// get the same list.
fn candidate_settings(policy: &ImagePolicy) -> String {
    format!(
        "{:?}|{:?}|{:?}|{:?}",
        policy.strategy,
        policy.allow_tags.as_ref().map(regex::Regex::as_str),
        policy.ignore_tags,
        policy.platforms
    )
}

fn display_path(p: &Path) -> String {
    p.components()
        .map(|c| c.as_os_str().to_string_lossy())
        .collect::<Vec<_>>()
        .join("/")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_changed_after_scanning_gets_no_edits() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.yaml"), "image: x:1\n").unwrap();
        let file = ScannedFile {
            rel: PathBuf::from("a.yaml"),
            fingerprint: Fingerprint::of("image: x:0\n"),
            fields: Vec::new(),
        };
        let files = Directory::open(dir.path()).unwrap();
        let index = PolicyIndex::new(&[], None);
        let err = edit_file(&files, &index, &[], &file, &[])
            .unwrap_err()
            .to_string();
        assert!(err.contains("changed while tagpilot was planning"), "{err}");
    }

    /// A directory no policy targets is not listed: a root that cannot be walked plans empty
    /// when no policy could touch it, and is an error as soon as one could.
    #[tokio::test]
    async fn a_directory_no_policy_targets_is_not_listed() {
        let dir = tempfile::tempdir().unwrap();
        let scope = Scope::local(dir.path().join("gone"));
        let registry = crate::registry::MemoryRegistry::new();
        let empty = plan(&scope, &[], &registry, &()).await.unwrap();
        assert!(empty.changes.is_empty() && empty.problems.is_empty());
        let mut elsewhere =
            ImagePolicy::adhoc("r.example/app", crate::policy::Strategy::NewestBuild).unwrap();
        elsewhere.targets = vec![crate::policy::Target::files(
            vec!["a.yaml".into()],
            Some("manifests".into()),
        )];
        plan(&scope, std::slice::from_ref(&elsewhere), &registry, &())
            .await
            .unwrap();
        elsewhere.targets.clear();
        assert!(plan(&scope, &[elsewhere], &registry, &()).await.is_err());
    }
}
