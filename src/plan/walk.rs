//! The planner proper: read every file a policy may touch, find its image fields, match each
//! field to the policy that owns it, ask the registry once per repository, decide, and apply
//! the edits in memory (verified by re-parsing).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::hash::{DefaultHasher, Hasher};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use futures_util::stream::{self, StreamExt};
use tracing::{debug, instrument, warn};

use super::decide::{FieldFacts, Inspector, Outcome, decide, version_text};
use super::index::{PolicyIndex, TargetMatches};
use super::model::{
    Change, FileUpdate, Finding, FindingKind, Hold, Plan, Problem, SkipKind, SkippedFile,
};
use super::{PlanError, Progress, REGISTRY_CONCURRENCY, Scope};
use crate::files::{Directory, Files, blocking, parallel_map};
use crate::image::Repository;
use crate::manifest::{self, Edit, FieldKind, ImageField, MarkerPart, Update};
use crate::policy::{HelmPaths, ImagePolicy};
use crate::registry::{Registry, RegistryError};
use crate::select::TagCandidate;

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
    },
}

/// What the registry said for one policy.
enum Candidates {
    Ready(Vec<TagCandidate>),
    Failed(String),
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
}

/// What editing one file came to.
#[derive(Debug)]
struct Edited {
    /// `None` when every move turned out to need no edit.
    update: Option<FileUpdate>,
    changes: Vec<Change>,
    up_to_date: usize,
    problems: Vec<Problem>,
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
    let excluded = excluded(scope);
    let files = blocking(|| Directory::open(root))?;
    plan_tree(
        &files,
        scope.repository.as_deref(),
        &excluded,
        policies,
        registry,
        progress,
        None,
    )
    .await
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
#[instrument(skip_all, fields(repository, policies = policies.len()))]
pub async fn plan_files<R: Registry>(
    files: &dyn Files,
    repository: &str,
    policies: &[ImagePolicy],
    registry: &R,
    progress: &dyn Progress,
) -> Result<(Plan, Vec<bool>), PlanError> {
    let mut matched = vec![false; policies.len()];
    let plan = plan_tree(
        files,
        Some(repository),
        &BTreeSet::new(),
        policies,
        registry,
        progress,
        Some(&mut matched),
    )
    .await?;
    Ok((plan, matched))
}

async fn plan_tree<R: Registry>(
    files_in: &dyn Files,
    repository: Option<&str>,
    excluded: &BTreeSet<PathBuf>,
    policies: &[ImagePolicy],
    registry: &R,
    progress: &dyn Progress,
    matched: Option<&mut Vec<bool>>,
) -> Result<Plan, PlanError> {
    let index = PolicyIndex::new(policies, repository);

    // 1. Read and scan every file at least one policy may touch, on every core.
    let TreeScan { mut plan, files } = scan_tree(files_in, excluded, &index, progress);
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
            matched[i] = true;
        }
    }
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
    // Policies that filter and rank one image alike (thousands of Applications on a few images)
    // share one list.
    let inspector = Inspector::new(registry);
    let mut candidates: HashMap<usize, Arc<Candidates>> = HashMap::new();
    let mut by_settings: HashMap<(&Repository, String), Arc<Candidates>> = HashMap::new();
    for &i in &used {
        let policy = &policies[i];
        let key = (&policy.image, candidate_settings(policy));
        let entry = match by_settings.get(&key) {
            Some(shared) => shared.clone(),
            None => {
                let entry = Arc::new(match &listings[&policy.image] {
                    Err(e) => Candidates::Failed(crate::error_chain::chain(e)),
                    Ok(tags) => match inspector.candidates(policy, tags, progress).await {
                        Ok(c) => Candidates::Ready(c),
                        Err(e) => Candidates::Failed(crate::error_chain::chain(&e)),
                    },
                });
                by_settings.insert(key, entry.clone());
                entry
            }
        };
        candidates.insert(i, entry);
    }
    drop(by_settings);

    // 4. Decide every field, and collect the moves per file.
    let mut failed_policies = BTreeSet::new();
    let mut moves: BTreeMap<usize, Vec<Move>> = BTreeMap::new();
    for f in &found {
        let owned = f.field;
        let policy = &policies[owned.policy];
        let list = match candidates[&owned.policy].as_ref() {
            Candidates::Failed(message) => {
                if failed_policies.insert(owned.policy) {
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
        let (from_tag, from_digest) = owned.facts.current();
        match decide(policy, &owned.facts, list, &inspector).await {
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
                });
            }
            Ok(Outcome::Stay) => plan.up_to_date += 1,
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
                message: crate::error_chain::chain(&e),
            }),
        }
    }
    drop(found);

    // 5. Scan the files with moves again and apply their edits in memory (files in parallel);
    // a file whose edit fails verification is left out whole, with the reason.
    let moves: Vec<(&ScannedFile, Vec<Move>)> = moves
        .into_iter()
        .map(|(index, moves)| (&files[index], moves))
        .collect();
    let edited = blocking(|| {
        parallel_map(&moves, |(file, moves)| {
            edit_file(files_in, &index, policies, file, moves)
        })
    });
    for ((file, moves), result) in moves.into_iter().zip(edited) {
        match result {
            Ok(edited) => {
                plan.changes.extend(edited.changes);
                plan.up_to_date += edited.up_to_date;
                plan.problems.extend(edited.problems);
                plan.files.extend(edited.update);
            }
            Err(message) => {
                let names: BTreeSet<&str> = moves
                    .iter()
                    .map(|m| policies[m.policy].name.as_str())
                    .collect();
                warn!(file = %display_path(&file.rel), error = %message, "edit dropped");
                plan.problems.push(Problem {
                    policy: Some(names.into_iter().collect::<Vec<_>>().join(", ")),
                    file: Some(display_path(&file.rel)),
                    message: format!("edit dropped: {message}"),
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
    if let Some(name) = repository {
        plan.set_repository(name);
    }
    progress.done();
    Ok(plan)
}

/// What scanning a tree found before any registry is asked: the files with owned fields, and a
/// plan holding what the scan alone can tell (skipped files, problems of fields and markers,
/// findings, how many policies matched a reference).
struct TreeScan {
    plan: Plan,
    files: Vec<ScannedFile>,
}

/// Reads and scans every file of `files_in` that a policy of `index` may touch, on every core.
fn scan_tree(
    files_in: &dyn Files,
    excluded: &BTreeSet<PathBuf>,
    index: &PolicyIndex<'_>,
    progress: &dyn Progress,
) -> TreeScan {
    let mut plan = Plan::default();
    let paths: Vec<&Path> = files_in
        .manifests()
        .iter()
        .map(PathBuf::as_path)
        .filter(|p| !excluded.contains(*p))
        .collect();
    let charts = manifest::HelmCharts::from_paths(&paths);
    let matches = TargetMatches::new(index.policies());
    progress.phase("scanning manifests", paths.len() as u64);
    let scans = blocking(|| {
        parallel_map(&paths, |rel| {
            progress.advance();
            scan_file(files_in, rel, index, &matches)
        })
    });
    let mut files = Vec::new();
    // Policies that found their image, owned or not: two policies contesting a field both did.
    let mut seen = BTreeSet::new();
    for (rel, scan) in paths.iter().zip(scans) {
        // A chart's templates are Go templates, not manifests: never edited, even when a
        // policy's targets cover them.
        if !matches!(scan, Scan::NotTargeted)
            && let Some(chart) = charts.template_of(rel)
        {
            plan.skipped.push(SkippedFile {
                repository: None,
                file: display_path(rel),
                reason: format!(
                    "a template of the Helm chart {}/; tagpilot edits values files, never templates",
                    display_path(chart)
                ),
                kind: SkipKind::HelmTemplate,
            });
            continue;
        }
        match scan {
            Scan::NotTargeted => {}
            Scan::Skipped(skipped) => plan.skipped.push(*skipped),
            Scan::Unreadable(problem) => plan.problems.push(*problem),
            Scan::Scanned {
                fingerprint,
                fields,
                problems,
                named,
            } => {
                plan.problems.extend(problems);
                seen.extend(named);
                if fields.is_empty() {
                    continue;
                }
                seen.extend(fields.iter().map(|f| f.policy));
                files.push(ScannedFile {
                    rel: rel.to_path_buf(),
                    fingerprint,
                    fields,
                });
            }
        }
    }
    let used: BTreeSet<usize> = files
        .iter()
        .flat_map(|f| f.fields.iter().map(|o| o.policy))
        .collect();
    plan.policies_used = used.len();
    plan.findings = findings(index, &matches, !paths.is_empty(), &seen);
    TreeScan { plan, files }
}

/// The scope's findings: each policy whose targets here match no file (per target), and each
/// whose matched files hold no reference to its image. Targets naming literal files are an
/// Argo CD Application's: the Applications section reports those images itself.
fn findings(
    index: &PolicyIndex<'_>,
    matches: &TargetMatches,
    any_file: bool,
    seen: &BTreeSet<usize>,
) -> Vec<Finding> {
    let repository = index.repository();
    let place = match repository {
        Some(name) => format!("repository {name}"),
        None => "the local directory".to_string(),
    };
    let describe = |paths: &[String]| -> String {
        if paths.is_empty() {
            format!("every YAML file of {place}")
        } else {
            format!("paths {} in {place}", paths.join(", "))
        }
    };
    let mut out = Vec::new();
    for (i, policy) in index.policies().iter().enumerate() {
        // (paths, whether they matched a file) of each of the policy's targets in this scope.
        let targets: Vec<(&[String], bool)> = if policy.targets.is_empty() {
            if repository.is_some() {
                continue;
            }
            vec![(&[][..], any_file)]
        } else {
            policy
                .targets
                .iter()
                .enumerate()
                .filter(|(_, t)| t.repository.as_deref() == repository && !t.literal)
                .map(|(j, t)| {
                    let hit = if t.paths.is_empty() {
                        any_file
                    } else {
                        matches.is_marked(i, j)
                    };
                    (t.paths.as_slice(), hit)
                })
                .collect()
        };
        let finding = |kind, searched: Vec<String>| Finding {
            policy: Some(policy.name.clone()),
            ..Finding::new(kind, policy.image.to_string(), searched.join("; "))
        };
        let missed: Vec<String> = targets
            .iter()
            .filter(|(_, hit)| !hit)
            .map(|(paths, _)| describe(paths))
            .collect();
        if !missed.is_empty() {
            out.push(finding(FindingKind::NoFiles, missed));
        }
        let hit: Vec<String> = targets
            .iter()
            .filter(|(_, hit)| *hit)
            .map(|(paths, _)| describe(paths))
            .collect();
        if !hit.is_empty() && !seen.contains(&i) {
            out.push(finding(FindingKind::ImageNotFound, hit));
        }
    }
    out
}

pub(super) fn apply_sorted(
    path: &Path,
    src: &str,
    mut edits: Vec<Edit>,
) -> Result<String, manifest::ManifestError> {
    edits.sort_by_key(|e| (e.span.start, e.span.end));
    edits.dedup();
    manifest::apply_edits(path, src, &edits)
}

/// The largest file the planner reads as a manifest. The API server refuses objects of more
/// than a few MiB (etcd's request limit), so a file past this is no set of manifests a cluster
/// would take, and reading, parsing, editing and verifying it costs several times its size.
/// Skipped before it is read, with the reason.
pub const MAX_MANIFEST_BYTES: u64 = 64 << 20;

/// Reads and scans one file: which fields it holds, and which policy owns each.
fn scan_file(
    files: &dyn Files,
    rel: &Path,
    index: &PolicyIndex<'_>,
    matches: &TargetMatches,
) -> Scan {
    if !index.applies_marking(rel, matches) {
        return Scan::NotTargeted;
    }
    let display = display_path(rel);
    if let Ok(size) = files.size(rel)
        && size > MAX_MANIFEST_BYTES
    {
        return Scan::Skipped(Box::new(SkippedFile {
            repository: None,
            file: display,
            reason: format!(
                "{} MiB, more than the {} MiB a manifest may be; left alone",
                size.div_ceil(1 << 20),
                MAX_MANIFEST_BYTES >> 20
            ),
            kind: SkipKind::TooLarge,
        }));
    }
    let src = match files.read(rel) {
        Ok(bytes) => match String::from_utf8(bytes) {
            Ok(s) => s,
            Err(_) => {
                return Scan::Skipped(Box::new(SkippedFile {
                    repository: None,
                    file: display,
                    reason: "not UTF-8 text".into(),
                    kind: SkipKind::NotText,
                }));
            }
        },
        Err(e) => {
            return Scan::Unreadable(Box::new(Problem {
                file: Some(display),
                message: format!("cannot read: {}", crate::error_chain::chain(&e)),
                ..Problem::default()
            }));
        }
    };
    let helm = index.helm_paths(rel);
    let (fields, unresolved) = match manifest::scan_with_markers(rel, &src, &helm) {
        Ok(scanned) => scanned,
        Err(e) => {
            debug!(file = %rel.display(), error = %e, "not a YAML document tagpilot can edit");
            return Scan::Skipped(Box::new(SkippedFile {
                repository: None,
                file: display,
                kind: match e {
                    manifest::ManifestError::TooDeep { .. } => SkipKind::TooDeep,
                    _ => SkipKind::InvalidYaml,
                },
                reason: e.to_string(),
            }));
        }
    };
    let mut owned = Vec::new();
    let mut problems = Vec::new();
    let mut named = Vec::new();
    if index.reads_markers() {
        problems.extend(unresolved.into_iter().map(|m| Problem {
            file: Some(display.clone()),
            line: Some(m.line),
            message: format!("marker `{}` resolves to nothing: {}", m.marker, m.reason),
            ..Problem::default()
        }));
    }
    let mut applicable = None;
    for (ordinal, field) in (0u32..).zip(fields) {
        match owner(&field, rel, index, &helm, &mut applicable) {
            Ok(Some(policy)) => owned.push(Owned {
                ordinal,
                policy,
                line: field.line,
                facts: FieldFacts::of(&field),
            }),
            Ok(None) => {}
            Err(e) => {
                // The contesting policies did find their image, and say so in this problem.
                if let OwnerError::Contested { policies, .. } = &e {
                    named.extend(policies.iter().flat_map(|p| index.named(p)).copied());
                }
                problems.push(Problem {
                    file: Some(display.clone()),
                    line: Some(field.line),
                    message: e.to_string(),
                    ..Problem::default()
                });
            }
        }
    }
    // In the file's order, whichever check found them.
    problems.sort_by_key(|p| p.line);
    // Kept until every field is decided: no room to spare per file.
    owned.shrink_to_fit();
    Scan::Scanned {
        fingerprint: Fingerprint::of(&src),
        fields: owned,
        problems,
        named,
    }
}

/// Reads a file again, finds its moved fields by scanning it again, and applies their edits.
/// The error is the reason the file's edits are dropped.
fn edit_file(
    files: &dyn Files,
    index: &PolicyIndex<'_>,
    policies: &[ImagePolicy],
    file: &ScannedFile,
    moves: &[Move],
) -> Result<Edited, String> {
    const CHANGED: &str = "the file changed while tagpilot was planning; plan again";
    let original = match files.read(&file.rel).map(String::from_utf8) {
        Ok(Ok(text)) if Fingerprint::of(&text) == file.fingerprint => text,
        Ok(_) => return Err(CHANGED.into()),
        Err(e) => return Err(format!("cannot read: {}", crate::error_chain::chain(&e))),
    };
    let fields = manifest::scan(&file.rel, &original, &index.helm_paths(&file.rel))
        .map_err(|e| e.to_string())?;
    let display = display_path(&file.rel);
    let mut edited = Edited {
        update: None,
        changes: Vec::new(),
        up_to_date: 0,
        problems: Vec::new(),
    };
    let mut by_policy: BTreeMap<String, Vec<Edit>> = BTreeMap::new();
    for m in moves {
        let policy = &policies[m.policy];
        let field = fields
            .get(m.ordinal as usize)
            .filter(|field| field.line == m.line)
            .ok_or(CHANGED)?;
        let update = Update {
            name: &policy.image_name,
            tag: Some(&m.tag),
            digest: m.digest.as_deref(),
        };
        let edits = match field.edits(&update) {
            Ok(edits) => edits,
            Err(e) => {
                edited.problems.push(Problem {
                    repository: None,
                    policy: Some(policy.name.clone()),
                    image: Some(policy.image.to_string()),
                    file: Some(display.clone()),
                    line: Some(m.line),
                    message: e.to_string(),
                });
                continue;
            }
        };
        let Some(first) = edits.first() else {
            edited.up_to_date += 1;
            continue;
        };
        // A `:name` marker moves a name, not a version: the report shows the names.
        let moves_name = matches!(
            field.kind,
            FieldKind::Marker {
                part: MarkerPart::Name,
                ..
            }
        );
        let (from, to) = if moves_name {
            let old = original
                .get(first.span.clone())
                .unwrap_or_default()
                .trim_matches(|c| c == '"' || c == '\'');
            (old.to_string(), policy.image_name.clone())
        } else {
            (m.from.clone(), m.to.clone())
        };
        edited.changes.push(Change {
            repository: None,
            policy: policy.name.clone(),
            image: policy.image.to_string(),
            file: display.clone(),
            line: m.line,
            field: describe(&field.kind),
            strategy: policy.strategy.name(),
            from,
            to,
            source: None,
        });
        by_policy
            .entry(policy.name.clone())
            .or_default()
            .extend(edits);
    }
    if by_policy.is_empty() {
        return Ok(edited);
    }
    let all: Vec<Edit> = by_policy.values().flatten().cloned().collect();
    let updated = apply_sorted(&file.rel, &original, all).map_err(|e| e.to_string())?;
    edited.update = Some(FileUpdate {
        path: file.rel.clone(),
        original,
        updated,
        edits: by_policy.into_iter().collect(),
    });
    Ok(edited)
}

/// Which policy owns a field, if any. Two policies claiming one field is an error: picking one
/// silently would make the result depend on file order. Only the policies that could own the
/// field (by image, name or alias) are looked at, in policy order. When many policies could
/// (thousands of Applications on one image), the few that apply to this file are looked at
/// instead, found once per file (`applicable`).
fn owner(
    field: &ImageField,
    rel: &Path,
    index: &PolicyIndex<'_>,
    helm: &[HelmPaths],
    applicable: &mut Option<Vec<usize>>,
) -> Result<Option<usize>, OwnerError> {
    let policies = index.policies();
    if let FieldKind::Marker {
        policy, namespace, ..
    } = &field.kind
    {
        // A walk of Applications' policies alone: the policy files' walk resolves markers.
        if !index.reads_markers() {
            return Ok(None);
        }
        // `named` only holds policies of that name; the namespace must agree where both give one.
        let in_namespace = |i: usize| match (namespace, &policies[i].namespace) {
            (Some(want), Some(have)) => want == have,
            _ => true,
        };
        let named = index.named(policy);
        let written = match namespace {
            Some(ns) => format!("{ns}:{policy}"),
            None => policy.clone(),
        };
        return match named
            .iter()
            .copied()
            .find(|&i| in_namespace(i) && index.applies(i, rel))
        {
            Some(i) => Ok(Some(i)),
            None if named.iter().any(|&i| in_namespace(i)) => {
                Err(OwnerError::MarkerOutsideTargets { policy: written })
            }
            None => Err(OwnerError::UndefinedMarker {
                policy: written,
                found: found_instead(policies, policy, named),
            }),
        };
    }
    // Either side of the intersection, whichever is smaller; both are in policy order.
    let mut applying = |lists: &[&[usize]]| -> Vec<usize> {
        let total: usize = lists.iter().map(|l| l.len()).sum();
        let mut out: Vec<usize> = if total > FEW_OWNERS {
            applicable
                .get_or_insert_with(|| index.applicable(rel))
                .iter()
                .copied()
                .filter(|i| lists.iter().any(|l| l.binary_search(i).is_ok()))
                .collect()
        } else {
            lists
                .iter()
                .flat_map(|l| l.iter().copied())
                .filter(|&i| index.applies(i, rel))
                .collect()
        };
        out.sort_unstable();
        out.dedup();
        out
    };
    let matching: Vec<usize> = match field.repository() {
        Some(repo) => {
            // A kustomization may call the image by another name (`kustomize.imageName` on the
            // target).
            let alias = match &field.kind {
                FieldKind::Kustomize { name } => index.kustomize_alias(name),
                _ => &[],
            };
            applying(&[index.following(repo), alias])
        }
        // An explicit Helm path without a repository value belongs to the policy that declared it.
        None if matches!(field.kind, FieldKind::HelmValues { .. }) && !helm.is_empty() => {
            applying(&[index.with_helm()])
        }
        None => Vec::new(),
    };
    match matching.as_slice() {
        [] => Ok(None),
        [one] => Ok(Some(*one)),
        many => Err(OwnerError::Contested {
            policies: many.iter().map(|&i| policies[i].name.clone()).collect(),
            image: policies[many[0]].image.to_string(),
        }),
    }
}

/// What a marker naming an undefined policy may have meant: the same name in other namespaces,
/// else the names a typo away.
fn found_instead(policies: &[ImagePolicy], name: &str, same_name: &[usize]) -> String {
    let qualified = |p: &ImagePolicy| match &p.namespace {
        Some(ns) => format!("{ns}:{}", p.name),
        None => p.name.clone(),
    };
    if !same_name.is_empty() {
        let found: Vec<String> = same_name.iter().map(|&i| qualified(&policies[i])).collect();
        return format!("found {}", found.join(", "));
    }
    let mut near: Vec<(usize, String)> = policies
        .iter()
        .map(|p| (edit_distance(&p.name, name), qualified(p)))
        .filter(|(d, _)| *d <= 2)
        .collect();
    near.sort();
    near.dedup_by(|a, b| a.1 == b.1);
    match near.as_slice() {
        [] if policies.is_empty() => "no policy is defined".to_string(),
        [] => format!(
            "no policy of that name in any namespace ({} defined)",
            policies.len()
        ),
        near => format!(
            "found {}",
            near.iter()
                .take(3)
                .map(|(_, n)| n.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// Levenshtein distance, by characters: close enough to catch a typo in a policy name.
pub(super) fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = (above + 1)
                .min(row[j] + 1)
                .min(diagonal + usize::from(ca != *cb));
            diagonal = above;
        }
    }
    row[b.len()]
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

/// Up to this many candidate owners are each tested against the file; beyond it, the policies
/// that apply to the file are found through the index instead.
const FEW_OWNERS: usize = 16;

fn display_path(p: &Path) -> String {
    p.components()
        .map(|c| c.as_os_str().to_string_lossy())
        .collect::<Vec<_>>()
        .join("/")
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
        let err = edit_file(&files, &index, &[], &file, &[]).unwrap_err();
        assert!(err.contains("changed while tagpilot was planning"), "{err}");
    }
}
