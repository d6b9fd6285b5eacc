//! A selected entry's settings turned into what the annotation reader reads: written as the
//! annotations they stand for, read with [`annotations::parse`], and what it cannot honour
//! named by the resource's field.

use std::collections::BTreeMap;

use super::super::annotations::{self, AppAnnotations, IMAGE_UPDATER_PREFIX, SkippedAnnotation};
use super::super::application::Application;
use super::{
    ApplicationRef, CommonUpdateSettings, ImageConfig, ImageUpdater, KIND, PullRequest,
    WriteBackConfig,
};

/// A setting's value and the field it was read from (the most specific level that set it).
#[derive(Debug, Clone)]
struct Field<T> {
    value: T,
    path: String,
}

/// `commonUpdateSettings` after inheritance.
#[derive(Debug, Clone, Default)]
struct Common {
    update_strategy: Option<Field<String>>,
    force_update: Option<Field<bool>>,
    allow_tags: Option<Field<String>>,
    ignore_tags: Option<Field<Vec<String>>>,
    pull_secret: Option<Field<String>>,
    platforms: Option<Field<Vec<String>>>,
}

impl Common {
    /// Layers `more` (set at `path`) over what is already there, field by field.
    fn layer(&mut self, more: Option<&CommonUpdateSettings>, path: &str) {
        let Some(m) = more else { return };
        let field = |name: &str| format!("{path}.commonUpdateSettings.{name}");
        set(
            &mut self.update_strategy,
            &m.update_strategy,
            field("updateStrategy"),
        );
        set(
            &mut self.force_update,
            &m.force_update,
            field("forceUpdate"),
        );
        set(&mut self.allow_tags, &m.allow_tags, field("allowTags"));
        set(&mut self.ignore_tags, &m.ignore_tags, field("ignoreTags"));
        set(&mut self.pull_secret, &m.pull_secret, field("pullSecret"));
        set(&mut self.platforms, &m.platforms, field("platforms"));
    }
}

fn set<T: Clone>(slot: &mut Option<Field<T>>, value: &Option<T>, path: String) {
    if let Some(v) = value {
        *slot = Some(Field {
            value: v.clone(),
            path,
        });
    }
}

/// `writeBackConfig` after inheritance: `method` and each `gitConfig` field from the most
/// specific level that sets it; a `pullRequest` replaces the inherited one whole, because its
/// providers exclude each other.
#[derive(Debug, Clone, Default)]
struct WriteBack {
    method: Option<Field<String>>,
    repository: Option<Field<String>>,
    branch: Option<Field<String>>,
    target: Option<Field<String>>,
    pull_request: Option<Field<PullRequest>>,
}

impl WriteBack {
    fn layer(&mut self, more: Option<&WriteBackConfig>, path: &str) {
        let Some(m) = more else { return };
        set(
            &mut self.method,
            &m.method,
            format!("{path}.writeBackConfig.method"),
        );
        if let Some(g) = &m.git_config {
            let field = |name: &str| format!("{path}.writeBackConfig.gitConfig.{name}");
            set(&mut self.repository, &g.repository, field("repository"));
            set(&mut self.branch, &g.branch, field("branch"));
            set(
                &mut self.target,
                &g.write_back_target,
                field("writeBackTarget"),
            );
            set(
                &mut self.pull_request,
                &g.pull_request,
                field("pullRequest"),
            );
        }
    }
}

/// The settings one `applicationRefs` entry gives one Application.
pub(super) fn settings_for(
    app: &Application,
    u: &ImageUpdater,
    entry: &ApplicationRef,
    index: usize,
) -> AppAnnotations {
    let at = Entry {
        u,
        entry,
        resource: format!("{KIND} {}", u.id()),
        ref_path: format!("spec.applicationRefs[{index}]"),
    };
    if entry.use_annotations == Some(true) {
        return at.annotated(app);
    }

    // What the entry says, written as the annotations it stands for.
    let mut written = Written::default();
    let mut skipped: Vec<SkippedAnnotation> = Vec::new();
    let mut list = Vec::new();
    let mut list_fields = Vec::new();
    for (i, image) in entry.images.iter().enumerate() {
        let path = format!("{}.images[{i}]", at.ref_path);
        if let Some(refused) = at.refused(i, &path) {
            skipped.push(refused);
            continue;
        }
        list.push(format!("{}={}", image.alias, image.image_name.trim()));
        list_fields.push(format!("{path}.imageName"));
        at.put_image(&mut written, image, &path);
    }
    if list.is_empty() {
        let mut settings = AppAnnotations::default();
        if entry.images.is_empty() {
            skipped.push(SkippedAnnotation {
                key: format!("{}: {}.images", at.resource, at.ref_path),
                reason: "no images and no useAnnotations: nothing to update".to_string(),
            });
        }
        settings.skipped = skipped;
        return settings;
    }
    // One entry per image; `parse` splits at commas outside constraints.
    let image_list = list.join(", ");
    written.put(
        "image-list".into(),
        image_list,
        &format!("{}.images", at.ref_path),
    );
    let (pull_request, pull_request_error) = at.put_write_back(&mut written);

    let mut settings = annotations::parse(&written.annotations).unwrap_or_default();
    at.name_by_field(&mut settings, &written.fields, &list, &list_fields);
    settings.skipped.extend(skipped);
    if let Some(e) = pull_request_error {
        // Pushing straight to the branch instead would skip the review the user asked for.
        settings.images.clear();
        settings.skipped.push(e);
    }
    settings.skipped.sort_by(|a, b| a.key.cmp(&b.key));
    settings.pull_request = pull_request;
    settings
}

/// The entry being read, and how reports name it.
struct Entry<'a> {
    u: &'a ImageUpdater,
    entry: &'a ApplicationRef,
    /// `ImageUpdater <namespace>/<name>`.
    resource: String,
    /// `spec.applicationRefs[<index>]`.
    ref_path: String,
}

/// The annotations an entry's settings stand for, and `fields`: each annotation's field, for
/// reports.
#[derive(Default)]
struct Written {
    annotations: BTreeMap<String, String>,
    fields: BTreeMap<String, String>,
}

impl Written {
    fn put(&mut self, key: String, value: String, field: &str) {
        let key = format!("{IMAGE_UPDATER_PREFIX}{key}");
        self.fields.insert(key.clone(), field.to_string());
        self.annotations.insert(key, value);
    }
}

impl Entry<'_> {
    /// `useAnnotations: true`: the Application's annotations are its configuration.
    fn annotated(&self, app: &Application) -> AppAnnotations {
        let entry = self.entry;
        // Upstream ignores every other setting of the entry then; so does tagpilot, openly.
        let mut settings = annotations::parse(&app.metadata.annotations).unwrap_or_default();
        if entry.images.is_empty()
            && entry.common_update_settings.is_none()
            && entry.write_back_config.is_none()
        {
            return settings;
        }
        settings.skipped.push(SkippedAnnotation {
            key: format!("{}: {}", self.resource, self.ref_path),
            reason: "useAnnotations is true, so images, commonUpdateSettings and \
                     writeBackConfig of this entry are ignored, as Image Updater does"
                .to_string(),
        });
        settings
    }

    /// Why image `i` (at `path`) is not updated at all, if it is not: an alias that is not
    /// valid or is used twice, verification asked for, manifest targets tagpilot cannot write.
    fn refused(&self, i: usize, path: &str) -> Option<SkippedAnnotation> {
        let (u, entry, resource, ref_path) = (self.u, self.entry, &self.resource, &self.ref_path);
        let image = &entry.images[i];
        let alias = &image.alias;
        if !valid_alias(alias) {
            return Some(SkippedAnnotation {
                key: format!("{resource}: {path}.alias"),
                reason: format!(
                    "{alias:?} is not a valid alias (letters, digits, `-`, `.`, `_`, starting \
                     with a letter or digit); the image is not updated"
                ),
            });
        }
        if entry.images[..i].iter().any(|o| &o.alias == alias) {
            return Some(SkippedAnnotation {
                key: format!("{resource}: {path}.alias"),
                reason: format!(
                    "alias {alias:?} is used twice in this entry; the second is not updated"
                ),
            });
        }
        // Cosign verification is not done yet: updating without it would deploy what the
        // user asked to be refused, so such an image is held instead.
        let verification = [
            (
                u.spec.images_verification.as_ref(),
                "spec.imagesVerification".to_string(),
            ),
            (
                entry.images_verification.as_ref(),
                format!("{ref_path}.imagesVerification"),
            ),
            (
                image.images_verification.as_ref(),
                format!("{path}.imagesVerification"),
            ),
        ]
        .into_iter()
        .filter_map(|(v, p)| v.map(|v| (v.enabled.unwrap_or(true), p)))
        .next_back();
        if let Some((true, field)) = verification {
            return Some(SkippedAnnotation {
                key: format!("{resource}: {field}"),
                reason: format!(
                    "image {alias:?}: tagpilot does not verify cosign signatures yet, so the \
                     image is not updated rather than updated unverified"
                ),
            });
        }
        if let Some(t) = &image.manifest_targets {
            let set = [t.helm.is_some(), t.kustomize.is_some(), t.plugin.is_some()];
            if set.iter().filter(|s| **s).count() > 1 {
                return Some(SkippedAnnotation {
                    key: format!("{resource}: {path}.manifestTargets"),
                    reason: format!(
                        "image {alias:?}: only one of helm, kustomize and plugin may be set; the \
                         image is not updated"
                    ),
                });
            }
            if t.plugin.is_some() {
                return Some(SkippedAnnotation {
                    key: format!("{resource}: {path}.manifestTargets.plugin"),
                    reason: format!(
                        "image {alias:?}: Config Management Plugin targets are not supported by \
                         tagpilot yet; the image is not updated"
                    ),
                });
            }
        }
        None
    }

    /// Writes image's (at `path`) inherited `commonUpdateSettings` and its manifest targets.
    fn put_image(&self, written: &mut Written, image: &ImageConfig, path: &str) {
        let alias = &image.alias;
        let mut common = Common::default();
        common.layer(self.u.spec.common_update_settings.as_ref(), "spec");
        common.layer(self.entry.common_update_settings.as_ref(), &self.ref_path);
        common.layer(image.common_update_settings.as_ref(), path);
        if let Some(f) = &common.update_strategy {
            written.put(format!("{alias}.update-strategy"), f.value.clone(), &f.path);
        }
        if let Some(f) = &common.force_update {
            written.put(
                format!("{alias}.force-update"),
                f.value.to_string(),
                &f.path,
            );
        }
        if let Some(f) = &common.allow_tags {
            written.put(format!("{alias}.allow-tags"), f.value.clone(), &f.path);
        }
        if let Some(f) = &common.ignore_tags {
            written.put(format!("{alias}.ignore-tags"), f.value.join(","), &f.path);
        }
        if let Some(f) = &common.pull_secret {
            written.put(format!("{alias}.pull-secret"), f.value.clone(), &f.path);
        }
        if let Some(f) = &common.platforms {
            written.put(format!("{alias}.platforms"), f.value.join(","), &f.path);
        }
        let Some(t) = &image.manifest_targets else {
            return;
        };
        let targets = format!("{path}.manifestTargets");
        if let Some(h) = &t.helm {
            // `spec` wins over `name` and `tag`, as upstream.
            match &h.spec {
                Some(spec) => written.put(
                    format!("{alias}.helm.image-spec"),
                    spec.clone(),
                    &format!("{targets}.helm.spec"),
                ),
                None => {
                    if let Some(n) = &h.name {
                        written.put(
                            format!("{alias}.helm.image-name"),
                            n.clone(),
                            &format!("{targets}.helm.name"),
                        );
                    }
                    if let Some(t) = &h.tag {
                        written.put(
                            format!("{alias}.helm.image-tag"),
                            t.clone(),
                            &format!("{targets}.helm.tag"),
                        );
                    }
                }
            }
        }
        if let Some(k) = t.kustomize.as_ref().and_then(|k| k.name.as_ref()) {
            written.put(
                format!("{alias}.kustomize.image-name"),
                k.clone(),
                &format!("{targets}.kustomize.name"),
            );
        }
    }

    /// Writes the inherited `writeBackConfig`; its pull request's settings, or why they cannot
    /// be honoured, are returned (they have no annotation).
    fn put_write_back(
        &self,
        written: &mut Written,
    ) -> (
        Option<annotations::PullRequestSettings>,
        Option<SkippedAnnotation>,
    ) {
        let (u, resource) = (self.u, &self.resource);
        let mut wb = WriteBack::default();
        wb.layer(u.spec.write_back_config.as_ref(), "spec");
        wb.layer(self.entry.write_back_config.as_ref(), &self.ref_path);
        let mut pull_request = None;
        let mut pull_request_error = None;
        if let Some(f) = &wb.method {
            let method = f.value.trim();
            // `git:secret:<name>` names a Secret in the resource's namespace.
            let method = match method.strip_prefix("git:secret:") {
                Some(name) if !name.contains('/') => {
                    format!("git:secret:{}/{name}", u.namespace())
                }
                _ => method.to_string(),
            };
            let is_git = method == "git" || method.starts_with("git:");
            written.put("write-back-method".into(), method, &f.path);
            if is_git {
                if let Some(g) = &wb.repository {
                    written.put("git-repository".into(), g.value.clone(), &g.path);
                }
                if let Some(g) = &wb.branch {
                    written.put("git-branch".into(), g.value.clone(), &g.path);
                }
                if let Some(g) = &wb.target {
                    written.put("write-back-target".into(), g.value.clone(), &g.path);
                }
                if let Some(p) = &wb.pull_request {
                    match pull_request_settings(&p.value, wb.branch.as_ref()) {
                        Ok(settings) => {
                            pull_request = Some(annotations::PullRequestSettings {
                                field: format!("{resource}: {}", p.path),
                                ..settings
                            })
                        }
                        Err(reason) => {
                            pull_request_error = Some(SkippedAnnotation {
                                key: format!("{resource}: {}", p.path),
                                reason,
                            })
                        }
                    }
                }
            }
        }
        (pull_request, pull_request_error)
    }

    /// Names what the reader skipped or could not read by the resource field it was written
    /// in (`list`, `list_fields`: each `image-list` entry and its field).
    fn name_by_field(
        &self,
        settings: &mut AppAnnotations,
        fields: &BTreeMap<String, String>,
        list: &[String],
        list_fields: &[String],
    ) {
        let (resource, ref_path) = (&self.resource, &self.ref_path);
        let list_key = format!("{IMAGE_UPDATER_PREFIX}image-list");
        for s in &mut settings.skipped {
            let field = if s.key == list_key {
                // Which image: the reason starts with its alias where it concerns one.
                list.iter()
                    .zip(list_fields)
                    .find(|(entry, _)| {
                        entry
                            .split_once('=')
                            .is_some_and(|(alias, _)| s.reason.starts_with(&format!("{alias}:")))
                    })
                    .map(|(_, f)| f.clone())
                    .unwrap_or_else(|| format!("{ref_path}.images"))
            } else {
                fields.get(&s.key).cloned().unwrap_or_else(|| s.key.clone())
            };
            s.key = format!("{resource}: {field}");
        }
        // An unreadable setting is named by the field it was written in.
        for image in &mut settings.images {
            let image_field = list
                .iter()
                .zip(list_fields)
                .find(|(entry, _)| {
                    entry
                        .split_once('=')
                        .is_some_and(|(alias, _)| alias == image.alias)
                })
                .map(|(_, f)| f.clone());
            for u in &mut image.unreadable {
                let field = if u.key == list_key {
                    image_field
                        .clone()
                        .unwrap_or_else(|| format!("{ref_path}.images"))
                } else {
                    fields.get(&u.key).cloned().unwrap_or_else(|| u.key.clone())
                };
                u.key = format!("{resource}: {field}");
            }
        }
    }
}

/// `^[a-zA-Z0-9][a-zA-Z0-9-._]*$`, as the CRD validates it.
pub(super) fn valid_alias(alias: &str) -> bool {
    let mut chars = alias.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphanumeric())
        && chars.all(|c| c.is_ascii_alphanumeric() || "-._".contains(c))
}

fn pull_request_settings(
    p: &PullRequest,
    branch: Option<&Field<String>>,
) -> Result<annotations::PullRequestSettings, String> {
    let provider = match (&p.github, &p.gitlab) {
        (Some(_), None) => annotations::PullRequestProvider::GitHub,
        (None, Some(_)) => annotations::PullRequestProvider::GitLab,
        (a, b) => {
            return Err(format!(
                "exactly one provider (github or gitlab) must be set, got {}; the \
                 Application is not updated",
                usize::from(a.is_some()) + usize::from(b.is_some())
            ));
        }
    };
    if let Some(b) = branch
        && b.value.contains(':')
    {
        return Err(format!(
            "{}: {:?} has the base:target form, which pull requests do not take (name only \
             the base branch); the Application is not updated",
            b.path, b.value
        ));
    }
    let mut labels: Vec<String> = Vec::new();
    for l in p.labels.iter().map(|l| l.trim()).filter(|l| !l.is_empty()) {
        if !labels.iter().any(|x| x == l) {
            labels.push(l.to_string());
        }
    }
    Ok(annotations::PullRequestSettings {
        provider,
        labels,
        field: String::new(),
    })
}
