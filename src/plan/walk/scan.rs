//! Phase 1 of a walk: read and scan every file a policy may touch, and say what the scan alone
//! can tell (skipped files, problems of fields and markers, findings).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use tracing::debug;

use super::owner::owner;
use super::{Fingerprint, Owned, OwnerError, Scan, ScannedFile, display_path};
use crate::error_chain::Failure;
use crate::files::{Files, blocking, parallel_map};
use crate::image::Repository;
use crate::manifest;
use crate::plan::Progress;
use crate::plan::decide::FieldFacts;
use crate::plan::index::{PolicyIndex, TargetMatches};
use crate::plan::model::{Finding, FindingKind, Plan, Problem, SkipKind, SkippedFile};
use crate::plan::reasons::ProblemReason;
use crate::policy::SourceLocation;

/// What scanning a tree found before any registry is asked: the files with owned fields, and a
/// plan holding what the scan alone can tell (skipped files, problems of fields and markers,
/// findings, how many policies matched a reference).
pub(super) struct TreeScan {
    pub(super) plan: Plan,
    pub(super) files: Vec<ScannedFile>,
}

/// Reads and scans every file of `files_in` that a policy of `index` may touch, on every core.
pub(super) fn scan_tree(
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
    // (policy, why, file) for each file a policy's targets name that cannot be read.
    let mut unreadable: Vec<(usize, String, String)> = Vec::new();
    // Policies that found their image, owned or not: two policies contesting a field both did.
    let mut seen = BTreeSet::new();
    // Patterns passed over for a reference (issue 31), each (kind, pattern, image) once.
    let mut passed_over = BTreeSet::new();
    let mut passed = Vec::new();
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
            Scan::Skipped(skipped) => {
                unreadable.extend(
                    index
                        .targeting(rel)
                        .into_iter()
                        .map(|i| (i, skipped.reason.clone(), display_path(rel))),
                );
                plan.skipped.push(*skipped)
            }
            Scan::Unreadable(problem) => plan.problems.push(*problem),
            Scan::Scanned {
                fingerprint,
                fields,
                problems,
                named,
                precedence: notes,
            } => {
                plan.problems.extend(problems);
                // Once per pattern and image, at the first reference: the tree's order.
                for note in notes {
                    if passed_over.insert((note.kind, note.policy.clone(), note.image.clone())) {
                        passed.push(note);
                    }
                }
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
    plan.findings.extend(passed);
    plan.findings
        .extend(unreadable.into_iter().map(|(i, why, file)| {
            let policy = &index.policies()[i];
            // The reason names `file:line:column` when the reader knows where it stopped.
            let searched = if why.starts_with(&file) {
                why
            } else {
                format!("{file}: {why}")
            };
            Finding {
                policy: Some(policy.name.clone()),
                ..Finding::new(
                    FindingKind::UnreadableFile,
                    policy.image.to_string(),
                    searched,
                )
            }
        }));
    TreeScan { plan, files }
}

/// One target as its findings name it: its paths, and where it is written.
type Searched<'a> = (&'a [String], Option<&'a SourceLocation>);

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
    let describe = |(paths, at): &Searched<'_>| -> String {
        let searched = if paths.is_empty() {
            format!("every YAML file of {place}")
        } else {
            format!("paths {} in {place}", paths.join(", "))
        };
        match at {
            // `policies/api.yaml`, however tagpilot.yaml was found (`./tagpilot.yaml`).
            Some(at) => format!(
                "{searched} (the target at {})",
                at.to_string().trim_start_matches("./")
            ),
            None => searched,
        }
    };
    let mut out = Vec::new();
    for (i, policy) in index.policies().iter().enumerate() {
        // ((paths, where written), whether they matched a file) of each of the policy's
        // targets in this scope.
        let targets: Vec<(Searched<'_>, bool)> = if policy.targets.is_empty() {
            if repository.is_some() {
                continue;
            }
            vec![((&[][..], Some(&policy.source)), any_file)]
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
                    ((t.paths.as_slice(), t.source.as_ref()), hit)
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
            .map(|(target, _)| describe(target))
            .collect();
        if !missed.is_empty() {
            out.push(finding(FindingKind::NoFiles, missed));
        }
        let hit: Vec<String> = targets
            .iter()
            .filter(|(_, hit)| *hit)
            .map(|(target, _)| describe(target))
            .collect();
        if !hit.is_empty() && !seen.contains(&i) {
            out.push(finding(FindingKind::ImageNotFound, hit));
        }
    }
    out
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
                ..Problem::new(ProblemReason::Unreadable(Failure::new(e)))
            }));
        }
    };
    let helm = index.helm_paths(rel);
    let manifest::Scanned {
        fields,
        unresolved,
        dropped,
        templated,
    } = match manifest::scan_with_markers(rel, &src, &helm) {
        Ok(scanned) => scanned,
        Err(e) => {
            debug!(file = %rel.display(), error = %e, "not a YAML document tagpilot can edit");
            return Scan::Skipped(Box::new(SkippedFile {
                repository: None,
                file: display,
                kind: match e {
                    manifest::ManifestError::TooDeep { .. } => SkipKind::TooDeep,
                    manifest::ManifestError::OverLimit { .. } => SkipKind::OverLimit,
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
            ..Problem::new(ProblemReason::MarkerUnresolved {
                marker: m.marker,
                reason: m.reason,
            })
        }));
    }
    // A reference of a policy's image that cannot be written is named against that policy,
    // which did find its image: never a silent "no reference".
    for d in dropped {
        let Some(repository) = &d.repository else {
            continue;
        };
        let following: Vec<usize> = index
            .following(repository)
            .iter()
            .copied()
            .filter(|&i| index.applies(i, rel))
            .collect();
        if following.is_empty() {
            continue;
        }
        named.extend(following.iter().copied());
        let policies = index.policies();
        problems.push(Problem {
            policy: Some(
                following
                    .iter()
                    .map(|&i| policies[i].name.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            ),
            image: Some(repository.to_string()),
            file: Some(display.clone()),
            line: Some(d.line),
            ..Problem::new(ProblemReason::NotWritable {
                field: super::edit::describe(&d.kind),
                reason: d.reason,
            })
        });
    }
    // A line a dropped reference already names (a helmfile release's templated version) is
    // named once.
    let named_lines: BTreeSet<usize> = problems.iter().filter_map(|p| p.line).collect();
    let templated: Vec<manifest::TemplatedLine> = templated
        .into_iter()
        .filter(|t| !named_lines.contains(&t.line))
        .collect();
    templated_references(index, rel, &display, &templated, &mut problems, &mut named);
    let mut applicable = None;
    let mut notes = Vec::new();
    let mut precedence = Vec::new();
    for (ordinal, field) in (0u32..).zip(fields) {
        let owned_by = owner(&field, rel, index, &helm, &mut applicable, &mut notes)
            .and_then(|policy| pattern_image(index, &field, policy));
        // The patterns passed over found their image too.
        for note in notes.drain(..) {
            named.extend(note.policies());
            precedence.extend(note.findings(index.policies(), &display, field.line));
        }
        match owned_by {
            Ok(Some((policy, image))) => owned.push(Owned {
                ordinal,
                policy,
                image,
                line: field.line,
                facts: FieldFacts::of(&field),
            }),
            Ok(None) => {}
            Err(e) => {
                // The contesting policies did find their image, and say so in this problem.
                if let OwnerError::Contested { policies, .. } = &e {
                    named.extend(policies.iter().flat_map(|p| index.named(p)).copied());
                }
                if let OwnerError::OverlappingPatterns { .. } = &e
                    && let Some(repo) = field.repository()
                {
                    named.extend(index.patterns_following(repo));
                }
                problems.push(Problem {
                    file: Some(display.clone()),
                    line: Some(field.line),
                    ..Problem::new(ProblemReason::Unowned(Failure::new(e)))
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
        precedence,
    }
}

/// A field's owner, with the image it follows when the owner is a pattern policy.
type OwnedBy = (usize, Option<Box<Repository>>);

/// The owner found for `field`, with the image it follows when the owner is a pattern policy
/// (its instance is made for that image after the scan). A marker naming a pattern policy on a
/// reference its pattern does not match owns nothing, named.
fn pattern_image(
    index: &PolicyIndex<'_>,
    field: &manifest::ImageField,
    policy: Option<usize>,
) -> Result<Option<OwnedBy>, OwnerError> {
    let Some(i) = policy else { return Ok(None) };
    let Some(pattern) = &index.policies()[i].pattern else {
        return Ok(Some((i, None)));
    };
    match field.repository() {
        Some(repo) if pattern.matches(repo) => Ok(Some((i, Some(Box::new(repo.clone()))))),
        repo => Err(OwnerError::MarkerOutsidePattern {
            policy: index.policies()[i].name.clone(),
            pattern: pattern.written.clone(),
            image: repo.map_or_else(|| "no image".to_string(), ToString::to_string),
        }),
    }
}

/// Names each line of a Go-templated file that a template expression takes and that mentions
/// the image (its repository path) or the chart (its name) of a policy applying to the file:
/// tagpilot leaves it alone, and says so rather than passing it silently.
fn templated_references(
    index: &PolicyIndex<'_>,
    rel: &Path,
    display: &str,
    templated: &[manifest::TemplatedLine],
    problems: &mut Vec<Problem>,
    named: &mut Vec<usize>,
) {
    if templated.is_empty() {
        return;
    }
    let policies = index.policies();
    let applying = index.applicable(rel);
    for t in templated {
        let mentioning: Vec<usize> = applying
            .iter()
            .copied()
            .filter(|&i| {
                let p = &policies[i];
                let needle = match &p.chart {
                    Some(chart) => chart.name.as_str(),
                    None => p.image.path.as_str(),
                };
                t.text.contains(needle)
            })
            .collect();
        let Some(&first) = mentioning.first() else {
            continue;
        };
        named.extend(mentioning.iter().copied());
        problems.push(Problem {
            policy: Some(
                mentioning
                    .iter()
                    .map(|&i| policies[i].name.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            ),
            image: Some(policies[first].image.to_string()),
            file: Some(display.to_string()),
            line: Some(t.line),
            ..Problem::new(ProblemReason::NotWritable {
                field: "a template expression".to_string(),
                reason: format!(
                    "`{}` is rendered by the template; tagpilot edits literal values only and \
                     leaves it alone",
                    t.text.trim()
                ),
            })
        });
    }
}
