//! `images:` entries added to a kustomization for images it does not name, as Image Updater
//! adds them (`write-back-target: kustomization`), in phases: the kustomization read, each
//! image decided from where the source's manifests have it, the entry added or held, one group
//! per kustomization.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::change::ChangeGroup;
use crate::files::Files;
use crate::git::RepositoryConfig;
use crate::plan::{self, Change};
use crate::registry::Registry;

use super::super::read::settings::ImageSettings;
use super::super::resolve::{self, SourceKind};
use super::in_place::current_in_source;
use super::outcome::{OverridePlace, Overrides, Record, decide_override};
use super::override_file::OverrideFile;
use super::{AppPlanner, ImageReason, ImageStatus, Missing, RepositoryPlan};
use crate::error_chain::Failure;

impl<R: Registry> AppPlanner<'_, R> {
    /// Images a kustomization's `images:` does not name, for `write-back-target:
    /// kustomization`: Image Updater adds an entry for them (its `imagesFilter` in
    /// `pkg/argocd/git.go`), so they are decided from where the source's manifests have them and
    /// added ([`crate::manifest::add_kustomize_image`]). One group per kustomization, written
    /// whole; held when the walks also edit that file this cycle, so neither write hides the
    /// other (the next cycle adds it).
    pub(super) async fn plan_added_entries(
        &self,
        missing: Vec<Missing>,
        repository: &RepositoryConfig,
        files: &dyn Files,
        out: &mut RepositoryPlan,
    ) {
        let mut by_file: BTreeMap<String, Vec<Missing>> = BTreeMap::new();
        for m in missing {
            by_file.entry(m.file.clone()).or_default().push(m);
        }
        for (file, entries) in by_file {
            // 1. The kustomization as the tree has it.
            let busy = out
                .in_place
                .iter()
                .any(|p| p.files.iter().any(|f| f.path == Path::new(&file)));
            let text = match files.read(Path::new(&file)).map(String::from_utf8) {
                Ok(Ok(t)) => t,
                Ok(Err(_)) => {
                    out.app_problems.push((
                        entries[0].entry.app,
                        format!("cannot read {file}: not UTF-8 text"),
                    ));
                    continue;
                }
                Err(e) => {
                    out.app_problems.push((
                        entries[0].entry.app,
                        format!("cannot read {file}: {}", crate::error_chain::chain(&e)),
                    ));
                    continue;
                }
            };
            let mut kustomization = Kustomization {
                file,
                text,
                busy,
                changes: Vec::new(),
                key: None,
            };
            for m in entries {
                // 2. Each missing image decided from where the source's manifests have it.
                let mut added = OverrideFile::default();
                let record = self
                    .decide_added_entry(&m, &kustomization.file, &mut added, repository, files, out)
                    .await;
                // 3. Added to the kustomization, or held.
                match record {
                    Some(Record::Change(c)) => {
                        self.add_entry(&mut kustomization, &m, &added, c, repository, out)
                    }
                    Some(Record::Hold(h)) => out.plan.holds.push(h),
                    Some(Record::Problem(p)) => out.plan.problems.push(p),
                    Some(Record::UpToDate) => out.plan.up_to_date += 1,
                    None => {}
                }
            }
            // 4. One group per kustomization, written whole.
            let Kustomization {
                file,
                text,
                changes,
                key,
                ..
            } = kustomization;
            if let Some(key) = key {
                out.override_groups.push(ChangeGroup {
                    applications: Vec::new(),
                    key,
                    files: BTreeMap::from([(PathBuf::from(&file), text)]),
                    changes: changes.clone(),
                });
                out.plan.changes.extend(changes);
            }
        }
    }

    /// Decides image `m`, which kustomization `file` does not name, into `added`.
    async fn decide_added_entry(
        &self,
        m: &Missing,
        file: &str,
        added: &mut OverrideFile,
        repository: &RepositoryConfig,
        files: &dyn Files,
        out: &mut RepositoryPlan,
    ) -> Option<Record> {
        let app = &self.resolved.apps[m.entry.app];
        let image = &app.annotations.images[m.entry.image];
        let current = current_in_source(files, &m.entry.root, image, &m.policy)
            .or_else(|| current_in_source(files, &m.entry.dir, image, &m.policy));
        let place = OverridePlace {
            repository: Some(&repository.name),
            file,
            field: "kustomize images (entry added)",
        };
        let outcome = &mut out.images[m.outcome];
        outcome.file = Some(file.to_string());
        let mut deciding = Overrides {
            file: added,
            kind: SourceKind::Kustomize,
            registry: self.registry,
            holds: self.holds,
            skipped: Vec::new(),
        };
        let record = decide_override(
            &mut deciding,
            image,
            &m.policy,
            current,
            || {
                format!(
                    "no reference to {} in {file} `images:` nor in the manifests under {}; set \
                     force-update to add an entry anyway",
                    m.policy.image,
                    resolve::display(&m.entry.root)
                )
            },
            &place,
            outcome,
        )
        .await;
        out.plan.skipped_tags.append(&mut deciding.skipped);
        record
    }

    /// Adds image `m`'s entry, as decided in `added` (change `c`), to `kustomization`; held
    /// when the walks edit that file too, or when the entry cannot be added.
    fn add_entry(
        &self,
        kustomization: &mut Kustomization,
        m: &Missing,
        added: &OverrideFile,
        mut c: Change,
        repository: &RepositoryConfig,
        out: &mut RepositoryPlan,
    ) {
        let file = &kustomization.file;
        let hold = |reason: plan::HoldReason, out: &mut RepositoryPlan| {
            let outcome = &mut out.images[m.outcome];
            outcome.status = ImageStatus::Held;
            outcome.to = None;
            outcome.reason = Some(ImageReason::Held(reason.clone()));
            out.plan.holds.push(plan::Hold {
                repository: Some(repository.name.clone()),
                policy: m.policy.name.clone(),
                file: file.clone(),
                line: 0,
                current: c.from.clone(),
                reason,
            });
        };
        if kustomization.busy {
            hold(
                plan::HoldReason::KustomizationBusy {
                    file: file.clone(),
                    image: m.policy.image.to_string(),
                },
                out,
            );
            return;
        }
        let app = &self.resolved.apps[m.entry.app];
        let image = &app.annotations.images[m.entry.image];
        let (tag, digest) = added
            .current(SourceKind::Kustomize, image, &m.policy)
            .unwrap_or_default();
        let entry = kustomize_entry(image, tag, digest);
        let text = &kustomization.text;
        match crate::manifest::add_kustomize_image(Path::new(file), text, &entry) {
            Ok(updated) => {
                c.line = first_difference(text, &updated);
                kustomization.text = updated;
                kustomization
                    .key
                    .get_or_insert_with(|| app.app.metadata.name.clone());
                kustomization.changes.push(c);
            }
            Err(e) => hold(plan::HoldReason::EntryNotAdded(Failure::new(e)), out),
        }
    }
}

/// A kustomization getting `images:` entries: its text as entries are added, whether the walks
/// edit it too (`busy`), and the changes so far, grouped under the first app's name (`key`).
struct Kustomization {
    file: String,
    text: String,
    busy: bool,
    changes: Vec<Change>,
    key: Option<String>,
}

/// The entry Image Updater adds (its `parseImageOverride`): `name` the image, or the
/// `kustomize.image-name` with the image as `newName`; then `newTag` and `digest`.
fn kustomize_entry(
    image: &ImageSettings,
    tag: Option<String>,
    digest: Option<String>,
) -> crate::manifest::KustomizeImage {
    let (name, new_name) = match &image.kustomize_image_name {
        Some(k) if *k != image.image => (k.clone(), Some(image.image.clone())),
        _ => (image.image.clone(), None),
    };
    crate::manifest::KustomizeImage {
        name,
        new_name,
        new_tag: tag,
        digest,
    }
}

/// The 1-based line where `b` first differs from `a`.
fn first_difference(a: &str, b: &str) -> usize {
    a.lines()
        .zip(b.lines())
        .position(|(x, y)| x != y)
        .unwrap_or_else(|| a.lines().count())
        + 1
}
