//! The `ImageUpdater` resource `migrate-annotations` writes configures the Application as its
//! annotations did: read back through the same selection and reader.

use std::path::Path;

use super::resource::migrate;
use crate::application::Application;
use crate::argocd::Origin;
use crate::argocd::read::annotations::{self, IMAGE_UPDATER_PREFIX};
use crate::argocd::read::image_updater::{Selected, read_documents, select};
use crate::argocd::read::settings::AppSettings;

fn app(name: &str, labels: &[(&str, &str)], annotations: &[(&str, &str)]) -> Application {
    Application::in_argocd(name, labels, annotations)
}

fn select_one(a: Application, yaml: &str) -> Selected {
    let updaters = read_documents(Path::new("updaters.yaml"), yaml).expect("valid resources");
    let s = select(vec![(a, Origin::Git)], &updaters);
    assert!(s.problems.is_empty(), "{:?}", s.problems);
    s.apps.into_iter().next().unwrap()
}

#[test]
fn a_migrated_resource_configures_the_application_as_its_annotations_did() {
    let iu = IMAGE_UPDATER_PREFIX;
    let pairs = [
        (
            "image-list",
            "api=registry.example/shop/api:>=1.2, <2.0, registry.example/shop/worker, web=nginx:~1.26",
        ),
        ("api.allow-tags", "regexp:^1\\."),
        ("api.ignore-tags", "*-rc*"),
        ("api.pull-secret", "pullsecret:argocd/regcred"),
        ("api.kustomize.image-name", "shop-api"),
        ("api.update-strategy", "semver"),
        ("update-strategy", "newest-build"),
        ("web.update-strategy", "semver"),
        ("web.platforms", "linux/arm64"),
        ("web.helm.image-name", "web.image.repository"),
        ("web.helm.image-tag", "web.image.tag"),
        ("web.force-update", "true"),
        ("write-back-method", "git:secret:argocd/git-creds"),
        ("git-branch", "main:image-updater-{{.SHA256}}"),
        ("write-back-target", "helmvalues:/charts/values.yaml"),
        ("git-repository", "https://git.example/m.git"),
        ("git-commit-user", "someone"),
    ];
    let annotations: Vec<(String, &str)> = pairs
        .iter()
        .map(|(k, v)| (format!("{iu}{k}"), *v))
        .collect();
    let refs: Vec<(&str, &str)> = annotations.iter().map(|(k, v)| (k.as_str(), *v)).collect();
    let annotated = app("shop", &[], &refs);
    let yaml = migrate(&annotated).unwrap();
    assert!(
        yaml.contains("# not carried over: argocd-image-updater.argoproj.io/git-commit-user"),
        "{yaml}"
    );

    let from_resource = select_one(app("shop", &[], &[]), &yaml).settings.unwrap();
    let from_annotations = annotations::parse(&annotated.metadata.annotations).unwrap();
    // Aliases: the unaliased worker gets one of its own; everything else is the same.
    let strip = |a: &AppSettings| -> Vec<String> {
        a.images
            .iter()
            .map(|i| {
                let mut i = i.clone();
                i.alias = String::new();
                i.has_alias = false;
                format!("{i:?}")
            })
            .collect()
    };
    pretty_assertions::assert_eq!(strip(&from_resource), strip(&from_annotations));
    assert_eq!(from_resource.images[1].alias, "worker");
    assert_eq!(from_resource.write_back, from_annotations.write_back);
    assert_eq!(
        from_resource.write_back_target,
        from_annotations.write_back_target
    );
    assert_eq!(
        from_resource.git_repository,
        from_annotations.git_repository
    );
    let branch = |a: &AppSettings| {
        a.git_branch
            .as_ref()
            .map(|b| (b.base.clone(), b.target.clone()))
    };
    assert_eq!(branch(&from_resource), branch(&from_annotations));
    assert!(
        from_resource.skipped.is_empty(),
        "{:?}",
        from_resource.skipped
    );
}

/// An image whose filter cannot be read is left out of the migrated resource, with the
/// reason in a comment: written without that filter, it would be updated more widely.
#[test]
fn a_migrated_resource_leaves_out_an_image_whose_filter_cannot_be_read() {
    let iu = IMAGE_UPDATER_PREFIX;
    let list = format!("{iu}image-list");
    let allow = format!("{iu}api.allow-tags");
    let annotated = app(
        "shop",
        &[],
        &[
            (list.as_str(), "api=r.example/api, web=r.example/web"),
            (allow.as_str(), "regexp:^v("),
        ],
    );
    let yaml = migrate(&annotated).unwrap();
    assert!(
        yaml.contains(&format!(
            "# not carried over: image \"api\" is left out: {allow} `regexp:^v(` cannot be read"
        )),
        "{yaml}"
    );
    let from_resource = select_one(app("shop", &[], &[]), &yaml).settings.unwrap();
    let aliases: Vec<&str> = from_resource
        .images
        .iter()
        .map(|i| i.alias.as_str())
        .collect();
    assert_eq!(aliases, ["web"]);
}
