//! `migrate-annotations`: the `ImageUpdater` resource that configures an Application as its
//! annotations do.

use serde_json::{Map, Value, json};

use crate::application::Application;
use crate::argocd::read::annotations;
use crate::argocd::read::image_updater::{API_VERSION, DEFAULT_NAMESPACE, KIND, valid_alias};
use crate::argocd::read::settings::{self, UpdateStrategy};

/// The `ImageUpdater` resource that configures `app` as its annotations do, for teams moving to
/// Image Updater 1.x-style configuration: one `applicationRefs` entry naming the Application
/// exactly. Annotations that did not carry over are listed in a comment above it. `None` when
/// the Application has no `image-list`.
pub fn migrate(app: &Application) -> Option<String> {
    let a = annotations::parse(&app.metadata.annotations)?;
    let mut used: Vec<String> = Vec::new();
    let images: Vec<Value> = a
        .images
        .iter()
        .filter_map(|image| image_entry(image, &mut used))
        .collect();
    let write_back = write_back_config(&a);
    let mut entry = Map::new();
    entry.insert("namePattern".into(), json!(app.metadata.name));
    if !write_back.is_empty() {
        entry.insert("writeBackConfig".into(), Value::Object(write_back));
    }
    entry.insert("images".into(), Value::Array(images));
    let namespace = app
        .metadata
        .namespace
        .clone()
        .unwrap_or_else(|| DEFAULT_NAMESPACE.to_string());
    let resource = json!({
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": app.metadata.name, "namespace": namespace},
        "spec": {"applicationRefs": [Value::Object(entry)]},
    });
    let mut out = format!(
        "# From the annotations of Application {namespace}/{}",
        app.metadata.name
    );
    if !app.origin.is_empty() {
        out.push_str(&format!(" ({})", app.origin));
    }
    out.push('\n');
    for s in &a.skipped {
        out.push_str(&format!("# not carried over: {}: {}\n", s.key, s.reason));
    }
    for image in &a.images {
        for u in &image.unreadable {
            out.push_str(&format!(
                "# not carried over: image {:?} is left out: {u}\n",
                image.alias
            ));
        }
    }
    out.push_str(&serde_saphyr::to_string(&resource).expect("a JSON value serialises as YAML"));
    Some(out)
}

/// One `images` entry for `image`, its alias made unique among `used`; `None` for an image
/// with a setting that cannot be read.
fn image_entry(image: &settings::ImageSettings, used: &mut Vec<String>) -> Option<Value> {
    if image.is_blocked() {
        // Written without the setting it could not read, the image would be updated more
        // widely than its annotations allow.
        return None;
    }
    let mut alias = if image.has_alias {
        image.alias.clone()
    } else {
        // An alias is required: the image's last path segment, made valid and unique.
        let base: String = image
            .image
            .rsplit('/')
            .next()
            .unwrap_or("image")
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || "-._".contains(c) {
                    c
                } else {
                    '-'
                }
            })
            .collect();
        if valid_alias(&base) {
            base
        } else {
            format!("image{base}")
        }
    };
    let mut n = 2;
    let first = alias.clone();
    while used.contains(&alias) {
        alias = format!("{first}-{n}");
        n += 1;
    }
    used.push(alias.clone());
    let mut entry = Map::new();
    entry.insert("alias".into(), json!(alias));
    let name = match &image.constraint {
        Some(c) => format!("{}:{c}", image.image),
        None => image.image.clone(),
    };
    entry.insert("imageName".into(), json!(name));
    let mut common = Map::new();
    let strategy = match image.strategy {
        UpdateStrategy::Semver => None,
        UpdateStrategy::NewestBuild => Some("newest-build"),
        UpdateStrategy::Alphabetical => Some("alphabetical"),
        UpdateStrategy::Digest => Some("digest"),
    };
    if let Some(s) = strategy {
        common.insert("updateStrategy".into(), json!(s));
    }
    if let Some(re) = &image.allow_tags {
        common.insert("allowTags".into(), json!(format!("regexp:{re}")));
    }
    if !image.ignore_tags.is_empty() {
        common.insert("ignoreTags".into(), json!(image.ignore_tags));
    }
    if !image.platforms.is_empty() {
        let platforms: Vec<String> = image.platforms.iter().map(ToString::to_string).collect();
        common.insert("platforms".into(), json!(platforms));
    }
    if let Some(p) = &image.pull_secret {
        common.insert("pullSecret".into(), json!(pull_secret_text(p)));
    }
    if image.force_update {
        common.insert("forceUpdate".into(), json!(true));
    }
    if !common.is_empty() {
        entry.insert("commonUpdateSettings".into(), Value::Object(common));
    }
    let mut targets = Map::new();
    if image.helm.is_set() {
        let mut helm = Map::new();
        for (k, v) in [
            ("name", &image.helm.name),
            ("tag", &image.helm.tag),
            ("spec", &image.helm.spec),
        ] {
            if let Some(v) = v {
                helm.insert(k.into(), json!(v));
            }
        }
        targets.insert("helm".into(), Value::Object(helm));
    }
    if let Some(k) = &image.kustomize_image_name {
        targets.insert("kustomize".into(), json!({ "name": k }));
    }
    if !targets.is_empty() {
        entry.insert("manifestTargets".into(), Value::Object(targets));
    }
    Some(Value::Object(entry))
}

/// `writeBackConfig` for the app's write-back annotations (empty when they set nothing).
fn write_back_config(a: &settings::AppSettings) -> Map<String, Value> {
    let mut write_back = Map::new();
    if a.write_back_explicit {
        let method = match &a.write_back {
            settings::WriteBackMethod::Argocd => "argocd".to_string(),
            settings::WriteBackMethod::Git(settings::GitCredentials::Configured) => {
                "git".to_string()
            }
            settings::WriteBackMethod::Git(settings::GitCredentials::RepoCreds) => {
                "git:repocreds".to_string()
            }
            settings::WriteBackMethod::Git(settings::GitCredentials::Secret {
                namespace,
                name,
            }) => format!("git:secret:{namespace}/{name}"),
        };
        write_back.insert("method".into(), json!(method));
    }
    let mut git = Map::new();
    if let Some(r) = &a.git_repository {
        git.insert("repository".into(), json!(r));
    }
    if let Some(b) = &a.git_branch {
        let text = match (&b.base, &b.target) {
            (Some(base), Some(t)) => format!("{base}:{t}"),
            (Some(base), None) => base.clone(),
            (None, Some(t)) => format!(":{t}"),
            (None, None) => String::new(),
        };
        git.insert("branch".into(), json!(text));
    }
    if let Some(t) = &a.write_back_target {
        let text = match t {
            settings::WriteBackTarget::Kustomization(None) => "kustomization".to_string(),
            settings::WriteBackTarget::Kustomization(Some(d)) => format!("kustomization:{d}"),
            settings::WriteBackTarget::HelmValues(None) => "helmvalues".to_string(),
            settings::WriteBackTarget::HelmValues(Some(f)) => format!("helmvalues:{f}"),
        };
        git.insert("writeBackTarget".into(), json!(text));
    }
    if !git.is_empty() {
        write_back.insert("gitConfig".into(), Value::Object(git));
    }
    write_back
}

fn pull_secret_text(p: &settings::PullSecret) -> String {
    match p {
        settings::PullSecret::PullSecret { namespace, name } => {
            format!("pullsecret:{namespace}/{name}")
        }
        settings::PullSecret::Secret {
            namespace,
            name,
            field,
        } => format!("secret:{namespace}/{name}#{field}"),
        settings::PullSecret::Env(var) => format!("env:{var}"),
        settings::PullSecret::Ext(script) => format!("ext:{script}"),
    }
}
