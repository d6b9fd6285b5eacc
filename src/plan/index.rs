//! Which policies may touch a file, and which policy may own a field, in time that does not grow
//! with the number of policies.
//!
//! A monorepo holds tens of thousands of files and hundreds of policies: testing every file
//! against every policy's targets, and every field against every policy, makes a plan cost
//! files × policies. Instead, one combined glob set over every target of the scope's repository
//! says whether any policy applies to a file (one match per file), and the policies are indexed
//! by the image, name and kustomize alias a field can name, so owning a field only looks at the
//! few policies that could own it.
//!
//! The index is a faster way to the same answers as [`applies_to`], never a different rule: every
//! candidate the combined sets find is confirmed with the target's own matcher.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use globset::{Candidate, GlobBuilder, GlobSet, GlobSetBuilder};

use crate::image::Repository;
use crate::policy::{HelmPaths, ImagePolicy};

/// A target: (policy index, target index within the policy).
type TargetRef = (usize, usize);

/// Globs of many targets in one set; each glob leads back to the targets that wrote it.
struct CombinedGlobs {
    /// `None` when the combined set could not be built (e.g. too large for the regex engine);
    /// every target is then tested on its own.
    set: Option<GlobSet>,
    /// Per glob of `set`, the targets that wrote it (identical globs are added once).
    targets: Vec<Vec<TargetRef>>,
    /// Every target in the set, for the fallback.
    all: Vec<TargetRef>,
    /// Targets naming literal files ([`crate::policy::Target::literal`]), by file: a lookup,
    /// with no glob compiled.
    literal: HashMap<PathBuf, Vec<TargetRef>>,
}

impl CombinedGlobs {
    /// Builds one set from the targets' `paths`. A target's own `path_set` may be compiled from
    /// `paths` as written or from `paths` escaped as literal file names; both spellings go in, so
    /// the set finds a superset of each target's matches, and [`CombinedGlobs::candidates`]'
    /// callers confirm with the target itself. Literal targets (Argo CD Applications' files)
    /// compile nothing: they are looked up by path.
    fn new(policies: &[ImagePolicy], targets: Vec<TargetRef>) -> Self {
        let mut builder = GlobSetBuilder::new();
        let mut by_glob: HashMap<String, usize> = HashMap::new();
        let mut owners: Vec<Vec<TargetRef>> = Vec::new();
        let mut literal: HashMap<PathBuf, Vec<TargetRef>> = HashMap::new();
        for &(i, j) in &targets {
            if policies[i].targets[j].literal {
                for path in &policies[i].targets[j].paths {
                    let owners = literal.entry(PathBuf::from(path)).or_default();
                    if owners.last() != Some(&(i, j)) {
                        owners.push((i, j));
                    }
                }
                continue;
            }
            for path in &policies[i].targets[j].paths {
                let escaped = globset::escape(path);
                let spellings = if &escaped == path {
                    vec![escaped]
                } else {
                    vec![path.clone(), escaped]
                };
                for glob in spellings {
                    let index = match by_glob.get(&glob) {
                        Some(&index) => index,
                        None => {
                            // A glob that does not compile is not in the target's own set either.
                            let Ok(compiled) =
                                GlobBuilder::new(&glob).literal_separator(true).build()
                            else {
                                continue;
                            };
                            builder.add(compiled);
                            owners.push(Vec::new());
                            by_glob.insert(glob, owners.len() - 1);
                            owners.len() - 1
                        }
                    };
                    if owners[index].last() != Some(&(i, j)) {
                        owners[index].push((i, j));
                    }
                }
            }
        }
        CombinedGlobs {
            set: builder.build().ok(),
            targets: owners,
            all: targets,
            literal,
        }
    }

    /// Targets that may match `rel`, in no particular order and possibly repeated.
    fn candidates<'a>(&'a self, rel: &Path) -> Box<dyn Iterator<Item = TargetRef> + 'a> {
        let literal = self.literal.get(rel).into_iter().flatten().copied();
        match &self.set {
            Some(set) if set.is_empty() => Box::new(literal),
            Some(set) => {
                let globs = set.matches_candidate(&Candidate::new(rel));
                Box::new(
                    globs
                        .into_iter()
                        .flat_map(move |g| self.targets[g].iter().copied())
                        .chain(literal),
                )
            }
            None => Box::new(self.all.iter().copied()),
        }
    }
}

/// The policies of one plan, indexed for one scope (the local directory or one repository).
pub(super) struct PolicyIndex<'p> {
    policies: &'p [ImagePolicy],
    repository: Option<String>,
    /// Some policy applies to every file of this scope: one without targets (local directory
    /// only), or a target without `paths`.
    every_file: bool,
    /// Every target of this scope that has `paths`.
    paths: CombinedGlobs,
    /// Policies that apply to every file of this scope (no targets, for the local directory, or
    /// a target without `paths`), in policy order.
    every_file_policies: Vec<usize>,
    /// Targets of this scope with Helm value paths and `paths`.
    helm: CombinedGlobs,
    /// Targets of this scope with Helm value paths and no `paths` (every file).
    helm_every_file: Vec<TargetRef>,
    by_image: HashMap<&'p Repository, Vec<usize>>,
    /// Policies whose image is a pattern (issue 31), in policy order: matched per reference,
    /// never by `by_image`.
    patterns: Vec<usize>,
    by_name: HashMap<&'p str, Vec<usize>>,
    /// Policies with a target whose `kustomize.imageName` is the key (any repository).
    by_kustomize_alias: HashMap<&'p str, Vec<usize>>,
    /// Policies with at least one Helm target (any repository).
    with_helm: Vec<usize>,
    /// Some policy of this scope has a target that is not a list of literal files: a policy
    /// file's. Markers name those; a walk of Argo CD Applications' policies alone leaves
    /// markers to the policy files' walk of the same tree.
    reads_markers: bool,
    /// Some policy may touch a file of this scope (`every_file`, or a target with `paths`).
    touches_files: bool,
}

impl<'p> PolicyIndex<'p> {
    pub(super) fn new(policies: &'p [ImagePolicy], repository: Option<&str>) -> Self {
        let mut every_file = false;
        let mut every_file_policies = Vec::new();
        let mut with_paths = Vec::new();
        let mut helm_with_paths = Vec::new();
        let mut helm_every_file = Vec::new();
        let mut by_image: HashMap<&Repository, Vec<usize>> = HashMap::new();
        let mut by_name: HashMap<&str, Vec<usize>> = HashMap::new();
        let mut by_kustomize_alias: HashMap<&str, Vec<usize>> = HashMap::new();
        let mut with_helm = Vec::new();
        let mut patterns = Vec::new();
        for (i, policy) in policies.iter().enumerate() {
            if policy.pattern.is_some() {
                patterns.push(i);
            } else {
                by_image.entry(&policy.image).or_default().push(i);
            }
            by_name.entry(policy.name.as_str()).or_default().push(i);
            if policy.targets.is_empty() && repository.is_none() {
                every_file = true;
                every_file_policies.push(i);
            }
            // A pattern's Helm targets name the repository value, so it owns by image.
            if policy.pattern.is_none() && policy.targets.iter().any(|t| t.helm.is_some()) {
                with_helm.push(i);
            }
            for (j, target) in policy.targets.iter().enumerate() {
                if let Some(alias) = target.kustomize_image_name.as_deref() {
                    let owners = by_kustomize_alias.entry(alias).or_default();
                    if owners.last() != Some(&i) {
                        owners.push(i);
                    }
                }
                if target.repository.as_deref() != repository {
                    continue;
                }
                if target.paths.is_empty() {
                    every_file = true;
                    if every_file_policies.last() != Some(&i) {
                        every_file_policies.push(i);
                    }
                    if target.helm.is_some() {
                        helm_every_file.push((i, j));
                    }
                } else {
                    with_paths.push((i, j));
                    if target.helm.is_some() {
                        helm_with_paths.push((i, j));
                    }
                }
            }
        }
        let reads_markers = every_file
            || with_paths
                .iter()
                .any(|&(i, j)| !policies[i].targets[j].literal);
        let touches_files = every_file || !with_paths.is_empty();
        PolicyIndex {
            reads_markers,
            touches_files,
            policies,
            repository: repository.map(str::to_string),
            every_file,
            paths: CombinedGlobs::new(policies, with_paths),
            every_file_policies,
            helm: CombinedGlobs::new(policies, helm_with_paths),
            helm_every_file,
            by_image,
            patterns,
            by_name,
            by_kustomize_alias,
            with_helm,
        }
    }

    pub(super) fn policies(&self) -> &'p [ImagePolicy] {
        self.policies
    }

    /// Whether at least one policy applies to `rel`: whether the file is worth reading. The
    /// planner asks [`PolicyIndex::applies_marking`], which answers the same; this is its
    /// reference in tests.
    #[cfg(test)]
    pub(super) fn any_applies(&self, rel: &Path) -> bool {
        if self.every_file {
            return true;
        }
        self.paths
            .candidates(rel)
            .any(|(i, j)| self.policies[i].targets[j].matches(rel))
    }

    /// [`PolicyIndex::any_applies`], and each target of this scope that matches `rel` is marked
    /// in `matched` on the way. A target already marked is not matched again once the answer is
    /// known, so marking costs little beyond the one combined glob match per file.
    pub(super) fn applies_marking(&self, rel: &Path, matched: &TargetMatches) -> bool {
        let mut applies = self.every_file;
        for (i, j) in self.paths.candidates(rel) {
            let marked = matched.is_marked(i, j);
            if applies && marked {
                continue;
            }
            if self.policies[i].targets[j].matches(rel) {
                applies = true;
                matched.mark(i, j);
            }
        }
        applies
    }

    /// Whether some policy may touch a file of this scope: when none can, no file of it is
    /// read and its tree need not be listed.
    pub(super) fn touches_files(&self) -> bool {
        self.touches_files
    }

    /// Whether markers in this scope's files are this walk's to resolve (see `reads_markers`).
    pub(super) fn reads_markers(&self) -> bool {
        self.reads_markers
    }

    /// The repository this index is for; `None` for the local directory.
    pub(super) fn repository(&self) -> Option<&str> {
        self.repository.as_deref()
    }

    /// Every policy that applies to `rel`, in policy order: [`applies_to`] for this scope, found
    /// through the combined globs instead of trying every policy.
    pub(super) fn applicable(&self, rel: &Path) -> Vec<usize> {
        let mut out: Vec<usize> = self
            .paths
            .candidates(rel)
            .filter(|&(i, j)| self.policies[i].targets[j].matches(rel))
            .map(|(i, _)| i)
            .chain(self.every_file_policies.iter().copied())
            .collect();
        out.sort_unstable();
        out.dedup();
        out
    }

    /// The policies whose own targets name `rel` (those without targets, which cover every
    /// file, left out), in policy order: who is told when `rel` cannot be read.
    pub(super) fn targeting(&self, rel: &Path) -> Vec<usize> {
        let mut out: Vec<usize> = self
            .paths
            .candidates(rel)
            .filter(|&(i, j)| self.policies[i].targets[j].matches(rel))
            .map(|(i, _)| i)
            .collect();
        out.sort_unstable();
        out.dedup();
        out
    }

    /// Whether policy `i` applies to `rel` ([`applies_to`] for this scope).
    pub(super) fn applies(&self, i: usize, rel: &Path) -> bool {
        applies_to(&self.policies[i], self.repository.as_deref(), rel)
    }

    /// The Helm value paths of every target that covers `rel`, in policy order, then target order.
    pub(super) fn helm_paths(&self, rel: &Path) -> Vec<HelmPaths> {
        if self.helm_every_file.is_empty() && self.helm.all.is_empty() {
            return Vec::new();
        }
        let mut found: Vec<TargetRef> = self
            .helm
            .candidates(rel)
            .chain(self.helm_every_file.iter().copied())
            .collect();
        found.sort_unstable();
        found.dedup();
        found
            .into_iter()
            .map(|(i, j)| &self.policies[i].targets[j])
            .filter(|t| t.matches(rel))
            .filter_map(|t| t.helm.clone())
            .collect()
    }

    /// Policies following `image`, in policy order.
    pub(super) fn following(&self, image: &Repository) -> &[usize] {
        self.by_image.get(image).map_or(&[], Vec::as_slice)
    }

    /// Pattern policies whose pattern matches `image`, in policy order.
    pub(super) fn patterns_following(&self, image: &Repository) -> Vec<usize> {
        self.patterns
            .iter()
            .copied()
            .filter(|&i| {
                self.policies[i]
                    .pattern
                    .as_ref()
                    .is_some_and(|p| p.matches(image))
            })
            .collect()
    }

    /// Policies named `name` (in any namespace), in policy order.
    pub(super) fn named(&self, name: &str) -> &[usize] {
        self.by_name.get(name).map_or(&[], Vec::as_slice)
    }

    /// Policies with a target that calls their image `alias` in kustomizations, in policy order.
    pub(super) fn kustomize_alias(&self, alias: &str) -> &[usize] {
        self.by_kustomize_alias
            .get(alias)
            .map_or(&[], Vec::as_slice)
    }

    /// Policies with at least one Helm target, in policy order.
    pub(super) fn with_helm(&self) -> &[usize] {
        &self.with_helm
    }
}

/// Which targets matched at least one file of a scan: one flag per target of every policy (and
/// one for a policy without targets), set from the scanning threads.
pub(super) struct TargetMatches {
    /// Where each policy's flags start.
    offsets: Vec<usize>,
    flags: Vec<AtomicBool>,
}

impl TargetMatches {
    pub(super) fn new(policies: &[ImagePolicy]) -> Self {
        let mut offsets = Vec::with_capacity(policies.len());
        let mut total = 0;
        for p in policies {
            offsets.push(total);
            total += p.targets.len().max(1);
        }
        TargetMatches {
            offsets,
            flags: (0..total).map(|_| AtomicBool::new(false)).collect(),
        }
    }

    pub(super) fn mark(&self, policy: usize, target: usize) {
        self.flags[self.offsets[policy] + target].store(true, Ordering::Relaxed);
    }

    pub(super) fn is_marked(&self, policy: usize, target: usize) -> bool {
        self.flags[self.offsets[policy] + target].load(Ordering::Relaxed)
    }
}

/// A policy without targets covers every file of the local directory; otherwise a target must
/// name this scope's repository (or none, for the local directory) and match the path.
pub(super) fn applies_to(policy: &ImagePolicy, repository: Option<&str>, rel: &Path) -> bool {
    if policy.targets.is_empty() {
        return repository.is_none();
    }
    policy
        .targets
        .iter()
        .any(|t| t.repository.as_deref() == repository && t.matches(rel))
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::policy::{Strategy, Target};

    /// A target built the way policy files build theirs (`escape: false`) or the way Argo CD
    /// Applications do, from literal file names (`escape: true`).
    fn target(paths: &[&str], repository: Option<&str>, escape: bool, helm: bool) -> Target {
        let mut builder = GlobSetBuilder::new();
        for p in paths {
            let glob = if escape {
                globset::escape(p)
            } else {
                p.to_string()
            };
            builder.add(
                GlobBuilder::new(&glob)
                    .literal_separator(true)
                    .build()
                    .unwrap(),
            );
        }
        Target {
            paths: paths.iter().map(|p| p.to_string()).collect(),
            path_set: builder.build().unwrap(),
            literal: false,
            repository: repository.map(str::to_string),
            helm: helm.then(|| HelmPaths {
                tag: Some(format!("{}.tag", paths.first().unwrap_or(&"all"))),
                ..HelmPaths::default()
            }),
            kustomize_image_name: None,
            source: None,
        }
    }

    fn policy(image: &str, targets: Vec<Target>) -> ImagePolicy {
        let mut p = ImagePolicy::adhoc(
            image,
            Strategy::Semver {
                range: None,
                prerelease: false,
            },
        )
        .unwrap();
        p.targets = targets;
        p
    }

    const PATHS: &[&str] = &[
        "apps/a/deploy.yaml",
        "apps/b/deploy.yaml",
        "apps/[x].yaml",
        "apps/x.yaml",
        "top.yaml",
        "charts/c/values.yaml",
        "other/deep/file.yaml",
        "apps/b/c.yaml",
    ];

    #[test]
    fn any_applies_agrees_with_trying_every_policy() {
        let sets = [
            vec![policy(
                "a",
                vec![target(&["apps/a/**"], None, false, false)],
            )],
            vec![policy("a", vec![target(&["*.yaml"], None, false, false)])],
            // Literal file names, as Argo CD Applications name theirs: no glob at all.
            vec![
                policy(
                    "a",
                    vec![Target::files(
                        vec!["apps/[x].yaml".into(), "apps/b/c.yaml".into()],
                        Some("infra".into()),
                    )],
                ),
                policy("b", vec![target(&["apps/**"], Some("infra"), false, false)]),
            ],
            // A literal file name with glob characters, escaped into a glob.
            vec![policy(
                "a",
                vec![target(&["apps/[x].yaml"], Some("infra"), true, false)],
            )],
            vec![policy(
                "a",
                vec![target(&["apps/[x].yaml"], None, false, false)],
            )],
            vec![policy("a", vec![target(&[], Some("infra"), false, false)])],
            vec![policy("a", Vec::new())],
            vec![
                policy(
                    "a",
                    vec![target(&["apps/b/**"], Some("infra"), false, false)],
                ),
                policy("b", vec![target(&["charts/**"], None, false, true)]),
                policy("c", vec![target(&["nowhere/**"], None, false, false)]),
            ],
            Vec::new(),
        ];
        for policies in &sets {
            for repository in [None, Some("infra"), Some("elsewhere")] {
                let index = PolicyIndex::new(policies, repository);
                for path in PATHS {
                    let rel = Path::new(path);
                    let expected = policies.iter().any(|p| applies_to(p, repository, rel));
                    let every: Vec<usize> = (0..policies.len())
                        .filter(|&i| applies_to(&policies[i], repository, rel))
                        .collect();
                    assert_eq!(index.applicable(rel), every, "{path} in {repository:?}");
                    let matches = TargetMatches::new(policies);
                    assert_eq!(
                        index.applies_marking(rel, &matches),
                        expected,
                        "{path} in {repository:?}"
                    );
                    // Every target of this scope that matches is marked, and no other.
                    for (i, p) in policies.iter().enumerate() {
                        for (j, t) in p.targets.iter().enumerate() {
                            let want = !t.paths.is_empty()
                                && t.repository.as_deref() == repository
                                && t.matches(rel);
                            assert_eq!(matches.is_marked(i, j), want, "{path} target {i}.{j}");
                        }
                    }
                    assert_eq!(
                        index.any_applies(rel),
                        expected,
                        "{path} in {repository:?} with {:?}",
                        policies
                            .iter()
                            .map(|p| &p.targets)
                            .map(|t| t.iter().map(|t| &t.paths).collect::<Vec<_>>())
                            .collect::<Vec<_>>()
                    );
                }
            }
        }
    }

    #[test]
    fn helm_paths_come_in_policy_then_target_order() {
        let policies = vec![
            policy(
                "a",
                vec![
                    target(&["charts/**"], None, false, true),
                    target(&["charts/c/*.yaml"], None, false, true),
                ],
            ),
            policy("b", vec![target(&[], None, false, true)]),
            policy(
                "c",
                vec![target(&["charts/**"], Some("infra"), false, true)],
            ),
            policy("d", vec![target(&["apps/**"], None, false, true)]),
        ];
        let index = PolicyIndex::new(&policies, None);
        let rel = Path::new("charts/c/values.yaml");
        let expected: Vec<HelmPaths> = policies
            .iter()
            .flat_map(|p| p.targets.iter())
            .filter(|t| t.repository.is_none() && t.matches(rel))
            .filter_map(|t| t.helm.clone())
            .collect();
        assert_eq!(expected.len(), 3);
        assert_eq!(index.helm_paths(rel), expected);
    }
}
