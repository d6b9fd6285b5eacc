//! The one reader, reached both ways: an annotation and the `ImageUpdater` field for the same
//! setting must give the same typed settings, and the same problem when the value cannot be
//! read (only the key that names it differs).

use std::collections::BTreeMap;
use std::path::Path;

use super::*;
use crate::application::Application;
use crate::application::Origin;
use crate::argocd::read::annotations::{self, IMAGE_UPDATER_PREFIX};
use crate::argocd::read::image_updater::{read_documents, select};

const RESOURCE: &str = "ImageUpdater argocd/u";

/// The settings of Application `shop` with `image-list: api=<image>` and `api.<key>: <value>`.
fn from_annotations(image: &str, pairs: &[(&str, &str)]) -> AppSettings {
    let mut annotated: BTreeMap<String, String> = pairs
        .iter()
        .map(|(k, v)| (format!("{IMAGE_UPDATER_PREFIX}{k}"), v.to_string()))
        .collect();
    annotated.insert(
        format!("{IMAGE_UPDATER_PREFIX}image-list"),
        format!("api={image}"),
    );
    annotations::parse(&annotated).expect("an image-list")
}

/// The settings an `ImageUpdater` resource gives Application `shop`: image `api` named
/// `image`, with `settings` as its `commonUpdateSettings` and `write_back` as the entry's
/// `writeBackConfig` (both YAML flow mappings).
fn from_resource(image: &str, settings: &str, write_back: &str) -> AppSettings {
    let yaml = format!(
        "apiVersion: argocd-image-updater.argoproj.io/v1alpha1
kind: ImageUpdater
metadata: {{name: u, namespace: argocd}}
spec:
  applicationRefs:
    - namePattern: shop
      writeBackConfig: {write_back}
      images:
        - alias: api
          imageName: {image:?}
          commonUpdateSettings: {settings}
"
    );
    let updaters = read_documents(Path::new("u.yaml"), &yaml).expect("a valid resource");
    let mut app = Application::default();
    app.metadata.name = "shop".to_string();
    app.metadata.namespace = Some("argocd".to_string());
    let selection = select(vec![(app, Origin::Git)], &updaters);
    assert!(selection.problems.is_empty(), "{:?}", selection.problems);
    let selected = selection.apps.into_iter().next().expect("one Application");
    selected.settings.expect("selected")
}

fn field(path: &str) -> String {
    format!("{RESOURCE}: spec.applicationRefs[0].{path}")
}

#[test]
fn a_setting_as_an_annotation_or_a_resource_field_is_the_same_typed_setting() {
    // (image, annotations, the resource's commonUpdateSettings)
    type Case<'a> = (&'a str, &'a [(&'a str, &'a str)], &'a str);
    let cases: &[Case<'_>] = &[
        ("r.example/api:~1.2", &[], "{}"),
        (
            "r.example/api",
            &[("api.update-strategy", "Newest-Build")],
            "{updateStrategy: Newest-Build}",
        ),
        (
            "r.example/api:v1",
            &[("api.update-strategy", "digest")],
            "{updateStrategy: digest}",
        ),
        (
            "r.example/api",
            &[("api.allow-tags", "regexp:^v\\d+$")],
            r#"{allowTags: "regexp:^v\\d+$"}"#,
        ),
        (
            "r.example/api",
            &[("api.ignore-tags", "*-rc*, 1.3.0")],
            r#"{ignoreTags: ["*-rc*", " 1.3.0 "]}"#,
        ),
        (
            "r.example/api",
            &[("api.platforms", "linux/arm64, linux/amd64")],
            "{platforms: [linux/arm64, linux/amd64]}",
        ),
        (
            "r.example/api",
            &[("api.pull-secret", "pullsecret:argocd/regcred")],
            "{pullSecret: 'pullsecret:argocd/regcred'}",
        ),
        (
            "r.example/api",
            &[("api.force-update", "true")],
            "{forceUpdate: true}",
        ),
    ];
    for (image, pairs, settings) in cases {
        let a = from_annotations(image, pairs);
        let r = from_resource(image, settings, "{}");
        assert_eq!(
            format!("{:?}", a.images),
            format!("{:?}", r.images),
            "{pairs:?}"
        );
        assert!(a.skipped.is_empty() && r.skipped.is_empty(), "{pairs:?}");
    }
    // The app-wide settings: git write-back with a branch template and a target.
    let a = from_annotations(
        "r.example/api",
        &[
            ("write-back-method", "git:secret:argocd/creds"),
            ("git-branch", "main:updates-{{.SHA256}}"),
            ("write-back-target", "helmvalues:values.yaml"),
            ("git-repository", "https://git.example/m.git"),
        ],
    );
    // A resource's `git:secret:<name>` names a Secret in its own namespace.
    let r = from_resource(
        "r.example/api",
        "{}",
        "{method: 'git:secret:creds', gitConfig: {branch: 'main:updates-{{.SHA256}}', \
         writeBackTarget: 'helmvalues:values.yaml', repository: 'https://git.example/m.git'}}",
    );
    assert_eq!(a.write_back, r.write_back);
    assert!(a.write_back_explicit && r.write_back_explicit);
    assert_eq!(a.write_back_target, r.write_back_target);
    assert_eq!(a.git_repository, r.git_repository);
    let branch = |s: &AppSettings| s.git_branch.clone().map(|b| (b.base, b.target));
    assert_eq!(branch(&a), branch(&r));
    // Each named by where it was written, for reports about the template.
    assert_eq!(
        a.git_branch.map(|b| b.key),
        Some(format!("{IMAGE_UPDATER_PREFIX}git-branch"))
    );
    assert_eq!(
        r.git_branch.map(|b| b.key),
        Some(field("writeBackConfig.gitConfig.branch"))
    );
}

#[test]
fn an_unreadable_value_is_the_same_problem_either_way() {
    // (image, annotation, its value, the resource's commonUpdateSettings, the field)
    let cases: &[(&str, &str, &str, &str, &str)] = &[
        (
            "r.example/api",
            "api.update-strategy",
            "fastest",
            "{updateStrategy: fastest}",
            "images[0].commonUpdateSettings.updateStrategy",
        ),
        (
            "r.example/api",
            "api.allow-tags",
            "regexp:^v(",
            "{allowTags: 'regexp:^v('}",
            "images[0].commonUpdateSettings.allowTags",
        ),
        (
            "r.example/api",
            "api.ignore-tags",
            "dev, [z-a]",
            "{ignoreTags: [dev, '[z-a]']}",
            "images[0].commonUpdateSettings.ignoreTags",
        ),
        (
            "r.example/api",
            "api.platforms",
            "linux",
            "{platforms: [linux]}",
            "images[0].commonUpdateSettings.platforms",
        ),
        (
            "r.example/api:~>1.x.y",
            "api.update-strategy",
            "semver",
            "{updateStrategy: semver}",
            "images[0].imageName",
        ),
    ];
    for (image, key, value, settings, path) in cases {
        let a = from_annotations(image, &[(key, value)]);
        let r = from_resource(image, settings, "{}");
        let (a, r) = (&a.images[0], &r.images[0]);
        assert!(a.is_blocked() && r.is_blocked(), "{key}");
        let (a, r) = (&a.unreadable[0], &r.unreadable[0]);
        assert_eq!((&a.value, &a.reason), (&r.value, &r.reason), "{key}");
        let annotation_key = if path.ends_with("imageName") {
            format!("{IMAGE_UPDATER_PREFIX}image-list")
        } else {
            format!("{IMAGE_UPDATER_PREFIX}{key}")
        };
        assert_eq!((&a.key, &r.key), (&annotation_key, &field(path)));
    }
    // Settings that are skipped, not blocking: the same reason under each key.
    let a = from_annotations(
        "r.example/api",
        &[
            ("api.pull-secret", "vault:x"),
            ("write-back-method", "gitt"),
        ],
    );
    let r = from_resource("r.example/api", "{pullSecret: 'vault:x'}", "{method: gitt}");
    let reasons =
        |s: &AppSettings| -> Vec<String> { s.skipped.iter().map(|s| s.reason.clone()).collect() };
    assert_eq!(reasons(&a), reasons(&r));
    let keys: Vec<&str> = r.skipped.iter().map(|s| s.key.as_str()).collect();
    assert_eq!(keys, [field("images[0].commonUpdateSettings.pullSecret")]);
    // A write-back method that cannot be read holds the Application, under each key alike.
    let (a, r) = (&a.unreadable[0], &r.unreadable[0]);
    assert_eq!((&a.value, &a.reason), (&r.value, &r.reason));
    assert_eq!(
        (a.key.as_str(), r.key.as_str()),
        (
            format!("{IMAGE_UPDATER_PREFIX}write-back-method").as_str(),
            field("writeBackConfig.method").as_str()
        )
    );
}

/// The reader checks what it is given, whatever wrote it, and names each problem by the key
/// it was given under.
#[test]
fn the_reader_names_each_problem_by_the_key_it_was_given_under() {
    let repository = repository("r.example/api", "list").unwrap();
    let mut image = ImageInput::new(
        Some("api".to_string()),
        Given::new("list", "r.example/api".to_string()),
        repository,
        Some(">=1.0".to_string()),
    );
    image.strategy = Some(Given::new("strategy", "digest".to_string()));
    image.min_age = Some(Given::new("age", "1d".to_string()));
    image.ignore_tags = Some(Given::new(
        "globs",
        Listed {
            items: vec!["ok*".to_string(), "[z-a]".to_string()],
            written: "as written".to_string(),
        },
    ));
    let settings = read(SettingsInput {
        images: vec![image],
        write_back: Some(Given::new("method", "git:secret:creds".to_string())),
        secret_namespace: Some("team".to_string()),
        ..SettingsInput::default()
    });
    let image = &settings.images[0];
    let unreadable: Vec<(&str, &str)> = image
        .unreadable
        .iter()
        .map(|u| (u.key.as_str(), u.value.as_str()))
        .collect();
    // The glob, then the digest strategy's tag, which must be one a registry can hold.
    assert_eq!(unreadable, [("globs", "as written"), ("list", ">=1.0")]);
    assert_eq!(image.ignore_tags, ["ok*"]);
    // The digest strategy has no newer tag to wait for.
    assert_eq!(settings.skipped.len(), 1);
    assert_eq!(settings.skipped[0].key, "age");
    assert_eq!(
        settings.write_back,
        WriteBackMethod::Git(GitCredentials::Secret {
            namespace: "team".to_string(),
            name: "creds".to_string()
        })
    );
    // Without a namespace to fall back on, the Secret must name its own.
    let settings = read(SettingsInput {
        write_back: Some(Given::new("method", "git:secret:creds".to_string())),
        ..SettingsInput::default()
    });
    assert_eq!(settings.write_back, WriteBackMethod::Argocd);
    assert_eq!(settings.unreadable[0].key, "method");
}

/// A write-back method or target that cannot be read never changes where the changes go: it
/// is unreadable, which holds the Application, never skipped to write elsewhere (Image
/// Updater's fallback to `argocd` and `.argocd-source-<app>.yaml`).
#[test]
fn a_write_back_method_or_target_that_cannot_be_read_is_unreadable_not_skipped() {
    let settings = read(SettingsInput {
        write_back: Some(Given::new("method", "gti".to_string())),
        write_back_target: Some(Given::new("target", "helmvalue:values.yaml".to_string())),
        ..SettingsInput::default()
    });
    assert!(settings.skipped.is_empty(), "{:?}", settings.skipped);
    assert_eq!(settings.write_back_target, None);
    let shown: Vec<String> = settings
        .unreadable
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(
        shown,
        [
            "method `gti` cannot be read: expected argocd, git, git:repocreds or \
             git:secret:<ns>/<name>",
            "target `helmvalue:values.yaml` cannot be read: expected kustomization[:<dir>] or \
             helmvalues[:<file>]",
        ]
    );
}

/// Issue 18: a resource's settings are read from its typed fields; none is written out as an
/// annotation and parsed back.
#[test]
fn resource_settings_are_never_written_as_annotations() {
    let source = include_str!("../image_updater/settings.rs");
    for written in [
        "IMAGE_UPDATER_PREFIX",
        "TAGPILOT_PREFIX",
        "image-list",
        ".join(\",\")",
    ] {
        assert!(!source.contains(written), "{written}");
    }
    // `useAnnotations: true` reads the Application's own annotations, and only there.
    assert_eq!(source.matches("annotations::parse(").count(), 1);
}

/// Issue 28: a typo in the write-back target, in an annotation or in a resource's
/// `writeBackTarget`, is named with its value and never falls back to another place.
#[test]
fn a_write_back_target_typo_is_unreadable_in_annotations_and_resources_alike() {
    let a = from_annotations(
        "r.example/api",
        &[
            ("write-back-method", "git"),
            ("write-back-target", "helmvalue:values.yaml"),
        ],
    );
    let r = from_resource(
        "r.example/api",
        "{}",
        "{method: git, gitConfig: {writeBackTarget: 'helmvalue:values.yaml'}}",
    );
    for (settings, key) in [
        (&a, format!("{IMAGE_UPDATER_PREFIX}write-back-target")),
        (&r, field("writeBackConfig.gitConfig.writeBackTarget")),
    ] {
        assert_eq!(settings.write_back_target, None);
        let named: Vec<(&str, &str)> = settings
            .unreadable
            .iter()
            .map(|u| (u.key.as_str(), u.value.as_str()))
            .collect();
        assert_eq!(named, [(key.as_str(), "helmvalue:values.yaml")]);
    }
}
