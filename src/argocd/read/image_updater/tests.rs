use super::select::go_glob;
use super::*;
use crate::application::Application;
use crate::argocd::Origin;
use crate::argocd::read::annotations::{self, IMAGE_UPDATER_PREFIX};
use crate::argocd::read::settings::{self, UpdateStrategy, WriteBackMethod};

fn app(name: &str, labels: &[(&str, &str)], annotations: &[(&str, &str)]) -> Application {
    Application::in_argocd(name, labels, annotations)
}

fn updaters(yaml: &str) -> Vec<ImageUpdater> {
    read_documents(Path::new("updaters.yaml"), yaml).expect("valid resources")
}

fn select_one(a: Application, yaml: &str) -> Selected {
    let s = select(vec![(a, Origin::Git)], &updaters(yaml));
    assert!(s.problems.is_empty(), "{:?}", s.problems);
    s.apps.into_iter().next().unwrap()
}

const SAMPLE: &str = r#"
apiVersion: argocd-image-updater.argoproj.io/v1alpha1
kind: ImageUpdater
metadata:
  name: updater
  namespace: argocd
spec:
  commonUpdateSettings:
    updateStrategy: semver
    ignoreTags: [latest]
  writeBackConfig:
    method: git
    gitConfig:
      branch: main
  applicationRefs:
    - namePattern: "*"
      images:
        - alias: any
          imageName: ghcr.io/acme/any:1.x
    - namePattern: "web-*"
      commonUpdateSettings:
        updateStrategy: newest-build
      images:
        - alias: web
          imageName: ghcr.io/acme/web
          commonUpdateSettings:
            platforms: [linux/arm64]
          manifestTargets:
            helm:
              name: web.image.repository
              tag: web.image.tag
    - namePattern: "web-prod"
      images:
        - alias: prod
          imageName: ghcr.io/acme/web:~1.4
    - namePattern: "web-*"
      labelSelectors:
        matchLabels:
          tier: canary
      images:
        - alias: canary
          imageName: ghcr.io/acme/web:>=2.0.0-0
"#;

#[test]
fn the_most_specific_entry_wins() {
    let pick = |a: Application| {
        let s = select_one(a, SAMPLE);
        s.settings.unwrap().images[0].alias.clone()
    };
    // An exact name beats every pattern.
    assert_eq!(pick(app("web-prod", &[("tier", "canary")], &[])), "prod");
    // A label selector beats more literal characters.
    assert_eq!(pick(app("web-dev", &[("tier", "canary")], &[])), "canary");
    // More literal characters beat `*`.
    assert_eq!(pick(app("web-dev", &[], &[])), "web");
    assert_eq!(pick(app("api", &[], &[])), "any");
}

#[test]
fn settings_inherit_from_spec_to_entry_to_image() {
    let s = select_one(app("web-dev", &[], &[]), SAMPLE);
    assert_eq!(
        s.configured_by.map(|c| c.to_string()).as_deref(),
        Some(r#"ImageUpdater argocd/updater (applicationRefs[1], namePattern "web-*")"#)
    );
    let settings = s.settings.unwrap();
    let image = &settings.images[0];
    // The entry's strategy overrides the spec's; the spec's ignoreTags is inherited; the
    // image adds platforms.
    assert_eq!(image.strategy, UpdateStrategy::NewestBuild);
    assert_eq!(image.ignore_tags, ["latest"]);
    assert_eq!(image.platforms.len(), 1);
    assert_eq!(image.helm.name.as_deref(), Some("web.image.repository"));
    assert_eq!(image.helm.tag.as_deref(), Some("web.image.tag"));
    assert!(matches!(settings.write_back, WriteBackMethod::Git(_)));
    assert_eq!(
        settings.git_branch.as_ref().and_then(|b| b.base.clone()),
        Some("main".to_string())
    );
}

#[test]
fn a_resource_and_the_equivalent_annotations_say_the_same() {
    let yaml = r#"
apiVersion: argocd-image-updater.argoproj.io/v1alpha1
kind: ImageUpdater
metadata: {name: u, namespace: argocd}
spec:
  writeBackConfig:
    method: git
    gitConfig: {branch: main, writeBackTarget: "kustomization:../base"}
  applicationRefs:
    - namePattern: shop
      images:
        - alias: api
          imageName: registry.example/shop/api:>=1.2, <2.0
          commonUpdateSettings:
            allowTags: "regexp:^1\\."
            ignoreTags: ["*-rc*", "1.3.0"]
            forceUpdate: true
          manifestTargets:
            kustomize: {name: shop-api}
"#;
    let from_resource = select_one(app("shop", &[], &[]), yaml).settings.unwrap();
    let iu = IMAGE_UPDATER_PREFIX;
    let annotated: BTreeMap<String, String> = [
        ("image-list", "api=registry.example/shop/api:>=1.2, <2.0"),
        ("api.allow-tags", "regexp:^1\\."),
        ("api.ignore-tags", "*-rc*, 1.3.0"),
        ("api.force-update", "true"),
        ("api.kustomize.image-name", "shop-api"),
        ("write-back-method", "git"),
        ("git-branch", "main"),
        ("write-back-target", "kustomization:../base"),
    ]
    .into_iter()
    .map(|(k, v)| (format!("{iu}{k}"), v.to_string()))
    .collect();
    let from_annotations = annotations::parse(&annotated).unwrap();
    assert_eq!(
        format!("{:?}", from_resource.images),
        format!("{:?}", from_annotations.images)
    );
    assert_eq!(from_resource.write_back, from_annotations.write_back);
    assert_eq!(
        from_resource.write_back_target,
        from_annotations.write_back_target
    );
    assert!(
        from_resource.skipped.is_empty(),
        "{:?}",
        from_resource.skipped
    );
}

#[test]
fn use_annotations_reads_the_application_and_ignores_the_entrys_settings() {
    let yaml = r#"
apiVersion: argocd-image-updater.argoproj.io/v1alpha1
kind: ImageUpdater
metadata: {name: u, namespace: argocd}
spec:
  applicationRefs:
    - namePattern: "*"
      useAnnotations: true
      labelSelectors:
        matchExpressions:
          - {key: team, operator: In, values: [shop, pay]}
      images:
        - {alias: ignored, imageName: nginx}
"#;
    let annotated = app(
        "shop",
        &[("team", "shop")],
        &[(
            "argocd-image-updater.argoproj.io/image-list",
            "web=nginx:1.x",
        )],
    );
    let settings = select_one(annotated, yaml).settings.unwrap();
    assert_eq!(settings.images.len(), 1);
    assert_eq!(settings.images[0].alias, "web");
    assert!(
        settings.skipped[0]
            .reason
            .contains("useAnnotations is true"),
        "{:?}",
        settings.skipped
    );
    // The selector leaves other teams out.
    let other = app(
        "shop",
        &[("team", "ops")],
        &[("argocd-image-updater.argoproj.io/image-list", "nginx")],
    );
    let settings = select_one(other, yaml).settings.unwrap();
    assert!(settings.images.is_empty());
    assert!(settings.skipped[0].reason.contains("none in namespace"));
}

#[test]
fn without_resources_annotations_alone_count() {
    let annotated = app(
        "shop",
        &[],
        &[("argocd-image-updater.argoproj.io/image-list", "nginx")],
    );
    let s = select(vec![(annotated, Origin::Git)], &[]);
    assert_eq!(s.apps[0].settings.as_ref().unwrap().images.len(), 1);
    assert!(s.apps[0].configured_by.is_none());
}

#[test]
fn two_resources_selecting_one_application_are_a_conflict() {
    let yaml = r#"
apiVersion: argocd-image-updater.argoproj.io/v1alpha1
kind: ImageUpdater
metadata: {name: a, namespace: argocd}
spec:
  applicationRefs: [{namePattern: "shop*", images: [{alias: x, imageName: nginx}]}]
---
apiVersion: argocd-image-updater.argoproj.io/v1alpha1
kind: ImageUpdater
metadata: {name: b, namespace: argocd}
spec:
  applicationRefs: [{namePattern: "*", images: [{alias: y, imageName: nginx}]}]
---
apiVersion: argocd-image-updater.argoproj.io/v1alpha1
kind: ImageUpdater
metadata: {name: c, namespace: elsewhere}
spec:
  applicationRefs: [{namePattern: "*", images: [{alias: z, imageName: nginx}]}]
"#;
    let s = select_one(app("shop", &[], &[]), yaml);
    assert!(s.settings.unwrap().images.is_empty());
    assert_eq!(s.problems.len(), 1);
    let p = &s.problems[0];
    assert!(p.contains("argocd/a") && p.contains("argocd/b"), "{p}");
    // The resource in another namespace selects nothing here.
    assert!(!p.contains("elsewhere"), "{p}");
}

#[test]
fn what_tagpilot_cannot_honour_is_reported_by_resource_and_field() {
    let yaml = r#"
apiVersion: argocd-image-updater.argoproj.io/v1alpha1
kind: ImageUpdater
metadata: {name: u, namespace: argocd}
spec:
  imagesVerification:
    cosignKey: {secretName: cosign, key: cosign.pub}
  applicationRefs:
    - namePattern: shop
      images:
        - alias: signed
          imageName: nginx
        - alias: unsigned
          imageName: nginx
          imagesVerification: {enabled: false}
        - alias: plugin
          imageName: nginx
          imagesVerification: {enabled: false}
          manifestTargets:
            plugin: {spec: IMAGE}
        - alias: strategy
          imageName: nginx
          imagesVerification: {enabled: false}
          commonUpdateSettings: {updateStrategy: fastest}
"#;
    let settings = select_one(app("shop", &[], &[]), yaml).settings.unwrap();
    let aliases: Vec<&str> = settings.images.iter().map(|i| i.alias.as_str()).collect();
    // Issue 22: `imagesVerification` is honoured: the image is updated only to tags signed with
    // the key of the most specific `cosignKey`, read from its Secret in the resource's namespace.
    assert_eq!(aliases, ["signed", "unsigned", "strategy"]);
    let key = settings.images[0].cosign_key.as_ref().expect("cosign key");
    assert_eq!(
        (
            key.namespace.as_str(),
            key.secret.as_str(),
            key.key.as_str()
        ),
        ("argocd", "cosign", "cosign.pub")
    );
    assert_eq!(
        key.field,
        "ImageUpdater argocd/u: spec.imagesVerification.cosignKey"
    );
    assert!(settings.images[1].cosign_key.is_none());
    let keys: Vec<&str> = settings.skipped.iter().map(|s| s.key.as_str()).collect();
    assert_eq!(
        keys,
        ["ImageUpdater argocd/u: spec.applicationRefs[0].images[2].manifestTargets.plugin"]
    );
    // An unknown strategy blocks its image (issue 17), named by the field it was written in.
    let strategy = &settings.images[2];
    assert!(strategy.is_blocked());
    assert_eq!(
        strategy.unreadable[0].to_string(),
        "ImageUpdater argocd/u: spec.applicationRefs[0].images[3].commonUpdateSettings.updateStrategy \
             `fastest` cannot be read: not an update strategy (semver, newest-build, latest, \
             alphabetical, name, digest)"
    );
}

/// Issue 17, "Filters fail closed", for resources: each unreadable filter, range or
/// strategy, inherited or the image's own, blocks that image under its field; the other
/// images of the entry are updated.
#[test]
fn an_unreadable_setting_in_a_resource_blocks_its_image_under_its_field() {
    let yaml = r#"
apiVersion: argocd-image-updater.argoproj.io/v1alpha1
kind: ImageUpdater
metadata: {name: u, namespace: argocd}
spec:
  commonUpdateSettings: {allowTags: "regexp:^v("}
  applicationRefs:
    - namePattern: shop
      images:
        - {alias: inherits, imageName: r.example/a}
        - alias: ok
          imageName: r.example/b
          commonUpdateSettings: {allowTags: "RegExp:^v1"}
        - alias: globs
          imageName: r.example/c
          commonUpdateSettings: {allowTags: any, ignoreTags: ["dev", "[z-a]"]}
        - alias: platform
          imageName: r.example/d
          commonUpdateSettings: {allowTags: any, platforms: [linux]}
        - alias: range
          imageName: "r.example/e:~>1.x.y"
          commonUpdateSettings: {allowTags: any}
"#;
    let settings = select_one(app("shop", &[], &[]), yaml).settings.unwrap();
    let blocked: Vec<(&str, Vec<String>)> = settings
        .images
        .iter()
        .map(|i| {
            let fields = i.unreadable.iter().map(|u| u.key.clone()).collect();
            (i.alias.as_str(), fields)
        })
        .collect();
    let r = |f: &str| format!("ImageUpdater argocd/u: {f}");
    assert_eq!(
        blocked,
        [
            ("inherits", vec![r("spec.commonUpdateSettings.allowTags")]),
            ("ok", vec![]),
            (
                "globs",
                vec![r(
                    "spec.applicationRefs[0].images[2].commonUpdateSettings.ignoreTags"
                )]
            ),
            (
                "platform",
                vec![r(
                    "spec.applicationRefs[0].images[3].commonUpdateSettings.platforms"
                )]
            ),
            (
                "range",
                vec![r("spec.applicationRefs[0].images[4].imageName")]
            ),
        ]
    );
    assert_eq!(settings.images[1].allow_tags.as_deref(), Some("^v1"));
}

#[test]
fn the_removed_spec_namespace_is_read_with_a_warning() {
    let yaml = r#"
apiVersion: argocd-image-updater.argoproj.io/v1alpha1
kind: ImageUpdater
metadata: {name: u, namespace: argocd}
spec:
  namespace: apps
  applicationRefs: [{namePattern: shop, images: [{alias: x, imageName: nginx}]}]
"#;
    let s = select(vec![(app("shop", &[], &[]), Origin::Git)], &updaters(yaml));
    assert_eq!(s.warnings.len(), 1);
    assert!(
        s.warnings[0].contains("spec.namespace"),
        "{}",
        s.warnings[0]
    );
    assert_eq!(s.apps[0].settings.as_ref().unwrap().images.len(), 1);
}

#[test]
fn a_misspelt_field_is_an_error_with_its_place() {
    let yaml = "apiVersion: argocd-image-updater.argoproj.io/v1alpha1\nkind: ImageUpdater\nmetadata: {name: u}\nspec:\n  applicationRefs:\n    - namePatern: shop\n";
    let e = read_documents(Path::new("u.yaml"), yaml).unwrap_err();
    assert!(e.message.contains("u.yaml:6"), "{}", e.message);
    assert!(e.message.contains("namePatern"), "{}", e.message);
}

#[test]
fn pull_requests_need_exactly_one_provider() {
    let yaml = r#"
apiVersion: argocd-image-updater.argoproj.io/v1alpha1
kind: ImageUpdater
metadata: {name: u, namespace: argocd}
spec:
  writeBackConfig:
    method: git
    gitConfig:
      branch: main
      pullRequest: {github: {}, labels: [deps, " deps ", ""]}
  applicationRefs:
    - namePattern: shop
      images: [{alias: x, imageName: nginx}]
    - namePattern: both
      writeBackConfig:
        gitConfig:
          pullRequest: {github: {}, gitlab: {}}
      images: [{alias: x, imageName: nginx}]
"#;
    let shop = select_one(app("shop", &[], &[]), yaml).settings.unwrap();
    let pr = shop.pull_request.unwrap();
    assert_eq!(pr.provider, settings::PullRequestProvider::GitHub);
    assert_eq!(pr.labels, ["deps"]);
    let both = select_one(app("both", &[], &[]), yaml).settings.unwrap();
    assert!(both.images.is_empty(), "nothing is pushed instead of a PR");
    assert!(both.skipped[0].reason.contains("exactly one provider"));
}

#[test]
fn go_glob_patterns() {
    let m = |p: &str, n: &str| go_glob(p).unwrap().is_match(n);
    assert!(m("app-[0-9]*", "app-1x"));
    assert!(m("app-[^0-9]", "app-x"));
    assert!(!m("app-[^0-9]", "app-1"));
    assert!(m("a?c", "abc"));
    assert!(!m("a*", "a/b"));
}

/// Issue 22: verification switched on with no key at any level cannot verify anything, so the
/// image is held rather than updated unverified.
#[test]
fn verification_without_a_cosign_key_holds_the_image() {
    let yaml = r#"
apiVersion: argocd-image-updater.argoproj.io/v1alpha1
kind: ImageUpdater
metadata: {name: u, namespace: argocd}
spec:
  applicationRefs:
    - namePattern: shop
      imagesVerification: {enabled: true}
      images:
        - {alias: keyless, imageName: nginx}
"#;
    let settings = select_one(app("shop", &[], &[]), yaml).settings.unwrap();
    assert!(settings.images.is_empty());
    assert_eq!(
        settings.skipped[0].key,
        "ImageUpdater argocd/u: spec.applicationRefs[0].images[0].imagesVerification"
    );
    assert!(
        settings.skipped[0]
            .reason
            .contains("no level names a cosignKey")
    );
}
