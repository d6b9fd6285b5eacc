use proptest::prelude::{ProptestConfig, any, prop, prop_assert, prop_assert_eq, proptest};
use proptest::strategy::Strategy as _;

use super::*;
use crate::policy::{ImagePolicy, RegexOrder, Strategy};

fn policy(strategy: Strategy) -> ImagePolicy {
    ImagePolicy::adhoc("127.0.0.1:5000/shop/app", strategy).unwrap()
}

fn semver(range: Option<&str>) -> ImagePolicy {
    policy(Strategy::semver(range, false).unwrap())
}

fn semver_pre(range: Option<&str>) -> ImagePolicy {
    policy(Strategy::semver(range, true).unwrap())
}

fn tags(list: &[&str]) -> Vec<TagCandidate> {
    list.iter().map(|t| TagCandidate::new(*t)).collect()
}

/// The tag chosen, `=` for up to date, `hold: reason` for a hold.
fn pick(policy: &ImagePolicy, current: Option<&str>, list: &[&str]) -> String {
    outcome(choose(policy, current, &tags(list)))
}

fn outcome(d: Decision) -> String {
    match d {
        Decision::Update(c) => c.tag,
        Decision::UpToDate => "=".into(),
        Decision::Hold(why) => format!("hold: {why}"),
    }
}

fn at(tag: &str, secs: i64) -> TagCandidate {
    TagCandidate {
        tag: tag.into(),
        created: Some(jiff::Timestamp::from_second(secs).unwrap()),
        digest: None,
        no_image_for_platform: false,
        age: None,
    }
}

// === semver: families, pre-releases, ranges ===

#[test]
fn a_variant_moves_only_within_its_family() {
    let p = semver(None);
    let registry = [
        "1.2.3",
        "1.3.0",
        "1.2.4-alpine",
        "1.3.0-alpine",
        "1.3.1-slim",
        "1.4.0-alpine3.19",
    ];
    assert_eq!(pick(&p, Some("1.2.3-alpine"), &registry), "1.3.0-alpine");
    assert_eq!(pick(&p, Some("1.2.3"), &registry), "1.3.0");
}

#[test]
fn a_plain_version_never_moves_to_a_variant() {
    let p = semver(None);
    assert_eq!(pick(&p, Some("1.2.3"), &["1.3.0-alpine", "1.2.4"]), "1.2.4");
    let held = pick(&p, Some("1.2.3"), &["1.3.0-alpine", "1.4.0-slim"]);
    assert!(
        held.starts_with("hold: no tag fits the policy (2 tags: 2 not in family x.y.z)"),
        "{held}"
    );
}

#[test]
fn precision_is_part_of_the_family() {
    let p = semver(None);
    assert_eq!(pick(&p, Some("1.25"), &["1.25", "1.26", "1.27.3"]), "1.26");
    assert_eq!(
        pick(
            &p,
            Some("1.25-bookworm"),
            &["1.26-bookworm", "1.26.1-bookworm", "1.27-alpine"]
        ),
        "1.26-bookworm"
    );
    assert_eq!(pick(&p, Some("16"), &["16.4", "17", "17-alpine"]), "17");
}

#[test]
fn a_base_os_release_in_the_suffix_is_kept() {
    let p = semver(None);
    let registry = ["1.25.4-alpine3.19", "1.25.5-alpine3.20", "1.25.5-alpine"];
    assert_eq!(
        pick(&p, Some("1.25.3-alpine3.19"), &registry),
        "1.25.4-alpine3.19"
    );
}

#[test]
fn prereleases_are_skipped_unless_asked_for() {
    let registry = [
        "1.3.0-rc.1",
        "1.2.4",
        "2.0.0-beta.2",
        "1.3.0rc2",
        "1.2.5-SNAPSHOT",
    ];
    assert_eq!(pick(&semver(None), Some("1.2.3"), &registry), "1.2.4");
    assert_eq!(
        pick(&semver_pre(None), Some("1.2.3"), &registry),
        "2.0.0-beta.2"
    );
    // A release beats its own pre-releases.
    assert_eq!(
        pick(
            &semver_pre(None),
            Some("1.3.0-rc.1"),
            &["1.3.0-rc.2", "1.3.0"]
        ),
        "1.3.0"
    );
    assert_eq!(
        pick(&semver(None), Some("1.3.0-rc.1"), &["1.3.0-rc.2", "1.3.0"]),
        "1.3.0"
    );
}

#[test]
fn a_prerelease_of_a_family_stays_in_its_family() {
    let p = semver_pre(None);
    assert_eq!(
        pick(
            &p,
            Some("1.2.3-alpine"),
            &["1.3.0-rc1-alpine", "1.3.0-rc2", "1.2.4"]
        ),
        "1.3.0-rc1-alpine"
    );
}

#[test]
fn v_prefix_and_two_part_versions() {
    let p = semver(None);
    assert_eq!(pick(&p, Some("v1.2"), &["v1.3", "v1.2.9"]), "v1.3");
    assert_eq!(pick(&p, Some("v1.2.0"), &["v1.2.9", "1.3.0"]), "1.3.0");
    assert_eq!(pick(&p, None, &["v1.2.0", "1.3", "latest"]), "1.3");
}

#[test]
fn masterminds_ranges_in_policies() {
    let registry = ["1.25.0", "1.26.0", "1.26.3", "1.27.0", "2.0.0", "0.9.0"];
    assert_eq!(
        pick(&semver(Some("~1.26")), Some("1.26.0"), &registry),
        "1.26.3"
    );
    assert_eq!(
        pick(&semver(Some("^1.0")), Some("1.25.0"), &registry),
        "1.27.0"
    );
    assert_eq!(
        pick(&semver(Some("1.x")), Some("1.25.0"), &registry),
        "1.27.0"
    );
    assert_eq!(
        pick(&semver(Some(">=1.2, <1.27")), Some("1.25.0"), &registry),
        "1.26.3"
    );
    assert_eq!(
        pick(&semver(Some(">=1.2 <1.27")), Some("1.25.0"), &registry),
        "1.26.3"
    );
    assert_eq!(
        pick(&semver(Some("1.25 - 1.26")), Some("1.25.0"), &registry),
        "1.26.3"
    );
    assert_eq!(
        pick(&semver(Some("~1.25 || >=2")), Some("1.25.0"), &registry),
        "2.0.0"
    );
    assert_eq!(pick(&semver(Some("^0.9")), Some("0.9.0"), &registry), "=");
}

#[test]
fn never_moves_backwards() {
    let p = semver(None);
    let held = pick(&p, Some("1.5.0"), &["1.4.0", "1.3.0"]);
    assert!(
        held.contains("\"1.5.0\" ranks above the best candidate \"1.4.0\""),
        "{held}"
    );
    let mut down = semver(None);
    down.allow_downgrade = true;
    assert_eq!(pick(&down, Some("1.5.0"), &["1.4.0", "1.3.0"]), "1.4.0");
}

#[test]
fn a_file_pinned_above_the_range_stays() {
    let p = semver(Some("<2.0"));
    let held = pick(&p, Some("2.1.0"), &["1.9.0", "2.1.0", "2.2.0"]);
    assert!(
        held.starts_with("hold: current tag \"2.1.0\" ranks above"),
        "{held}"
    );
    let mut down = semver(Some("<2.0"));
    down.allow_downgrade = true;
    assert_eq!(
        pick(&down, Some("2.1.0"), &["1.9.0", "2.1.0", "2.2.0"]),
        "1.9.0"
    );
}

#[test]
fn up_to_date_including_synonyms() {
    let p = semver(None);
    assert_eq!(pick(&p, Some("1.4.0"), &["1.4.0", "1.3.0"]), "=");
    assert_eq!(pick(&p, Some("v1.4.0"), &["1.4.0", "1.3.0"]), "=");
    // A file on a synonym of the best version is not churned onto the other spelling.
    assert_eq!(pick(&p, Some("v1.4.0"), &["1.4.0", "v1.4.0"]), "=");
}

#[test]
fn an_unreadable_current_tag_is_held_unless_the_policy_replaces_it() {
    let mut p = semver(None);
    let registry = ["1.0.0", "1.1.0", "1.2.0-alpine", "latest"];
    // Placeholders a CI step substitutes, in the shapes real repositories use.
    for placeholder in [
        "latest",
        "TAG",
        "CONTAINER_IMAGES_TAG",
        "${TAG}",
        "{{ .Values.tag }}",
    ] {
        let held = pick(&p, Some(placeholder), &registry);
        assert!(
            held.starts_with(&format!("hold: current tag {placeholder:?} is not")),
            "{placeholder}: {held}"
        );
        assert!(
            held.ends_with("(replaceUnreadableTags: true would replace it)"),
            "{held}"
        );
    }
    assert_eq!(pick(&p, None, &["1.0.0", "1.1.0"]), "1.1.0");
    p.replace_unreadable_tags = true;
    assert_eq!(pick(&p, Some("latest"), &registry), "1.1.0");
    assert_eq!(pick(&p, Some("${TAG}"), &registry), "1.1.0");
}

#[test]
fn unreadable_under_every_strategy() {
    let desc = policy(Strategy::Alphabetical { descending: true });
    assert_eq!(pick(&desc, Some("b"), &["a", "c"]), "c");
    assert!(
        pick(&desc, Some("${TAG}"), &["a", "c"])
            .starts_with("hold: current tag \"${TAG}\" is not a tag")
    );
    let newest = policy(Strategy::NewestBuild);
    assert!(
        outcome(choose(&newest, Some("TAG"), &[at("a", 100)]))
            .starts_with("hold: current tag \"TAG\" has no build time")
    );
    let digest = policy(Strategy::Digest {
        tag: "stable".into(),
    });
    assert_eq!(
        unreadable_current(&digest, "TAG", &[])
            .map(|why| why.to_string())
            .as_deref(),
        Some(
            "current tag \"TAG\" is not the followed tag \"stable\"; left as written \
             (replaceUnreadableTags: true would replace it)"
        )
    );
    assert_eq!(unreadable_current(&digest, "stable", &[]), None);
}

#[test]
fn a_hold_says_why_nothing_fits() {
    let held = pick(
        &semver(Some("^3")),
        Some("2.0.0"),
        &["2.1.0", "2.2.0-rc.1", "latest"],
    );
    assert_eq!(
        held,
        "hold: no tag fits the policy (3 tags: 1 out of range \"^3\", 1 pre-release, 1 not a version)"
    );
    assert_eq!(
        pick(&semver(None), Some("1.0.0"), &[]),
        "hold: the registry has no tags"
    );
}

// === filters ===

#[test]
fn allow_and_ignore_filters() {
    let mut p = semver(None);
    p.set_allow_tags(r"^\d+\.\d+\.\d+$").unwrap();
    p.set_ignore_tags(&["*-debug".into(), "1.9.*".into()])
        .unwrap();
    let registry = ["1.9.0", "1.8.0", "v2.0.0", "1.8.1-debug"];
    assert_eq!(pick(&p, Some("1.0.0"), &registry), "1.8.0");
    assert_eq!(
        filter_tags(
            &p,
            &registry.iter().map(|t| t.to_string()).collect::<Vec<_>>()
        ),
        vec!["1.8.0"]
    );
    let mut all = semver(None);
    all.set_ignore_tags(&["*".into()]).unwrap();
    assert!(
        pick(&all, Some("1.0.0"), &registry)
            .starts_with("hold: no tag fits the policy (4 tags: 4 filtered by ignoreTags)")
    );
}

#[test]
fn filter_tags_applies_range_and_prerelease_but_not_families() {
    let p = semver(Some("^1"));
    let registry: Vec<String> = ["1.2.0", "1.3.0-alpine", "1.4.0-rc.1", "2.0.0", "latest"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    assert_eq!(filter_tags(&p, &registry), vec!["1.2.0", "1.3.0-alpine"]);
    assert!(!needs_build_time(&p));
    assert!(needs_build_time(&policy(Strategy::NewestBuild)));
}

// === regex ===

#[test]
fn regex_numerical_versus_alphabetical() {
    let pattern = r"^main-(?P<sha>[0-9a-f]{7})-(?P<ts>\d+)$";
    let registry = [
        "main-abc1234-9",
        "main-def5678-10",
        "feature-x-99",
        "main-0000000-x",
    ];
    let numerical =
        policy(Strategy::regex(pattern, Some("ts"), Some(RegexOrder::Numerical)).unwrap());
    let alphabetical =
        policy(Strategy::regex(pattern, Some("ts"), Some(RegexOrder::Alphabetical)).unwrap());
    assert_eq!(
        pick(&numerical, Some("main-abc1234-9"), &registry),
        "main-def5678-10"
    );
    assert_eq!(
        pick(&alphabetical, Some("main-def5678-10"), &registry),
        "main-abc1234-9"
    );
    // Huge build numbers still order numerically.
    let big = [
        "main-abc1234-99999999999999999999999",
        "main-abc1234-100000000000000000000000",
    ];
    assert_eq!(
        pick(&numerical, None, &big),
        "main-abc1234-100000000000000000000000"
    );
}

#[test]
fn regex_semver_order_and_no_downgrade() {
    let p = policy(
        Strategy::regex(r"^release-(?P<v>.+)$", Some("v"), Some(RegexOrder::Semver)).unwrap(),
    );
    assert_eq!(
        pick(
            &p,
            Some("release-1.9.0"),
            &["release-1.10.0", "release-1.9.0", "release-x"]
        ),
        "release-1.10.0"
    );
    let n =
        policy(Strategy::regex(r"^b-(?P<n>\d+)$", Some("n"), Some(RegexOrder::Numerical)).unwrap());
    assert!(
        pick(&n, Some("b-20"), &["b-10", "b-3"])
            .starts_with("hold: current tag \"b-20\" ranks above")
    );
    // A current tag the pattern does not match is held, unless the policy says to replace it.
    assert_eq!(
        pick(&n, Some("latest"), &["b-10", "b-3"]),
        "hold: current tag \"latest\" does not match the policy's pattern `^b-(?P<n>\\d+)$`; \
         left as written (replaceUnreadableTags: true would replace it)"
    );
    let mut replacing = n.clone();
    replacing.replace_unreadable_tags = true;
    assert_eq!(pick(&replacing, Some("latest"), &["b-10", "b-3"]), "b-10");
}

#[test]
fn regex_sort_by_must_name_a_group() {
    let err = Strategy::regex(
        r"^main-(?P<sha>\w+)$",
        Some("ts"),
        Some(RegexOrder::Numerical),
    )
    .unwrap_err();
    assert!(
        err.to_string().contains("\"ts\"") && err.to_string().contains("sha"),
        "{err}"
    );
}

// === newestBuild ===

#[test]
fn newest_build_by_creation_time() {
    let p = policy(Strategy::NewestBuild);
    let registry = vec![
        at("a", 100),
        at("b", 300),
        at("c", 200),
        TagCandidate::new("d"),
    ];
    assert_eq!(outcome(choose(&p, Some("a"), &registry)), "b");
    assert_eq!(outcome(choose(&p, Some("b"), &registry)), "=");
    // The current tag was built after the newest candidate (it is ignored now): stay.
    let mut ignoring = policy(Strategy::NewestBuild);
    ignoring.set_ignore_tags(&["b".into()]).unwrap();
    assert!(
        outcome(choose(&ignoring, Some("b"), &registry))
            .starts_with("hold: current tag \"b\" ranks above")
    );
}

#[test]
fn newest_build_without_build_times() {
    let p = policy(Strategy::NewestBuild);
    let registry = tags(&["a", "b"]);
    assert_eq!(
        outcome(choose(&p, Some("a"), &registry)),
        "hold: none of the 2 tags has a build time"
    );
    let ranked = rank(&p, Some("a"), &registry);
    assert!(
        ranked
            .iter()
            .all(|r| r.excluded == Some(Exclusion::NoBuildTime))
    );
}

#[test]
fn newest_build_without_an_image_for_the_platform_says_so() {
    let mut p = policy(Strategy::NewestBuild);
    p.platforms = vec!["linux/arm64".parse().unwrap()];
    let mut registry = tags(&["a", "b"]);
    for c in &mut registry {
        c.no_image_for_platform = true;
    }
    assert_eq!(
        outcome(choose(&p, Some("a"), &registry)),
        "hold: no image for linux/arm64 in any of the 2 tags"
    );
    let ranked = rank(&p, Some("a"), &registry);
    assert!(
        ranked
            .iter()
            .all(|r| r.excluded.as_ref().map(ToString::to_string).as_deref()
                == Some("no image for linux/arm64")),
        "{ranked:?}"
    );
}

// === digest ===

#[test]
fn digest_follows_one_tag() {
    let p = policy(Strategy::Digest {
        tag: "stable".into(),
    });
    let mut registry = tags(&["1.0", "stable", "latest"]);
    registry[1].digest = Some("sha256:abc".into());
    match choose(&p, Some("stable"), &registry) {
        Decision::Update(c) => assert_eq!(
            (c.tag.as_str(), c.digest.as_deref()),
            ("stable", Some("sha256:abc"))
        ),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        outcome(choose(&p, Some("1.0"), &tags(&["1.0"]))),
        "hold: tag \"stable\" is not in the registry"
    );
}

// === alphabetical ===

#[test]
fn alphabetical_descending_and_ascending() {
    let desc = policy(Strategy::Alphabetical { descending: true });
    let asc = policy(Strategy::Alphabetical { descending: false });
    assert_eq!(pick(&desc, Some("a"), &["a", "c", "b"]), "c");
    assert_eq!(pick(&desc, Some("c"), &["a", "c", "b"]), "=");
    assert!(
        pick(&desc, Some("d"), &["a", "c", "b"]).starts_with("hold: current tag \"d\" ranks above")
    );
    assert_eq!(pick(&asc, Some("b"), &["a", "c", "b"]), "a");
    assert!(pick(&asc, Some("0"), &["a", "c"]).starts_with("hold:"));
}

// === rank ===

#[test]
fn rank_lists_candidates_best_first_then_exclusions() {
    let mut p = semver(Some("^1"));
    p.set_ignore_tags(&["*-debug".into()]).unwrap();
    let ranked = rank(
        &p,
        Some("1.1.0"),
        &tags(&[
            "1.1.0",
            "1.3.0",
            "1.2.0",
            "2.0.0",
            "1.4.0-rc.1",
            "1.5.0-alpine",
            "1.6.0-debug",
        ]),
    );
    let lines: Vec<String> = ranked
        .iter()
        .map(|r| {
            let mark = if r.chosen {
                "*"
            } else if r.current {
                "."
            } else {
                " "
            };
            match &r.excluded {
                Some(why) => format!("{mark}{} ({why})", r.tag),
                None => format!("{mark}{}", r.tag),
            }
        })
        .collect();
    assert_eq!(
        lines,
        vec![
            "*1.3.0",
            " 1.2.0",
            ".1.1.0",
            " 2.0.0 (out of range \"^1\")",
            " 1.4.0-rc.1 (pre-release)",
            " 1.5.0-alpine (other variant family x.y.z-alpine (current is x.y.z))",
            " 1.6.0-debug (filtered by ignoreTags \"*-debug\")",
        ]
    );
    let up_to_date = rank(&p, Some("1.3.0"), &tags(&["1.3.0", "1.2.0"]));
    assert!(up_to_date[0].chosen && up_to_date[0].current);
}

// === properties ===

fn version_tag() -> impl proptest::strategy::Strategy<Value = String> {
    (
        0u64..4,
        0u64..4,
        0u64..4,
        prop::option::of(prop::sample::select(vec![
            "-alpine", "-rc.1", "-beta2", "-slim",
        ])),
    )
        .prop_map(|(a, b, c, s)| format!("{a}.{b}.{c}{}", s.unwrap_or("")))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn semver_never_moves_below_current(
        current in version_tag(),
        registry in prop::collection::vec(version_tag(), 0..12),
        range in prop::sample::select(vec![None, Some("^1"), Some("<2"), Some("~2.1"), Some(">=1.1, <3 || 0.x")]),
        prerelease in any::<bool>(),
    ) {
        let p = policy(Strategy::semver(range, prerelease).unwrap());
        let candidates = tags(&registry.iter().map(String::as_str).collect::<Vec<_>>());
        if let Decision::Update(c) = choose(&p, Some(&current), &candidates) {
            let from = TagVersion::parse(&current).unwrap();
            let to = TagVersion::parse(&c.tag).unwrap();
            prop_assert!(to.version.cmp_precedence(&from.version) == Ordering::Greater, "{} -> {}", current, c.tag);
            prop_assert_eq!(to.family, from.family);
        }
    }

    #[test]
    fn ordered_strategies_never_move_backwards(
        current in "[a-c]{1,3}-[0-9]{1,3}",
        registry in prop::collection::vec("[a-c]{1,3}-[0-9]{1,3}", 0..12),
        which in 0usize..3,
    ) {
        let strategy = match which {
            0 => Strategy::Alphabetical { descending: true },
            1 => Strategy::Alphabetical { descending: false },
            _ => Strategy::regex(r"-(?P<n>\d+)$", Some("n"), Some(RegexOrder::Numerical)).unwrap(),
        };
        let p = policy(strategy);
        let candidates = tags(&registry.iter().map(String::as_str).collect::<Vec<_>>());
        let cx = Context { policy: &p, family: FamilyRule::Any, need_time: false };
        if let Decision::Update(c) = choose(&p, Some(&current), &candidates) {
            let (from, to) = (cx.evaluate(&current, None).unwrap(), cx.evaluate(&c.tag, None).unwrap());
            prop_assert_eq!(selection_order(&p, &to, &from), Ordering::Less, "{} -> {}", current, c.tag);
        }
    }

    #[test]
    fn downgrades_only_with_allow_downgrade(
        current in version_tag(),
        registry in prop::collection::vec(version_tag(), 1..8),
    ) {
        let mut p = semver(None);
        p.allow_downgrade = true;
        let candidates = tags(&registry.iter().map(String::as_str).collect::<Vec<_>>());
        // With allowDowngrade the best candidate of the family is chosen whatever the current is.
        let best = rank(&p, Some(&current), &candidates).into_iter().find(|r| r.excluded.is_none());
        match (choose(&p, Some(&current), &candidates), best) {
            (Decision::Update(c), Some(b)) => prop_assert_eq!(c.tag, b.tag),
            (Decision::UpToDate, Some(_)) => {}
            (Decision::Hold(_), None) => {}
            (d, b) => prop_assert!(false, "{:?} with best {:?}", d, b),
        }
    }

    #[test]
    fn constraint_parsing_never_panics(s in "[0-9vxX*.,|<>=!~^ +a-z-]{0,24}") {
        if let Ok(c) = Constraint::parse(&s) {
            let _ = c.matches_with(&semver::Version::new(1, 2, 3), true);
        }
    }

    #[test]
    fn constraint_parsing_never_panics_on_any_text(s in "\\PC{0,32}") {
        let _ = Constraint::parse(&s);
        let _ = TagVersion::parse(&s);
    }
}

fn full_version() -> impl proptest::strategy::Strategy<Value = semver::Version> {
    (0u64..3, 0u64..3, 0u64..3).prop_map(|(a, b, c)| semver::Version::new(a, b, c))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// Where Masterminds and Cargo agree (full versions, no pre-releases), the constraint must
    /// agree with `semver::VersionReq`.
    #[test]
    fn agrees_with_version_req_on_full_versions(
        comparators in prop::collection::vec(
            (prop::sample::select(vec![">=", "<", ">", "<=", "=", "^", "~"]), full_version()),
            1..3,
        ),
        v in full_version(),
    ) {
        let text = comparators.iter().map(|(op, b)| format!("{op}{b}")).collect::<Vec<_>>().join(", ");
        // Masterminds reads `~0.0.0` as "anything"; Cargo as `<0.1.0`.
        proptest::prop_assume!(!text.contains("~0.0.0"));
        let ours = Constraint::parse(&text).unwrap();
        let cargo = semver::VersionReq::parse(&text).unwrap();
        prop_assert_eq!(ours.matches(&v), cargo.matches(&v), "{} vs {}", text, v);
    }
}

// === minAge ===

fn aged(tag: &str, minutes: Option<u64>) -> TagCandidate {
    TagCandidate {
        age: minutes.map(|m| std::time::Duration::from_secs(m * 60)),
        ..TagCandidate::new(tag)
    }
}

fn min_age(mut p: ImagePolicy, minutes: u64) -> ImagePolicy {
    p.min_age = Some(std::time::Duration::from_secs(minutes * 60));
    p
}

#[test]
fn min_age_holds_a_newer_tag_until_it_is_old_enough_and_names_it() {
    let p = min_age(semver(None), 30);
    let list = [aged("1.2.0", Some(600)), aged("1.3.0", Some(12))];
    assert_eq!(
        outcome(choose(&p, Some("1.2.0"), &list)),
        "hold: newer tag 1.3.0 is 12m old, minAge 30m"
    );
    let list = [aged("1.2.0", Some(600)), aged("1.3.0", Some(31))];
    assert_eq!(outcome(choose(&p, Some("1.2.0"), &list)), "1.3.0");
}

#[test]
fn min_age_moves_to_the_newest_tag_that_is_old_enough() {
    let p = min_age(semver(None), 30);
    let list = [
        aged("1.2.0", Some(600)),
        aged("1.2.5", Some(45)),
        aged("1.3.0", Some(5)),
    ];
    assert_eq!(outcome(choose(&p, Some("1.2.0"), &list)), "1.2.5");
    let ranked = rank(&p, Some("1.2.0"), &list);
    let young = ranked.iter().find(|r| r.tag == "1.3.0").unwrap();
    assert_eq!(
        young.excluded.as_ref().map(ToString::to_string).as_deref(),
        Some("5m old, minAge 30m")
    );
}

#[test]
fn min_age_takes_an_unknown_age_as_too_young_and_says_why() {
    let p = min_age(semver(None), 30);
    let list = [aged("1.2.0", Some(600)), aged("1.3.0", None)];
    let got = outcome(choose(&p, Some("1.2.0"), &list));
    assert!(
        got.starts_with("hold: newer tag 1.3.0 is of unknown age") && got.contains("--state-dir"),
        "{got}"
    );
}

#[test]
fn min_age_leaves_a_young_current_tag_alone() {
    // Deployed by hand before it was old enough: not moved back, not held.
    let p = min_age(semver(None), 30);
    let list = [aged("1.2.0", Some(600)), aged("1.3.0", Some(5))];
    assert_eq!(outcome(choose(&p, Some("1.3.0"), &list)), "=");
    // Without minAge the same listing is simply up to date too.
    assert_eq!(outcome(choose(&semver(None), Some("1.3.0"), &list)), "=");
}

#[test]
fn min_age_under_newest_build_reads_the_age_it_is_given() {
    let p = min_age(policy(Strategy::NewestBuild), 60);
    let mut old = at("build-1", 1_000);
    old.age = Some(std::time::Duration::from_secs(7200));
    let mut new = at("build-2", 2_000);
    new.age = Some(std::time::Duration::from_secs(600));
    assert_eq!(
        outcome(choose(&p, Some("build-1"), &[old.clone(), new.clone()])),
        "hold: newer tag build-2 is 10m old, minAge 1h"
    );
    assert_eq!(outcome(choose(&p, None, &[old, new])), "build-1");
}

#[test]
fn ranks_below_reads_the_policys_order_from_tag_names() {
    let p = semver(None);
    assert_eq!(ranks_below(&p, "1.2.9", "1.3.0"), Some(true));
    assert_eq!(ranks_below(&p, "1.3.0", "1.2.9"), Some(false));
    assert_eq!(ranks_below(&p, "latest", "1.3.0"), None);
    let ascending = policy(Strategy::Alphabetical { descending: false });
    assert_eq!(ranks_below(&ascending, "b", "a"), Some(true));
    assert_eq!(ranks_below(&policy(Strategy::NewestBuild), "a", "b"), None);
}
