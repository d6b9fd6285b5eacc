use super::*;
use crate::application::read_documents;

fn app(yaml: &str) -> Application {
    read_documents(Path::new("app.yaml"), yaml)
        .unwrap()
        .remove(0)
}

fn configured(name: &str, url: &str) -> RepositoryConfig {
    serde_saphyr::from_str(&format!("name: {name}\nurl: {url}\nbranch: main\n")).unwrap()
}

const IU: &str = crate::argocd::read::annotations::IMAGE_UPDATER_PREFIX;

#[test]
fn urls_match_whatever_the_spelling() {
    let n = normalise_url;
    assert_eq!(n("https://GitHub.com/acme/m.git/"), "github.com/acme/m");
    assert_eq!(
        n("https://bot:secret@github.com/acme/m"),
        "github.com/acme/m"
    );
    assert_eq!(n("git@github.com:acme/m.git"), "github.com/acme/m");
    assert_eq!(n("ssh://git@github.com/acme/m"), "github.com/acme/m");
    assert_eq!(n("file:///srv/git/m.git"), "/srv/git/m");
}

/// Image Updater's `parseTarget` takes `helmvalues:/<path>` from the root of
/// `git-repository`, at the revision of the source with that URL (`getWriteBackBranch`).
/// Without `git-repository`, tagpilot writes to the app's only `ref` source in git; with
/// none, or several, it names the problem.
#[test]
fn a_chart_s_helmvalues_go_to_git_repository_or_the_ref_source() {
    let yaml = |extra: &str, refs: &str| {
        format!(
            "apiVersion: argoproj.io/v1alpha1\nkind: Application\nmetadata:\n  name: shop\n  annotations:\n    {IU}image-list: r.example/api\n    {IU}write-back-method: git\n    {IU}write-back-target: helmvalues:/envs/prod/values.yaml\n{extra}spec:\n  sources:\n    - {{repoURL: 'oci://r.example/charts', chart: shop, targetRevision: 4.2.0}}\n{refs}"
        )
    };
    let one_ref =
        "    - {repoURL: 'https://git.example/values.git', targetRevision: release, ref: values}\n";
    let resolved = |text: String| {
        let r = resolve(vec![(app(&text), Origin::Git)], &[], &|_| {
            Ok::<_, &str>("main".into())
        });
        let a = &r.apps[0];
        (
            a.problems.clone(),
            a.units.first().map(|u| u.write.clone()),
            r.repositories
                .first()
                .map(|c| (c.url.clone(), c.branch.clone())),
        )
    };
    let (problems, write, repo) = resolved(yaml(
        &format!("    {IU}git-repository: https://git.example/values.git\n"),
        one_ref,
    ));
    assert!(problems.is_empty(), "{problems:?}");
    assert_eq!(
        write,
        Some(UnitWrite::HelmValues {
            file: "envs/prod/values.yaml".into()
        })
    );
    assert_eq!(
        repo,
        Some(("https://git.example/values.git".into(), "release".into()))
    );
    let (problems, _, repo) = resolved(yaml("", one_ref));
    assert!(problems.is_empty(), "{problems:?}");
    assert_eq!(repo.unwrap().0, "https://git.example/values.git");
    let (problems, write, _) = resolved(yaml("", ""));
    assert_eq!(write, None);
    assert!(
        problems[0].contains("helmvalues:/envs/prod/values.yaml")
            && problems[0].contains("set git-repository"),
        "{problems:?}"
    );
}

#[test]
fn sources_map_to_configured_repositories_branches_and_write_places() {
    let a = app(&format!(
        "apiVersion: argoproj.io/v1alpha1\nkind: Application\nmetadata:\n  name: web\n  namespace: argocd\n  annotations:\n    {IU}image-list: api=r.example/api:~1.2\n    {IU}write-back-method: git\n    {IU}write-back-target: kustomization:../base\nspec:\n  source:\n    repoURL: git@github.com:acme/m.git\n    path: apps/web/overlays/prod\n    targetRevision: HEAD\n    kustomize: {{}}\n"
    ));
    let r = resolve(
        vec![(a, Origin::Git)],
        &[configured("manifests", "https://github.com/acme/m")],
        &|_| Err("not asked"),
    );
    let app = &r.apps[0];
    assert!(app.problems.is_empty(), "{:?}", app.problems);
    assert_eq!(r.repositories.len(), 1);
    assert_eq!(r.repositories[0].name, "manifests");
    assert_eq!(
        app.units,
        vec![Unit {
            source: 0,
            repository: "manifests".into(),
            root: "apps/web/overlays/prod".into(),
            kind: Some(SourceKind::Kustomize),
            write: UnitWrite::Kustomization {
                dir: "apps/web/overlays/base".into()
            },
        }]
    );
    let p = app.policies[0].as_ref().unwrap();
    assert_eq!(p.name, "web/api");
    assert!(matches!(&p.strategy, Strategy::Semver { range: Some(c), .. } if c.as_str() == "~1.2"));
}

/// Issue 17, "Filters fail closed": an `allow-tags` regexp that does not compile used to
/// let every tag through. Now the image has no policy (nothing updates it) and the
/// Application a problem naming the setting and its value; its other images go on.
#[test]
fn an_unreadable_filter_blocks_its_image_with_a_problem() {
    let a = app(&format!(
        "apiVersion: argoproj.io/v1alpha1\nkind: Application\nmetadata:\n  name: web\n  namespace: argocd\n  annotations:\n    {IU}image-list: api=r.example/api, ui=r.example/ui\n    {IU}api.allow-tags: 'regexp:^v(\\d+$'\nspec:\n  source: {{repoURL: 'file:///srv/m.git', path: apps/web, targetRevision: main}}\n"
    ));
    let r = resolve(vec![(a, Origin::Git)], &[], &|_| Err("not asked"));
    let app = &r.apps[0];
    assert!(app.policies[0].is_none(), "the image is blocked");
    assert!(app.policies[1].is_some(), "the other image is not");
    assert_eq!(
        app.problems,
        vec![format!(
            "image \"api\": {IU}api.allow-tags `regexp:^v(\\d+$` cannot be read: invalid \
                 regexp: error: unclosed group; the image is not updated"
        )]
    );
}

/// Issue 17, "A peer's semantics": Applications configured for Image Updater choose as its
/// semver strategy does ("The current application tag does not need to follow semver",
/// docs/basics/update-strategies.md). The cases are Image Updater's own `Test_LatestVersion`
/// (registry-scanner/pkg/image/version_test.go): tags `0.1, 0.5.1, 0.9, 1.0, 1.0.1, 1.1.2,
/// 2.0.3`; a file on `1.0` goes to `2.0.3` without a constraint, `1.1.2` with `^1.0`,
/// `1.0.1` with `~1.0` (and with `1.0`, which Masterminds reads as `~1.0`); a file on
/// `latest`, or on no tag (its `ImageTag` is then empty, update.go), goes to `1.1.2` with
/// `^1.0` and `2.0.3` without; pre-releases stay out without a constraint ("excludes
/// pre-release versions").
#[test]
fn image_updater_choices() {
    use crate::select::{Decision, TagCandidate, choose};
    let tags: Vec<TagCandidate> = ["0.1", "0.5.1", "0.9", "1.0", "1.0.1", "1.1.2", "2.0.3"]
        .into_iter()
        .map(TagCandidate::new)
        .collect();
    let choice = |entry: &str, current: Option<&str>, tags: &[TagCandidate]| {
        let a = app(&format!(
            "apiVersion: argoproj.io/v1alpha1\nkind: Application\nmetadata:\n  name: web\n  annotations:\n    {IU}image-list: 'api=r.example/{entry}'\nspec:\n  source: {{repoURL: 'file:///srv/m.git', path: apps/web, targetRevision: main}}\n"
        ));
        let r = resolve(vec![(a, Origin::Git)], &[], &|_| Err("not asked"));
        let policy = r.apps[0].policies[0].clone().unwrap();
        match choose(&policy, current, tags) {
            Decision::Update(c) => c.tag,
            other => format!("{other:?}"),
        }
    };
    assert_eq!(choice("api", Some("1.0"), &tags), "2.0.3");
    assert_eq!(choice("api:^1.0", Some("1.0"), &tags), "1.1.2");
    assert_eq!(choice("api:~1.0", Some("1.0"), &tags), "1.0.1");
    assert_eq!(choice("api:1.0", Some("1.0"), &tags), "1.0.1");
    assert_eq!(choice("api:^1.0", Some("latest"), &tags), "1.1.2");
    assert_eq!(choice("api", Some("latest"), &tags), "2.0.3");
    assert_eq!(choice("api", None, &tags), "2.0.3");
    let rc: Vec<TagCandidate> = ["v2.2.0", "v2.3.0-rc.0.18.g1abb7b5dd-ppc64le"]
        .into_iter()
        .map(TagCandidate::new)
        .collect();
    assert_eq!(choice("api", Some("v2.1.0"), &rc), "v2.2.0");
    // docs/basics/update-strategies.md: "to allow updates to pre-release versions (e.g.
    // `v2.0-rc1`), you need to append the suffix `-0` to the constraint" (`2.x-0`).
    let rc: Vec<TagCandidate> = ["v1.9.0", "v2.0-rc1"]
        .into_iter()
        .map(TagCandidate::new)
        .collect();
    assert_eq!(choice("api:2.x-0", Some("v1.9.0"), &rc), "v2.0-rc1");
    assert!(choice("api:2.x", Some("v1.9.0"), &rc).starts_with("Hold"));
}

#[test]
fn head_asks_for_the_default_branch_and_other_revisions_get_their_own_repository() {
    let yaml = |name: &str, rev: &str| {
        format!(
            "apiVersion: argoproj.io/v1alpha1\nkind: Application\nmetadata:\n  name: {name}\n  annotations:\n    {IU}image-list: r.example/api\n    {IU}write-back-method: git\nspec:\n  source: {{repoURL: 'file:///srv/m.git', path: apps/{name}, targetRevision: {rev}}}\n"
        )
    };
    let r = resolve(
        vec![
            (app(&yaml("a", "HEAD")), Origin::Git),
            (app(&yaml("b", "trunk")), Origin::Git),
            (app(&yaml("c", "release")), Origin::Git),
        ],
        &[],
        &|_| Ok::<_, &str>("trunk".into()),
    );
    let names: Vec<(&str, &str)> = r
        .repositories
        .iter()
        .map(|c| (c.name.as_str(), c.branch.as_str()))
        .collect();
    assert_eq!(
        names,
        vec![("/srv/m", "trunk"), ("/srv/m@release", "release")]
    );
    assert_eq!(r.apps[0].units[0].repository, r.apps[1].units[0].repository);
    assert!(matches!(
        &r.apps[0].units[0].write,
        UnitWrite::OverrideFile { file } if file == "apps/a/.argocd-source-a.yaml"
    ));
}

#[test]
fn argocd_method_from_git_is_a_problem_and_from_cluster_a_patch() {
    let yaml = format!(
        "apiVersion: argoproj.io/v1alpha1\nkind: Application\nmetadata:\n  name: web\n  namespace: team-a\n  annotations:\n    {IU}image-list: r.example/api\nspec:\n  source: {{repoURL: 'file:///srv/m.git', path: web, helm: {{}}}}\n"
    );
    let r = resolve(vec![(app(&yaml), Origin::Git)], &[], &|_| {
        Ok::<_, &str>("main".into())
    });
    assert!(
        r.apps[0].problems[0].contains("fromGit"),
        "{:?}",
        r.apps[0].problems
    );
    let r = resolve(vec![(app(&yaml), Origin::Cluster)], &[], &|_| {
        Ok::<_, &str>("main".into())
    });
    assert!(r.apps[0].patch && r.apps[0].units.is_empty());
    assert_eq!(
        override_file_name(&r.apps[0].app),
        ".argocd-source-team-a_web.yaml"
    );
}

#[test]
fn repocreds_from_git_need_a_configured_repository() {
    let yaml = format!(
        "apiVersion: argoproj.io/v1alpha1\nkind: Application\nmetadata:\n  name: web\n  annotations:\n    {IU}image-list: r.example/api\n    {IU}write-back-method: git:repocreds\nspec:\n  source: {{repoURL: 'https://git.example/m.git', path: web}}\n"
    );
    let r = resolve(vec![(app(&yaml), Origin::Git)], &[], &|_| {
        Ok::<_, &str>("main".into())
    });
    assert!(
        r.apps[0].problems[0].contains("git:repocreds"),
        "{:?}",
        r.apps[0].problems
    );
    let r = resolve(
        vec![(app(&yaml), Origin::Git)],
        &[configured("m", "https://git.example/m")],
        &|_| Ok::<_, &str>("main".into()),
    );
    assert!(r.apps[0].problems.is_empty());
    let r = resolve(vec![(app(&yaml), Origin::Cluster)], &[], &|_| {
        Ok::<_, &str>("main".into())
    });
    assert!(r.apps[0].problems.is_empty(), "{:?}", r.apps[0].problems);
    assert_eq!(r.repositories[0].url, "https://git.example/m.git");
}

/// Issue 22: an `imagesVerification.cosignKey` becomes the policy's signature requirement once
/// its Secret was read; unread or unusable, it keeps the image from being updated.
#[test]
fn a_cosign_key_is_the_policys_requirement_and_an_unread_one_holds() {
    let mut key = crate::argocd::read::settings::CosignKey {
        namespace: "argocd".into(),
        secret: "cosign".into(),
        key: "cosign.pub".into(),
        field: "ImageUpdater argocd/u: spec.imagesVerification.cosignKey".into(),
        pem: None,
    };
    let err = cosign_requirement(&key).unwrap_err().to_string();
    assert!(
        err.contains("spec.imagesVerification.cosignKey") && err.contains("was not read"),
        "{err}"
    );
    key.pem = Some(Err("has no key \"cosign.pub\"".into()));
    let err = cosign_requirement(&key).unwrap_err().to_string();
    assert!(
        err.contains("Secret argocd/cosign[cosign.pub] has no key"),
        "{err}"
    );
    key.pem = Some(Ok(b"PEM".to_vec()));
    let r = cosign_requirement(&key).unwrap();
    assert_eq!(r.keys[0].pem, b"PEM");
    assert_eq!(r.keys[0].source, "Secret argocd/cosign[cosign.pub]");
}

/// Issue 28: a write-back target that cannot be read holds the Application with a problem
/// naming the annotation and its value; no unit is planned and no repository named, so
/// nothing is cloned or written for it (Image Updater would write `.argocd-source-<app>.yaml`).
#[test]
fn an_unreadable_write_back_target_holds_the_application() {
    let text = format!(
        "apiVersion: argoproj.io/v1alpha1\nkind: Application\nmetadata:\n  name: shop\n  annotations:\n    {IU}image-list: api=r.example/api\n    {IU}write-back-method: git\n    {IU}write-back-target: helmvalue:values.yaml\nspec:\n  source: {{repoURL: 'https://git.example/m.git', targetRevision: main, path: apps/shop, helm: {{}}}}\n"
    );
    let r = resolve(vec![(app(&text), Origin::Git)], &[], &|_| {
        Ok::<_, &str>("main".into())
    });
    let a = &r.apps[0];
    assert!(a.units.is_empty(), "{:?}", a.units);
    assert!(r.repositories.is_empty(), "{:?}", r.repositories);
    assert_eq!(a.problems.len(), 1, "{:?}", a.problems);
    assert!(
        a.problems[0].contains(&format!("{IU}write-back-target `helmvalue:values.yaml`"))
            && a.problems[0].contains("the Application is held"),
        "{:?}",
        a.problems
    );
}
