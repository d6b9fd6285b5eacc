//! From annotated Applications to what tagpilot plans: one [`ImagePolicy`] per image, the git
//! repositories to write (matched to `repositories:` by URL, or synthesised), and per source the
//! place its changes land.
//!
//! Pure: the remote default branch (for `targetRevision: HEAD`) is asked through a callback, so
//! this module opens no connection itself.

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;

use crate::config::applications::AllowedRepositories;
use crate::git::RepositoryConfig;
use crate::policy::{ImagePolicy, PolicyError, Strategy};

use super::read::image_updater::Selected;
use super::read::settings::{AppSettings, ImageSettings, UpdateStrategy};
use crate::application::Application;

mod units;
use units::Resolver;

/// What resolving gives, a model of its own ([`super::resolved`]) so that writing can take it
/// without importing the resolver.
pub use super::resolved::{ManagedApp, Resolved, SourceKind, Unit, UnitWrite};

use crate::application::Origin;

/// What makes two units one repository target: the URL, the branch, the branch template and
/// whether changes go through pull requests.
type RepositoryKey = (String, String, Option<String>, bool);

/// Resolves every annotated Application (the others are left out), with every repository
/// allowed: for tests of where the writes go. `default_branch` answers `targetRevision: HEAD`
/// for repositories not configured in `tagpilot.yaml` (its error, of whatever type the asker
/// has, is shown in the app's problems).
#[cfg(test)]
pub fn resolve<E: fmt::Display>(
    apps: Vec<(Application, Origin)>,
    configured: &[RepositoryConfig],
    default_branch: &dyn Fn(&str) -> Result<String, E>,
) -> Resolved {
    resolve_selected(
        super::read::image_updater::select(apps, &[]).apps,
        configured,
        &AllowedRepositories::any(),
        default_branch,
    )
}

/// Resolves Applications whose configuration is already chosen
/// ([`super::read::image_updater::select`]: from their annotations or an `ImageUpdater` resource);
/// those with none are left out. An Application writes only to `configured` repositories and
/// those `allowed` (`applications.allowRepositories`); any other is a problem of its own, and
/// no repository target is made for it, so nothing is cloned or written there.
pub fn resolve_selected<E: fmt::Display>(
    apps: Vec<Selected>,
    configured: &[RepositoryConfig],
    allowed: &AllowedRepositories,
    default_branch: &dyn Fn(&str) -> Result<String, E>,
) -> Resolved {
    let mut resolver = Resolver {
        configured,
        allowed,
        default_branch,
        repos: BTreeMap::new(),
        out: Resolved::default(),
    };
    // Sized once: thousands of Applications grown by doubling would hold up to three copies'
    // worth of memory while the vector moves.
    resolver.out.apps.reserve_exact(apps.len());
    for selected in apps {
        let Selected {
            app,
            origin,
            settings,
            configured_by,
            problems,
        } = selected;
        let Some(mut annotations) = settings else {
            continue;
        };
        annotations.images.shrink_to_fit();
        let mut problems = problems;
        // A filter, range or strategy that cannot be read blocks its image, with a problem:
        // never "no filter", which would widen what the user asked for.
        let policies = annotations
            .images
            .iter()
            .map(|image| {
                if image.is_blocked() {
                    for u in &image.unreadable {
                        problems.push(format!(
                            "image {:?}: {u}; the image is not updated",
                            image.alias
                        ));
                    }
                    return None;
                }
                match policy(&app, image) {
                    Ok(p) => Some(p),
                    Err(reason) => {
                        problems.push(format!(
                            "image {:?}: {reason}; the image is not updated",
                            image.alias
                        ));
                        None
                    }
                }
            })
            .collect();
        let mut managed = ManagedApp {
            app,
            origin,
            annotations,
            policies,
            units: Vec::new(),
            patch: false,
            git_write: false,
            problems,
            configured_by,
        };
        // A write-back method or target that cannot be read holds the whole app: writing
        // anywhere else than asked is never safe, so nothing is planned or cloned for it.
        for u in &managed.annotations.unreadable {
            managed.problems.push(format!(
                "{u}; the Application is held (tagpilot never writes elsewhere than asked)"
            ));
        }
        // Nothing to write for an app whose configuration names no image (a conflict between
        // resources, say): it is only reported.
        if !managed.annotations.images.is_empty() && managed.annotations.unreadable.is_empty() {
            resolver.plan_units(&mut managed);
        }
        managed.units.shrink_to_fit();
        resolver.out.apps.push(managed);
    }
    let mut out = resolver.out;
    out.apps.shrink_to_fit();
    out
}

/// The policy for one annotated image. Its targets are set per checkout, when the files are
/// known.
fn policy(app: &Application, image: &ImageSettings) -> Result<ImagePolicy, PolicyError> {
    let strategy = match image.strategy {
        UpdateStrategy::Semver => Strategy::semver(image.constraint.as_deref(), false)?,
        UpdateStrategy::NewestBuild => Strategy::NewestBuild,
        UpdateStrategy::Alphabetical => Strategy::Alphabetical { descending: true },
        UpdateStrategy::Digest => Strategy::Digest {
            tag: image
                .constraint
                .clone()
                .unwrap_or_else(|| "latest".to_string()),
        },
    };
    let mut p = ImagePolicy::adhoc(&image.image, strategy)?;
    p.name = policy_name(app, &image.alias);
    p.namespace = app.metadata.namespace.clone();
    if let Some(re) = &image.allow_tags {
        p.set_allow_tags(re)?;
    }
    p.set_ignore_tags(&image.ignore_tags)?;
    p.platforms = image.platforms.clone();
    // Image Updater takes a tag whose image offers any of them (its `WantsPlatform`).
    p.any_platform = true;
    p.min_age = image.min_age;
    if let Some(key) = &image.cosign_key {
        p.signatures = Some(cosign_requirement(key)?);
    }
    // Image Updater's choice, read from its `GetNewestVersionFromTags`
    // (registry-scanner/pkg/image/version.go): the current tag is not read at all, so `latest`
    // (or no tag) is replaced, and every version parses as Masterminds reads it (`1.0` is
    // 1.0.0), so a file on `1.0` moves to the highest version of any precision. Its tests
    // (`Test_LatestVersion`) are the cases of `image_updater_choices` below. Never moving
    // backwards and never leaving a variant family stay tagpilot's own rules.
    p.replace_unreadable_tags = true;
    p.keep_precision = false;
    Ok(p)
}

/// `<app>/<alias>`: what reports, commit trailers and groups call an app's image.
pub fn policy_name(app: &Application, alias: &str) -> String {
    format!("{}/{alias}", app.metadata.name)
}

/// The `.argocd-source-<app>.yaml` name Argo CD merges for this app (`<ns>_<app>` for apps
/// outside Argo CD's own namespace, "apps in any namespace").
pub fn override_file_name(app: &Application) -> String {
    app.override_file_name()
}

/// Why `write-back-method: argocd` cannot work for an app read from git.
pub fn argocd_from_git(a: &AppSettings) -> String {
    format!(
        "write-back-method {} patches the live Application through the Kubernetes API; \
         with applications.fromGit there is none to patch: set write-back-method: git",
        if a.write_back_explicit {
            "argocd"
        } else {
            "argocd (Image Updater's default)"
        }
    )
}

/// Shared with every part that matches Applications to files ([`crate::affected`]).
pub use crate::affected::normalise_url;

/// `a/./b/` → `a/b`; `.` and `/` → `""`.
pub fn clean_path(p: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for seg in p.split('/') {
        match seg {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            s => parts.push(s),
        }
    }
    parts.join("/")
}

/// A `write-back-target` argument: relative to the source path, or from the repository root
/// with a leading `/`.
fn relative_to(root: &str, arg: Option<&str>) -> String {
    match arg {
        None => root.to_string(),
        Some(a) if a.starts_with('/') => clean_path(a),
        Some(a) => clean_path(&join(root, a)),
    }
}

pub fn join(root: &str, rel: &str) -> String {
    if root.is_empty() {
        clean_path(rel)
    } else {
        clean_path(&format!("{root}/{rel}"))
    }
}

/// `root`-relative path helper for reports.
pub fn display(root: &str) -> &str {
    if root.is_empty() { "." } else { root }
}

/// Whether `path` (repository-relative) lies under `root`.
pub fn under(root: &str, path: &Path) -> bool {
    root.is_empty() || path.starts_with(root)
}

#[cfg(test)]
mod tests;

/// The signature requirement of an `ImageUpdater` resource's `imagesVerification.cosignKey`:
/// the key as read from its Secret. A key that was not read (no cluster connection, a missing
/// Secret or key, not a public key) keeps the image from being updated, never lets it through
/// unverified.
fn cosign_requirement(
    key: &crate::argocd::read::settings::CosignKey,
) -> Result<crate::config::signatures::Requirement, PolicyError> {
    use crate::config::signatures::{PublicKey, SignatureRequirement};
    let source = format!("Secret {}/{}[{}]", key.namespace, key.secret, key.key);
    let unread = |why: String| {
        let message = format!("{}: the cosign key {source} {why}", key.field);
        PolicyError::Unverifiable { message }
    };
    match &key.pem {
        Some(Ok(pem)) => Ok(std::sync::Arc::new(SignatureRequirement {
            keys: vec![PublicKey {
                pem: pem.clone(),
                source,
            }],
            secret_keys: Vec::new(),
            identities: Vec::new(),
            origin: key.field.clone(),
        })),
        Some(Err(why)) => Err(unread(why.clone())),
        None => Err(unread(
            "was not read (Secrets are read only for Applications from the cluster)".to_string(),
        )),
    }
}
