//! A selected entry's settings: its typed fields, inherited spec → entry → image, read into the
//! settings' typed input and checked by the same reader as annotations
//! ([`settings::read`]); what cannot be honoured is named by the resource's field.

use super::super::annotations;
use super::super::settings::{
    self, AppSettings, CosignKey, Given, HelmNames, ImageInput, Listed, PullRequestProvider,
    PullRequestSettings, SettingError, SettingsInput, SkippedAnnotation, image_and_constraint,
};
use super::{
    ApplicationRef, CommonUpdateSettings, ImageConfig, ImageUpdater, KIND, PullRequest,
    WriteBackConfig,
};
use crate::application::Application;

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
) -> AppSettings {
    let at = Entry {
        u,
        entry,
        resource: format!("{KIND} {}", u.id()),
        ref_path: format!("spec.applicationRefs[{index}]"),
    };
    if entry.use_annotations == Some(true) {
        return at.annotated(app);
    }

    // 1. Each image the entry names, with its inherited settings, as typed input.
    let mut input = SettingsInput::default();
    let mut listed = false;
    for (i, image) in entry.images.iter().enumerate() {
        let path = format!("{}.images[{i}]", at.ref_path);
        if let Some(refused) = at.refused(i, &path) {
            input.skipped.push(refused);
            continue;
        }
        listed = true;
        match at.image_input(image, &path) {
            Ok(image) => input.images.push(image),
            Err(skipped) => input.skipped.push(skipped),
        }
    }
    if !listed {
        let mut settings = AppSettings::default();
        if entry.images.is_empty() {
            input.skipped.push(SkippedAnnotation {
                key: format!("{}: {}.images", at.resource, at.ref_path),
                reason: "no images and no useAnnotations: nothing to update".to_string(),
            });
        }
        settings.skipped = input.skipped;
        return settings;
    }
    // 2. How the changes are written.
    let pull_request_error = at.write_back(&mut input);

    // 3. The one reader checks every value, as it does the annotations'.
    let mut settings = settings::read(input);
    // 4. The cosign key each verified image's signatures must verify with (read from its
    // Secret by the cluster loader).
    for (i, image) in entry.images.iter().enumerate() {
        let path = format!("{}.images[{i}]", at.ref_path);
        if let Verification::Enabled(Some(key)) = at.verification(i, &path)
            && let Some(s) = settings.images.iter_mut().find(|s| s.alias == image.alias)
        {
            s.cosign_key = Some(key);
        }
    }
    if let Some(e) = pull_request_error {
        // Pushing straight to the branch instead would skip the review the user asked for.
        settings.images.clear();
        settings.skipped.push(e);
        settings.skipped.sort_by(|a, b| a.key.cmp(&b.key));
    }
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

impl Entry<'_> {
    /// `useAnnotations: true`: the Application's annotations are its configuration.
    fn annotated(&self, app: &Application) -> AppSettings {
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

    /// `imagesVerification` for image `i` (at `path`): the most specific level that says
    /// `enabled` decides whether it is on (a block without `enabled` is on), and the most
    /// specific `cosignKey` is the key, as Image Updater layers spec, entry and image.
    fn verification(&self, i: usize, path: &str) -> Verification {
        let (u, entry, resource, ref_path) = (self.u, self.entry, &self.resource, &self.ref_path);
        let image = &entry.images[i];
        let levels = [
            (u.spec.images_verification.as_ref(), "spec".to_string()),
            (entry.images_verification.as_ref(), ref_path.clone()),
            (image.images_verification.as_ref(), path.to_string()),
        ];
        let enabled = levels
            .iter()
            .filter_map(|(v, _)| v.map(|v| v.enabled.unwrap_or(true)))
            .next_back();
        if enabled != Some(true) {
            return Verification::Off;
        }
        let key = levels.iter().rev().find_map(|(v, at)| {
            let k = v.and_then(|v| v.cosign_key.as_ref())?;
            Some(CosignKey {
                namespace: u.namespace().to_string(),
                secret: k.secret_name.clone(),
                key: k.key.clone(),
                field: format!("{resource}: {at}.imagesVerification.cosignKey"),
                pem: None,
            })
        });
        Verification::Enabled(key)
    }

    /// Why image `i` (at `path`) is not updated at all, if it is not: an alias that is not
    /// valid or is used twice, verification asked for, manifest targets tagpilot cannot write.
    fn refused(&self, i: usize, path: &str) -> Option<SkippedAnnotation> {
        let (entry, resource) = (self.entry, &self.resource);
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
        // Verification asked for without a key to verify with would deploy what the user
        // asked to be refused, so such an image is held instead.
        if let Verification::Enabled(None) = self.verification(i, path) {
            return Some(SkippedAnnotation {
                key: format!("{resource}: {path}.imagesVerification"),
                reason: format!(
                    "image {alias:?}: imagesVerification is enabled but no level names a \
                     cosignKey, so the image is not updated rather than updated unverified"
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

    /// Image `image` (at `path`) with its inherited `commonUpdateSettings` and its manifest
    /// targets; or why it is left out, when its `imageName` names no image.
    fn image_input(
        &self,
        image: &ImageConfig,
        path: &str,
    ) -> Result<ImageInput, SkippedAnnotation> {
        let name_key = format!("{}: {path}.imageName", self.resource);
        let written = image.image_name.trim();
        let (name, constraint) = image_and_constraint(written);
        if name.is_empty() {
            return Err(SkippedAnnotation {
                key: name_key,
                reason: SettingError::NoImageName(written.to_string()).to_string(),
            });
        }
        let repository = settings::repository(&name, &name_key)?;
        let alias = Some(image.alias.clone());
        let mut input = ImageInput::new(alias, Given::new(name_key, name), repository, constraint);

        let mut common = Common::default();
        common.layer(self.u.spec.common_update_settings.as_ref(), "spec");
        common.layer(self.entry.common_update_settings.as_ref(), &self.ref_path);
        common.layer(image.common_update_settings.as_ref(), path);
        let text = |f: &Option<Field<String>>| {
            f.as_ref()
                .map(|f| self.given(&f.path, f.value.trim().to_string()))
        };
        let list = |f: &Option<Field<Vec<String>>>| {
            f.as_ref().map(|f| {
                let items: Vec<String> = f
                    .value
                    .iter()
                    .map(|s| s.trim())
                    .filter(|s| !s.is_empty())
                    .map(str::to_string)
                    .collect();
                // Problems quote the list as a user would write it in one line.
                let written = items.join(", ");
                self.given(&f.path, Listed { items, written })
            })
        };
        input.strategy = text(&common.update_strategy);
        input.allow_tags = text(&common.allow_tags);
        input.ignore_tags = list(&common.ignore_tags);
        input.platforms = list(&common.platforms);
        input.pull_secret = text(&common.pull_secret);
        input.force_update = common.force_update.as_ref().is_some_and(|f| f.value);

        let Some(t) = &image.manifest_targets else {
            return Ok(input);
        };
        let trimmed = |v: &Option<String>| v.as_ref().map(|v| v.trim().to_string());
        if let Some(h) = &t.helm {
            // `spec` wins over `name` and `tag`, as upstream.
            input.helm = match &h.spec {
                Some(_) => HelmNames {
                    spec: trimmed(&h.spec),
                    ..HelmNames::default()
                },
                None => HelmNames {
                    name: trimmed(&h.name),
                    tag: trimmed(&h.tag),
                    spec: None,
                },
            };
        }
        input.kustomize_image_name = t.kustomize.as_ref().and_then(|k| trimmed(&k.name));
        Ok(input)
    }

    /// `value`, given at `path` of this resource.
    fn given<T>(&self, path: &str, value: T) -> Given<T> {
        Given::new(format!("{}: {path}", self.resource), value)
    }

    /// The inherited `writeBackConfig`; its pull request's settings too, or why they cannot be
    /// honoured.
    fn write_back(&self, input: &mut SettingsInput) -> Option<SkippedAnnotation> {
        let (u, resource) = (self.u, &self.resource);
        let mut wb = WriteBack::default();
        wb.layer(u.spec.write_back_config.as_ref(), "spec");
        wb.layer(self.entry.write_back_config.as_ref(), &self.ref_path);
        let f = wb.method.as_ref()?;
        let method = f.value.trim();
        let is_git = method == "git" || method.starts_with("git:");
        input.write_back = Some(self.given(&f.path, method.to_string()));
        // `git:secret:<name>` names a Secret in the resource's namespace.
        input.secret_namespace = Some(u.namespace().to_string());
        if !is_git {
            return None;
        }
        let text = |f: &Field<String>| self.given(&f.path, f.value.trim().to_string());
        input.git_repository = wb.repository.as_ref().map(|g| g.value.trim().to_string());
        input.git_branch = wb.branch.as_ref().map(text);
        input.write_back_target = wb.target.as_ref().map(text);
        let p = wb.pull_request.as_ref()?;
        match pull_request_settings(&p.value, wb.branch.as_ref()) {
            Ok(settings) => {
                input.pull_request = Some(PullRequestSettings {
                    field: format!("{resource}: {}", p.path),
                    ..settings
                });
                None
            }
            Err(reason) => Some(SkippedAnnotation {
                key: format!("{resource}: {}", p.path),
                reason,
            }),
        }
    }
}

/// `^[a-zA-Z0-9][a-zA-Z0-9-._]*$`, as the CRD validates it.
pub fn valid_alias(alias: &str) -> bool {
    let mut chars = alias.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphanumeric())
        && chars.all(|c| c.is_ascii_alphanumeric() || "-._".contains(c))
}

fn pull_request_settings(
    p: &PullRequest,
    branch: Option<&Field<String>>,
) -> Result<PullRequestSettings, String> {
    let provider = match (&p.github, &p.gitlab) {
        (Some(_), None) => PullRequestProvider::GitHub,
        (None, Some(_)) => PullRequestProvider::GitLab,
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
    Ok(PullRequestSettings {
        provider,
        labels,
        field: String::new(),
    })
}

/// What `imagesVerification` says of one image.
enum Verification {
    Off,
    /// On, with the most specific `cosignKey` if any level names one.
    Enabled(Option<CosignKey>),
}
