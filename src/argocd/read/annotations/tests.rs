use super::super::settings::{
    GitBranch, GitCredentials, PullSecret, UnreadableSetting, UpdateStrategy, WriteBackMethod,
    WriteBackTarget, parse_branch, parse_pull_secret, parse_target, parse_write_back,
};
use super::*;
use std::collections::BTreeMap;

fn annotations(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn iu(key: &str) -> String {
    format!("{IMAGE_UPDATER_PREFIX}{key}")
}

#[test]
fn without_image_list_the_app_is_not_managed() {
    assert!(parse(&annotations(&[("team", "payments")])).is_none());
}

#[test]
fn image_list_with_aliases_constraints_and_registry_ports() {
    let a = parse(&annotations(&[(
        &iu("image-list"),
        "api=127.0.0.1:5000/shop/api:~1.2, nginx:1.x, web=ghcr.io/o/web:>=1.2, <2.0, plain",
    )]))
    .unwrap();
    let got: Vec<(&str, &str, Option<&str>)> = a
        .images
        .iter()
        .map(|i| (i.alias.as_str(), i.image.as_str(), i.constraint.as_deref()))
        .collect();
    assert_eq!(
        got,
        vec![
            ("api", "127.0.0.1:5000/shop/api", Some("~1.2")),
            ("nginx", "nginx", Some("1.x")),
            ("web", "ghcr.io/o/web", Some(">=1.2, <2.0")),
            ("plain", "plain", None),
        ]
    );
    assert!(a.skipped.is_empty(), "{:?}", a.skipped);
}

#[test]
fn per_alias_keys_beat_app_wide_keys_and_tagpilot_beats_image_updater() {
    let a = parse(&annotations(&[
        (&iu("image-list"), "api=r.example/api, web=r.example/web"),
        (&iu("update-strategy"), "latest"),
        (&iu("api.update-strategy"), "name"),
        ("tagpilot.dev/api.update-strategy", "digest"),
        (&iu("web.allow-tags"), "regexp:^v\\d+$"),
        (&iu("ignore-tags"), "*-rc*, dev"),
        (&iu("web.platforms"), "linux/amd64,linux/arm64/v8"),
        (&iu("web.force-update"), "true"),
        (&iu("web.helm.image-name"), "web.repo"),
        (&iu("web.helm.image-tag"), "web.tag"),
        (&iu("api.kustomize.image-name"), "api"),
    ]))
    .unwrap();
    let (api, web) = (&a.images[0], &a.images[1]);
    assert_eq!(api.strategy, UpdateStrategy::Digest);
    assert_eq!(web.strategy, UpdateStrategy::NewestBuild);
    assert_eq!(web.allow_tags.as_deref(), Some("^v\\d+$"));
    assert_eq!(api.ignore_tags, vec!["*-rc*", "dev"]);
    assert_eq!(web.platforms.len(), 2);
    assert!(web.force_update && !api.force_update);
    assert_eq!(web.helm.name.as_deref(), Some("web.repo"));
    assert_eq!(api.kustomize_image_name.as_deref(), Some("api"));
    let keys: Vec<&str> = a.skipped.iter().map(|s| s.key.as_str()).collect();
    assert_eq!(keys, vec![iu("api.update-strategy")], "{:?}", a.skipped);
    assert!(a.skipped[0].reason.contains("overridden"));
}

#[test]
fn min_age_is_read_per_alias_or_app_wide_under_tagpilots_prefix_only() {
    let a = parse(&annotations(&[
        (
            &iu("image-list"),
            "api=r.example/api, web=r.example/web, db=r.example/db",
        ),
        ("tagpilot.dev/min-age", "1h"),
        ("tagpilot.dev/api.min-age", "30m"),
        ("tagpilot.dev/db.update-strategy", "digest"),
        (&iu("web.min-age"), "5m"),
    ]))
    .unwrap();
    let minutes = |i: usize| a.images[i].min_age.map(|d| d.as_secs() / 60);
    assert_eq!(minutes(0), Some(30));
    assert_eq!(minutes(1), Some(60), "the app-wide value");
    assert_eq!(minutes(2), None, "digest has no newer tag to wait for");
    let skipped: Vec<(&str, &str)> = a
        .skipped
        .iter()
        .map(|s| (s.key.as_str(), s.reason.as_str()))
        .collect();
    assert!(
        skipped
            .iter()
            .any(|(k, r)| *k == iu("web.min-age") && r.contains("unknown annotation")),
        "{skipped:?}"
    );

    let bad = parse(&annotations(&[
        (&iu("image-list"), "api=r.example/api"),
        ("tagpilot.dev/api.min-age", "soon"),
    ]))
    .unwrap();
    assert!(bad.skipped.is_empty(), "{:?}", bad.skipped);
    assert!(bad.images[0].is_blocked());
    assert_eq!(
        bad.images[0].unreadable[0].to_string(),
        "tagpilot.dev/api.min-age `soon` cannot be read: not a duration (30m, 2h, 1d): \
             expected number at 0"
    );
}

#[test]
fn every_pull_secret_form_parses_and_ext_is_reported() {
    assert_eq!(
        parse_pull_secret("pullsecret:argocd/regcred"),
        Ok(PullSecret::PullSecret {
            namespace: "argocd".into(),
            name: "regcred".into()
        })
    );
    assert_eq!(
        parse_pull_secret("secret:ns/creds#token"),
        Ok(PullSecret::Secret {
            namespace: "ns".into(),
            name: "creds".into(),
            field: "token".into()
        })
    );
    assert_eq!(
        parse_pull_secret("env:REGISTRY_AUTH"),
        Ok(PullSecret::Env("REGISTRY_AUTH".into()))
    );
    assert_eq!(
        parse_pull_secret("ext:/bin/get-creds"),
        Ok(PullSecret::Ext("/bin/get-creds".into()))
    );
    assert!(parse_pull_secret("secret:ns/creds").is_err());
    let a = parse(&annotations(&[
        (&iu("image-list"), "r.example/api"),
        (&iu("pull-secret"), "ext:/bin/get-creds"),
    ]))
    .unwrap();
    assert_eq!(a.skipped.len(), 1);
    assert!(a.skipped[0].reason.contains("no credential scripts"));
}

#[test]
fn write_back_methods_targets_and_branches() {
    assert_eq!(
        parse_write_back("argocd", None),
        Ok(WriteBackMethod::Argocd)
    );
    assert_eq!(
        parse_write_back("git:repocreds", None),
        Ok(WriteBackMethod::Git(GitCredentials::RepoCreds))
    );
    assert_eq!(
        parse_write_back("git:secret:argocd/git-creds", None),
        Ok(WriteBackMethod::Git(GitCredentials::Secret {
            namespace: "argocd".into(),
            name: "git-creds".into()
        }))
    );
    assert!(parse_write_back("git:secret:nope", None).is_err());
    assert_eq!(
        parse_target("kustomization:../base"),
        Ok(WriteBackTarget::Kustomization(Some("../base".into())))
    );
    assert_eq!(
        parse_target("helmvalues"),
        Ok(WriteBackTarget::HelmValues(None))
    );
    assert_eq!(
        parse_branch("k", "main:image-updater-{{.SHA256}}"),
        GitBranch {
            key: "k".into(),
            base: Some("main".into()),
            target: Some("image-updater-{{.SHA256}}".into())
        }
    );
    assert_eq!(
        parse_branch("k", ":updates"),
        GitBranch {
            key: "k".into(),
            base: None,
            target: Some("updates".into())
        }
    );
}

#[test]
fn unknown_and_orphan_keys_are_reported_by_name() {
    let a = parse(&annotations(&[
        (&iu("image-list"), "api=r.example/api"),
        (&iu("api.update-strategy"), "semver"),
        (&iu("web.update-strategy"), "semver"),
        (&iu("commit-message-template"), "x"),
        ("tagpilot.dev/api.allow-tags", "nonsense"),
    ]))
    .unwrap();
    let got: Vec<(String, String)> = a
        .skipped
        .iter()
        .map(|s| (s.key.clone(), s.reason.clone()))
        .collect();
    assert_eq!(got.len(), 2, "{got:?}");
    assert!(got[0].0.ends_with("commit-message-template") && got[0].1.contains("unknown"));
    assert!(got[1].0.ends_with("web.update-strategy") && got[1].1.contains("not in image-list"));
    // Not skipped: unreadable, which blocks the image.
    assert_eq!(
        a.images[0].unreadable,
        vec![UnreadableSetting {
            key: "tagpilot.dev/api.allow-tags".into(),
            value: "nonsense".into(),
            reason: "neither `regexp:<re>` nor `any`".into(),
        }]
    );
    assert_eq!(a.images[0].allow_tags, None);
}

#[test]
fn an_invalid_allow_tags_regexp_is_shown_as_written() {
    let a = parse(&annotations(&[
        (&iu("image-list"), "api=r.example/api"),
        (&iu("api.allow-tags"), "regexp:^v\\d+($"),
    ]))
    .unwrap();
    assert!(a.skipped.is_empty(), "{:?}", a.skipped);
    let problem = a.images[0].unreadable[0].to_string();
    assert_eq!(
        problem,
        "argocd-image-updater.argoproj.io/api.allow-tags `regexp:^v\\d+($` cannot be read: \
             invalid regexp: error: unclosed group"
    );
}

/// Issue 17, "Filters fail closed": a filter, range or strategy that cannot be read blocks
/// the image. Image Updater itself reads an unreadable `allow-tags` as "match nothing"
/// (`MatchFuncNone` in registry-scanner/pkg/image/options.go, and its
/// `Test_ContainerImage_ParseMatch`: `regexp:[aA-zZ` matches no tag) and an unparsable
/// platform as one no image has ("so we don't end up updating to the wrong architecture"),
/// so holding is its result too; for an unknown strategy it falls back to semver, which
/// tagpilot does not guess at.
#[test]
fn every_unreadable_filter_range_or_strategy_blocks_its_image() {
    let cases: &[(&str, &str, &str)] = &[
        ("api.allow-tags", "regexp:^v(", "invalid regexp"),
        (
            "api.allow-tags",
            "regex:^v",
            "neither `regexp:<re>` nor `any`",
        ),
        ("api.allow-tags", "^v1", "neither `regexp:<re>` nor `any`"),
        ("api.ignore-tags", "dev, [z-a]", "invalid glob \"[z-a]\""),
        ("api.platforms", "linux", "linux"),
        ("api.update-strategy", "newest", "not an update strategy"),
        ("update-strategy", "semverr", "not an update strategy"),
    ];
    for (key, value, why) in cases {
        let a = parse(&annotations(&[
            (&iu("image-list"), "api=r.example/api"),
            (&iu(key), value),
        ]))
        .unwrap();
        let image = &a.images[0];
        assert!(image.is_blocked(), "{key}: {value}");
        let u = &image.unreadable[0];
        assert_eq!(
            (u.key.as_str(), u.value.as_str()),
            (iu(key).as_str(), *value)
        );
        assert!(u.reason.contains(why), "{key}: {}", u.reason);
        assert!(a.skipped.is_empty(), "{key}: {:?}", a.skipped);
    }
    // The digest strategy's tag, which must be one a registry can hold.
    let a = parse(&annotations(&[
        (&iu("image-list"), "api=r.example/api:>=1.0"),
        (&iu("update-strategy"), "digest"),
    ]))
    .unwrap();
    let u = &a.images[0].unreadable[0];
    assert_eq!(
        (u.value.as_str(), u.reason.as_str()),
        (">=1.0", "not a tag the digest strategy can follow")
    );
    // A constraint in image-list that does not read.
    let a = parse(&annotations(&[(
        &iu("image-list"),
        "api=r.example/api:~>1.x.y",
    )]))
    .unwrap();
    let u = &a.images[0].unreadable[0];
    assert_eq!(
        (u.key.as_str(), u.value.as_str()),
        (iu("image-list").as_str(), "~>1.x.y")
    );
    // An invalid glob next to valid ones still blocks: dropping only it would widen.
    let a = parse(&annotations(&[
        (&iu("image-list"), "api=r.example/api"),
        (&iu("ignore-tags"), "*-rc*, [z-a]"),
    ]))
    .unwrap();
    assert!(a.images[0].is_blocked());
}

/// Issue 17, "A peer's semantics": Image Updater lower-cases the strategy name
/// (`ParseUpdateStrategy`), `any` and the `regexp` function name (`ParseMatch`, both in
/// registry-scanner/pkg/image/options.go; `Test_ContainerImage_ParseMatch` reads `ANY` and
/// `RegExp:[aA-zZ]`), and the pull-secret kind (`strings.ToLower(tokens[0])` in
/// registry-scanner/pkg/image/credentials.go); `force-update` is Go's `strconv.ParseBool`
/// (pkg/argocd/annotations.go). `write-back-method` and `write-back-target` are compared
/// as written there (`method == "git"`, `strings.HasPrefix(target, "kustomization")`).
#[test]
fn values_are_case_insensitive_where_image_updater_reads_them_so() {
    let a = parse(&annotations(&[
        (
            &iu("image-list"),
            "a=r.example/a, b=r.example/b, c=r.example/c, d=r.example/d",
        ),
        (&iu("a.update-strategy"), "SemVer"),
        (&iu("b.update-strategy"), "Newest-Build"),
        (&iu("c.update-strategy"), "LATEST"),
        (&iu("d.update-strategy"), "Digest"),
        (&iu("a.allow-tags"), "ANY"),
        (&iu("b.allow-tags"), "RegExp:^v\\d+$"),
        (&iu("c.pull-secret"), "PullSecret:argocd/regcred"),
        (&iu("d.pull-secret"), "ENV:REGISTRY_AUTH"),
        (&iu("a.force-update"), "TRUE"),
        (&iu("b.force-update"), "t"),
        (&iu("c.force-update"), "tRUE"),
    ]))
    .unwrap();
    let strategies: Vec<UpdateStrategy> = a.images.iter().map(|i| i.strategy).collect();
    use UpdateStrategy::*;
    assert_eq!(strategies, vec![Semver, NewestBuild, NewestBuild, Digest]);
    assert!(a.images.iter().all(|i| !i.is_blocked()), "{:?}", a.images);
    assert_eq!(a.images[0].allow_tags, None);
    assert_eq!(a.images[1].allow_tags.as_deref(), Some("^v\\d+$"));
    assert_eq!(
        a.images[2].pull_secret,
        Some(PullSecret::PullSecret {
            namespace: "argocd".into(),
            name: "regcred".into()
        })
    );
    assert_eq!(
        a.images[3].pull_secret,
        Some(PullSecret::Env("REGISTRY_AUTH".into()))
    );
    assert!(a.images[0].force_update && a.images[1].force_update);
    // ParseBool takes `TRUE`, `True`, `true`, `t`, not `tRUE`.
    let keys: Vec<&str> = a.skipped.iter().map(|s| s.key.as_str()).collect();
    assert_eq!(keys, vec![iu("c.force-update")]);
    // Case-sensitive upstream, so here too.
    assert!(parse_write_back("Git", None).is_err());
    assert!(parse_target("Kustomization").is_err());
}

/// Issue 28: a key nothing reads is listed with the known key nearest to it (by edit distance,
/// a swap of two letters counting once), under the prefix it was written with; a key near
/// nothing is listed without a guess. Each is kept for its warning.
#[test]
fn an_unknown_key_names_the_nearest_known_key() {
    let a = parse(&annotations(&[
        (&iu("image-list"), "pay=r.example/pay"),
        (&iu("pay.helm.image-tga"), "image.tag"),
        (&iu("pya.helm.image-name"), "image.repository"),
        (&iu("write-back-targte"), "kustomization"),
        ("tagpilot.dev/min-aeg", "1d"),
        (&iu("frobnicate"), "yes"),
    ]))
    .unwrap();
    let unknown: Vec<(String, Option<String>)> = a
        .unknown
        .iter()
        .map(|u| (u.key.clone(), u.nearest.clone()))
        .collect();
    assert_eq!(
        unknown,
        [
            (iu("frobnicate"), None),
            (iu("pay.helm.image-tga"), Some(iu("pay.helm.image-tag"))),
            (iu("pya.helm.image-name"), Some(iu("pay.helm.image-name"))),
            (iu("write-back-targte"), Some(iu("write-back-target"))),
            (
                "tagpilot.dev/min-aeg".to_string(),
                Some("tagpilot.dev/min-age".to_string())
            ),
        ]
    );
    let typo = a
        .skipped
        .iter()
        .find(|s| s.key == iu("pay.helm.image-tga"))
        .unwrap();
    assert_eq!(
        typo.reason,
        format!(
            "unknown annotation; tagpilot does not support it; did you mean {}?",
            iu("pay.helm.image-tag")
        )
    );
}

/// Without an `image-list` the Application is not managed: its other keys are what nothing
/// reads, a misspelt `image-list` named as the key it means.
#[test]
fn without_image_list_the_other_keys_are_unread() {
    let unread = super::unread(&annotations(&[
        (&iu("image-lst"), "api=r.example/api"),
        (&iu("write-back-method"), "git"),
        ("team", "payments"),
    ]));
    let unread: Vec<(String, Option<String>)> =
        unread.into_iter().map(|u| (u.key, u.nearest)).collect();
    assert_eq!(
        unread,
        [
            (iu("image-lst"), Some(iu("image-list"))),
            (iu("write-back-method"), None),
        ]
    );
    assert!(super::unread(&annotations(&[(&iu("image-list"), "r.example/api")])).is_empty());
}
