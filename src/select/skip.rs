//! Candidates passed over after ranking: the best tag by the policy's order that a check made
//! on the registry's answer refuses (it lacks a platform the policy requires, or a signature
//! its `signatures:` accepts), so selection
//! moves on to the next one. The checks are asked lazily by the planner, best candidate first,
//! and only until one passes; what this module holds is the pure part: the reasons, and
//! whether an image offers every required platform.
//!
//! [`SkipReason`] is one enum for every such check so that the report lists them alike ("which
//! tags were skipped, and why"), whatever refused them.

use std::fmt;

use crate::image::Platform;

use super::PassedOver;

/// Why a ranked candidate was passed over for the next one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SkipReason {
    /// The image does not offer every platform the policy requires (or, under Image Updater's
    /// `platforms`, any of them: then `missing` lists them all): an index without an entry for
    /// each, or a single-platform image built for another.
    MissingPlatforms {
        missing: Vec<Platform>,
        /// What the image does offer: its index's entries, or the single image's own platform.
        offered: Vec<Platform>,
    },
    /// The image does not say which platform it is for (a config without `os`/`architecture`,
    /// index entries without `platform`), so it cannot be shown to offer the required ones;
    /// taking it would widen the requirement.
    PlatformsUnknown,
    /// No cosign signature was found for the image's digest (no `.sig` tag, no bundle among
    /// its referrers) though the policy's `signatures:` requires one.
    Unsigned,
    /// Signatures were found, but none verified with the required keys or identities;
    /// `signer` names a keyless signature's identity and issuer and why it did not count.
    Untrusted {
        found: usize,
        signer: Option<String>,
    },
    /// A signature by a required `key` carries a Rekor bundle that does not verify with the
    /// trust root (`why` completes "its Rekor bundle …"), and no other signature verified.
    LogRefused { key: String, why: String },
    /// A Sigstore bundle was found that cannot be verified (`why`), and none of the `found`
    /// other signatures verified.
    Unverifiable { why: String, found: usize },
}

impl SkipReason {
    /// A bounded name for the reason, as the JSON report and metrics label it.
    pub fn label(&self) -> &'static str {
        match self {
            SkipReason::MissingPlatforms { .. } => "missing_platforms",
            SkipReason::PlatformsUnknown => "platforms_unknown",
            SkipReason::Unsigned => "unsigned",
            SkipReason::Untrusted { .. } => "untrusted",
            SkipReason::LogRefused { .. } => "log_refused",
            SkipReason::Unverifiable { .. } => "unverifiable",
        }
    }
}

impl fmt::Display for SkipReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SkipReason::MissingPlatforms { missing, offered } => write!(
                f,
                "no {} image (offers {})",
                joined(missing, " or "),
                joined(offered, ", ")
            ),
            SkipReason::PlatformsUnknown => {
                f.write_str("its image does not say which platforms it is for")
            }
            SkipReason::Unsigned => f.write_str("not signed (no cosign signature found)"),
            SkipReason::Untrusted { found, signer } => {
                f.write_str("not signed by a required key or identity")?;
                if let Some(signer) = signer {
                    write!(f, ": {signer}")?;
                }
                write!(f, " ({found} signature(s) found, none verified)")
            }
            SkipReason::LogRefused { key, why } => {
                write!(f, "signed by key {key}, but its Rekor bundle {why}")
            }
            SkipReason::Unverifiable { why, found } => {
                write!(f, "a Sigstore bundle was found but {why}")?;
                match found {
                    0 => Ok(()),
                    n => write!(f, " ({n} other signature(s) found, none verified)"),
                }
            }
        }
    }
}

pub(super) fn joined(platforms: &[Platform], sep: &str) -> String {
    let names: Vec<String> = platforms.iter().map(ToString::to_string).collect();
    names.join(sep)
}

/// One candidate passed over, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped {
    pub tag: String,
    pub reason: SkipReason,
}

impl fmt::Display for Skipped {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.tag, self.reason)
    }
}

/// Why an image offering `offered` does not serve every platform of `required`, or `None`
/// when it does (or nothing is required). Platforms match as containerd normalises them
/// ([`Platform::matches`]: `linux/arm64` is `linux/arm64/v8`).
pub fn missing_platforms(required: &[Platform], offered: &[Platform]) -> Option<SkipReason> {
    if required.is_empty() {
        return None;
    }
    if offered.is_empty() {
        return Some(SkipReason::PlatformsUnknown);
    }
    let missing: Vec<Platform> = required
        .iter()
        .filter(|r| !offered.iter().any(|o| r.matches(o)))
        .cloned()
        .collect();
    (!missing.is_empty()).then(|| SkipReason::MissingPlatforms {
        missing,
        offered: offered.to_vec(),
    })
}

/// Why an image offering `offered` serves none of `wanted`, or `None` when it serves one (or
/// nothing is wanted): Argo CD Image Updater's `platforms`, whose `WantsPlatform` accepts an
/// image or index entry for any of them. An image that does not say its platforms serves none,
/// as Image Updater reads an entry without a platform.
pub fn no_wanted_platform(wanted: &[Platform], offered: &[Platform]) -> Option<SkipReason> {
    if wanted.is_empty() {
        return None;
    }
    if offered.is_empty() {
        return Some(SkipReason::PlatformsUnknown);
    }
    let serves = wanted.iter().any(|w| offered.iter().any(|o| w.matches(o)));
    (!serves).then(|| SkipReason::MissingPlatforms {
        missing: wanted.to_vec(),
        offered: offered.to_vec(),
    })
}

/// What a reference that skipped candidates left where it is is held for: the newest skipped
/// tag and why, and how many more were skipped.
pub fn held_by_skips(skipped: &[Skipped]) -> Option<PassedOver> {
    let (first, rest) = skipped.split_first()?;
    Some(PassedOver {
        newest: first.clone(),
        more: rest.len(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn platforms(list: &[&str]) -> Vec<Platform> {
        list.iter().map(|p| p.parse().unwrap()).collect()
    }

    #[test]
    fn an_image_must_offer_every_required_platform() {
        let required = platforms(&["linux/amd64", "linux/arm64"]);
        assert_eq!(
            missing_platforms(&required, &platforms(&["linux/amd64", "linux/arm64/v8"])),
            None,
            "arm64 is arm64/v8"
        );
        let why = missing_platforms(&required, &platforms(&["linux/amd64"])).unwrap();
        assert_eq!(why.to_string(), "no linux/arm64 image (offers linux/amd64)");
        assert_eq!(why.label(), "missing_platforms");
        let why = missing_platforms(&required, &platforms(&["linux/s390x"])).unwrap();
        assert_eq!(
            why.to_string(),
            "no linux/amd64 or linux/arm64 image (offers linux/s390x)"
        );
    }

    #[test]
    fn image_updater_s_platforms_want_any_one_of_them() {
        let wanted = platforms(&["linux/arm64", "linux/amd64"]);
        assert_eq!(
            no_wanted_platform(&wanted, &platforms(&["linux/amd64"])),
            None
        );
        assert_eq!(
            no_wanted_platform(&wanted, &platforms(&["linux/arm64/v8"])),
            None
        );
        let why = no_wanted_platform(&wanted, &platforms(&["linux/s390x"])).unwrap();
        assert_eq!(
            why.to_string(),
            "no linux/arm64 or linux/amd64 image (offers linux/s390x)"
        );
        assert_eq!(
            no_wanted_platform(&wanted, &[]),
            Some(SkipReason::PlatformsUnknown)
        );
        assert_eq!(no_wanted_platform(&[], &[]), None, "nothing wanted");
    }

    #[test]
    fn an_image_that_does_not_say_its_platforms_never_passes() {
        let required = platforms(&["linux/arm64"]);
        assert_eq!(
            missing_platforms(&required, &[]),
            Some(SkipReason::PlatformsUnknown)
        );
        assert_eq!(missing_platforms(&[], &[]), None, "nothing required");
    }

    #[test]
    fn a_hold_names_the_newest_skipped_tag_and_counts_the_rest() {
        let skip = |tag: &str| Skipped {
            tag: tag.into(),
            reason: SkipReason::PlatformsUnknown,
        };
        assert_eq!(held_by_skips(&[]), None);
        assert_eq!(
            held_by_skips(&[skip("1.4.0"), skip("1.3.9")])
                .unwrap()
                .to_string(),
            "newer tag 1.4.0: its image does not say which platforms it is for (1 more skipped)"
        );
    }
}
