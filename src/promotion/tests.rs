use std::cmp::Ordering;
use std::time::Duration;

use jiff::Timestamp;

use super::{Decision, Downstream, FanIn, Forbidden, Upstream, Verification, Waiting, decide};

const HOUR: Duration = Duration::from_secs(3600);

fn at(text: &str) -> Timestamp {
    text.parse().unwrap()
}

fn semver(a: &str, b: &str) -> Ordering {
    semver::Version::parse(a)
        .unwrap()
        .cmp(&semver::Version::parse(b).unwrap())
}

fn anything(_: &str) -> Result<(), Forbidden> {
    Ok(())
}

fn nothing_held(_: &str) -> Option<String> {
    None
}

fn prod(current: &'static str) -> Downstream<'static> {
    Downstream {
        current: Some(current),
        order: &semver,
        allowed: &anything,
        held: &nothing_held,
    }
}

/// `name` running `tag` since 10:00, verified healthy at 10:05.
fn verified(name: &str, tag: &str) -> Upstream {
    Upstream {
        name: name.into(),
        tag: Some(tag.into()),
        since: Some(at("2026-11-25T10:00:00Z")),
        verification: Verification::Verified {
            at: at("2026-11-25T10:05:00Z"),
        },
    }
}

#[test]
fn a_verified_tag_is_promoted_once_it_has_soaked_and_not_before() {
    let staging = [verified("argocd/shop-staging", "1.4.0")];
    let early = decide(
        &staging,
        FanIn::All,
        2 * HOUR,
        &prod("1.3.0"),
        at("2026-11-25T11:05:00Z"),
    );
    assert_eq!(
        early,
        Decision::Wait(vec![Waiting::Soaking {
            upstream: "argocd/shop-staging".into(),
            tag: "1.4.0".into(),
            left: HOUR,
        }])
    );
    let Decision::Wait(why) = early else {
        unreachable!()
    };
    assert_eq!(
        why[0].to_string(),
        "1.4.0 soaks in argocd/shop-staging: 1h left"
    );
    let later = decide(
        &staging,
        FanIn::All,
        2 * HOUR,
        &prod("1.3.0"),
        at("2026-11-25T12:05:00Z"),
    );
    let Decision::Promote { tag, evidence } = later else {
        panic!("{later:?}")
    };
    assert_eq!(tag, "1.4.0");
    assert_eq!(
        evidence[0].healthy_for,
        2 * HOUR,
        "counted from the verification"
    );
    assert_eq!(evidence[0].since, Some(at("2026-11-25T10:00:00Z")));
}

#[test]
fn a_tag_not_verified_or_failed_upstream_never_reaches_the_next_environment() {
    let mut staging = verified("argocd/shop-staging", "1.4.0");
    staging.verification = Verification::Pending;
    let now = at("2026-11-26T10:00:00Z");
    assert_eq!(
        decide(
            std::slice::from_ref(&staging),
            FanIn::All,
            HOUR,
            &prod("1.3.0"),
            now
        ),
        Decision::Wait(vec![Waiting::NotVerified {
            upstream: "argocd/shop-staging".into(),
            tag: "1.4.0".into()
        }])
    );
    staging.verification = Verification::Failed {
        reason: "health Degraded after the sync".into(),
    };
    let failed = decide(&[staging], FanIn::All, HOUR, &prod("1.3.0"), now);
    let Decision::Wait(why) = failed else {
        panic!("{failed:?}")
    };
    assert_eq!(
        why[0].to_string(),
        "1.4.0 failed in argocd/shop-staging: health Degraded after the sync"
    );
}

#[test]
fn a_verification_that_ended_in_an_error_upstream_waits_named_even_with_fan_in_any() {
    let mut staging = verified("policy shop-staging", "1.4.0");
    staging.verification = Verification::Errored {
        reason: "Application argocd/shop-staging could not be followed".into(),
    };
    let now = at("2026-11-26T10:00:00Z");
    for fan_in in [FanIn::All, FanIn::Any] {
        let decided = decide(
            std::slice::from_ref(&staging),
            fan_in,
            HOUR,
            &prod("1.3.0"),
            now,
        );
        let Decision::Wait(why) = decided else {
            panic!("{decided:?}")
        };
        assert_eq!(
            why[0].to_string(),
            "1.4.0's verification in policy shop-staging ended in an error: \
             Application argocd/shop-staging could not be followed"
        );
    }
}

#[test]
fn without_cluster_access_the_soak_counts_from_the_commit() {
    let staging = Upstream {
        verification: Verification::FromGit,
        ..verified("staging/apps/api", "1.4.0")
    };
    let now = at("2026-11-25T11:30:00Z");
    assert!(matches!(
        decide(
            std::slice::from_ref(&staging),
            FanIn::All,
            HOUR,
            &prod("1.3.0"),
            now
        ),
        Decision::Promote { .. }
    ));
    assert!(matches!(
        decide(&[staging], FanIn::All, 2 * HOUR, &prod("1.3.0"), now),
        Decision::Wait(w) if matches!(&w[0], Waiting::Soaking { left, .. } if *left == HOUR / 2)
    ));
}

#[test]
fn fan_in_all_needs_every_upstream_on_one_tag_and_any_takes_the_newest_offered() {
    let eu = verified("argocd/shop-staging-eu", "1.4.0");
    let us = verified("argocd/shop-staging-us", "1.5.0");
    let now = at("2026-11-26T10:00:00Z");
    let all = decide(
        &[eu.clone(), us.clone()],
        FanIn::All,
        HOUR,
        &prod("1.3.0"),
        now,
    );
    let Decision::Wait(why) = all else {
        panic!("{all:?}")
    };
    assert_eq!(
        why[0].to_string(),
        "the upstreams run different tags (argocd/shop-staging-eu runs 1.4.0, \
         argocd/shop-staging-us runs 1.5.0)"
    );
    let any = decide(&[eu.clone(), us], FanIn::Any, HOUR, &prod("1.3.0"), now);
    assert!(
        matches!(any, Decision::Promote { ref tag, ref evidence } if tag == "1.5.0" && evidence.len() == 1)
    );
    // `any` still takes what one upstream offers while another is not ready.
    let pending = Upstream {
        verification: Verification::Pending,
        ..verified("argocd/shop-staging-us", "1.5.0")
    };
    assert!(matches!(
        decide(&[eu.clone(), pending.clone()], FanIn::Any, HOUR, &prod("1.3.0"), now),
        Decision::Promote { ref tag, .. } if tag == "1.4.0"
    ));
    assert!(matches!(
        decide(&[eu, pending], FanIn::All, HOUR, &prod("1.3.0"), now),
        Decision::Wait(_)
    ));
}

#[test]
fn the_downstream_policy_still_decides_never_backwards_never_forbidden_never_held() {
    let staging = [verified("argocd/shop-staging", "2.0.0")];
    let now = at("2026-11-26T10:00:00Z");
    assert_eq!(
        decide(&staging, FanIn::All, HOUR, &prod("2.0.0"), now),
        Decision::UpToDate
    );
    assert_eq!(
        decide(&staging, FanIn::All, HOUR, &prod("2.1.0"), now),
        Decision::UpToDate,
        "an upstream behind the downstream never moves it back"
    );
    let only_1x = |tag: &str| {
        if tag.starts_with("1.") {
            Ok(())
        } else {
            Err("outside the range 1.x".into())
        }
    };
    let ranged = Downstream {
        allowed: &only_1x,
        ..prod("1.3.0")
    };
    let forbidden = decide(&staging, FanIn::All, HOUR, &ranged, now);
    let Decision::Wait(why) = forbidden else {
        panic!("{forbidden:?}")
    };
    assert_eq!(
        why[0].to_string(),
        "2.0.0 is not allowed here: outside the range 1.x"
    );
    let held_upstream = |tag: &str| {
        (tag == "2.0.0").then(|| "failed in Application argocd/shop-staging".to_string())
    };
    let holding = Downstream {
        held: &held_upstream,
        ..prod("1.3.0")
    };
    let held = decide(&staging, FanIn::All, HOUR, &holding, now);
    let Decision::Wait(why) = held else {
        panic!("{held:?}")
    };
    assert_eq!(
        why[0].to_string(),
        "2.0.0 is held: failed in Application argocd/shop-staging"
    );
}

#[test]
fn an_upstream_that_does_not_run_the_image_is_said_so() {
    let staging = Upstream {
        tag: None,
        ..verified("argocd/shop-staging", "1.0.0")
    };
    let decision = decide(
        &[staging],
        FanIn::Any,
        HOUR,
        &prod("1.3.0"),
        at("2026-11-26T10:00:00Z"),
    );
    let Decision::Wait(why) = decision else {
        panic!("{decision:?}")
    };
    assert_eq!(
        why[0].to_string(),
        "argocd/shop-staging does not run the image"
    );
}

#[test]
fn fan_in_any_takes_the_next_offered_tag_when_the_newest_is_forbidden_or_held_here() {
    let now = at("2026-11-26T10:00:00Z");
    let upstreams = [
        verified("argocd/shop-staging-eu", "1.4.0"),
        verified("argocd/shop-staging-us", "1.6.0"),
        verified("argocd/shop-staging-ap", "1.5.0"),
    ];
    let below_1_6 = |tag: &str| match semver(tag, "1.6.0") {
        Ordering::Less => Ok(()),
        _ => Err("out of range <1.6".into()),
    };
    let held_1_5 = |tag: &str| (tag == "1.5.0").then(|| "failed in staging-ap".to_string());
    let downstream = Downstream {
        current: Some("1.3.0"),
        order: &semver,
        allowed: &below_1_6,
        held: &held_1_5,
    };
    // 1.6.0 is forbidden and 1.5.0 held here: 1.4.0, which staging-eu runs, is taken.
    let Decision::Promote { tag, evidence } =
        decide(&upstreams, FanIn::Any, HOUR, &downstream, now)
    else {
        panic!("the next offered tag is taken")
    };
    assert_eq!(tag, "1.4.0");
    assert_eq!(evidence.len(), 1);
    assert_eq!(evidence[0].upstream, "argocd/shop-staging-eu");

    // Nothing newer than the current tag left: it waits, naming each tag refused.
    let at_1_4 = Downstream {
        current: Some("1.4.0"),
        ..downstream
    };
    let Decision::Wait(why) = decide(&upstreams, FanIn::Any, HOUR, &at_1_4, now) else {
        panic!("waits")
    };
    let why: Vec<String> = why.iter().map(ToString::to_string).collect();
    assert_eq!(
        why,
        vec![
            "1.6.0 is not allowed here: out of range <1.6".to_string(),
            "1.5.0 is held: failed in staging-ap".to_string(),
        ]
    );
    // Never backwards: an older offered tag is not a fallback.
    let at_1_5 = Downstream {
        current: Some("1.5.0"),
        held: &nothing_held,
        ..at_1_4
    };
    assert!(matches!(
        decide(&upstreams, FanIn::Any, HOUR, &at_1_5, now),
        Decision::Wait(ref why) if why.len() == 1
    ));
}
