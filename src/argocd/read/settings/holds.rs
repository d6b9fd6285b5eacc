//! `tagpilot.dev/hold` and `tagpilot.dev/release-hold`: a person holding a tag of an
//! Application's image, or releasing a hold, from the Application itself (issue 19). Both read
//! `<alias>=<tag>[, <alias>=<tag>…]`, the aliases those of `image-list`. A hold lasts while the
//! annotation is there; a release is applied by the next cycle to the holds on that alias whose
//! tag it names (a failed tag, a person's rollback, a hold), and is harmless left in place.

use super::read::Given;
use super::{AppSettings, SkippedAnnotation};

/// One `<alias>=<tag>` of a hold or release annotation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HoldRequest {
    pub alias: String,
    pub tag: String,
}

/// Reads `hold` and `release` into `out`, whose images are read already; an entry that cannot be
/// read, or names an alias not in `image-list`, makes the whole annotation skipped with why (a
/// hold half-read could release what was meant to stay held).
pub(super) fn read(
    hold: Option<Given<String>>,
    release: Option<Given<String>>,
    out: &mut AppSettings,
) {
    if let Some(given) = hold {
        out.holds = requests(given, out);
    }
    if let Some(given) = release {
        out.releases = requests(given, out);
    }
}

fn requests(given: Given<String>, out: &mut AppSettings) -> Vec<HoldRequest> {
    match parse(&given.value, out) {
        Ok(requests) => requests,
        Err(reason) => {
            out.skipped.push(SkippedAnnotation {
                key: given.key,
                reason,
            });
            Vec::new()
        }
    }
}

fn parse(value: &str, out: &AppSettings) -> Result<Vec<HoldRequest>, String> {
    let mut requests = Vec::new();
    for entry in value.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let Some((alias, tag)) = entry.split_once('=') else {
            return Err(format!("{entry:?} is not <alias>=<tag>"));
        };
        let (alias, tag) = (alias.trim(), tag.trim());
        if tag.is_empty() || !crate::image::is_valid_tag(tag) {
            return Err(format!("{tag:?} in {entry:?} is not a tag"));
        }
        if !out.images.iter().any(|i| i.alias == alias) {
            return Err(format!("alias {alias:?} is not in image-list"));
        }
        requests.push(HoldRequest {
            alias: alias.to_string(),
            tag: tag.to_string(),
        });
    }
    if requests.is_empty() {
        return Err("names no <alias>=<tag>".to_string());
    }
    Ok(requests)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::HoldRequest;
    use crate::argocd::read::annotations::parse;

    fn read(extra: &[(&str, &str)]) -> super::AppSettings {
        let mut annotations: BTreeMap<String, String> = extra
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        annotations.insert(
            "argocd-image-updater.argoproj.io/image-list".into(),
            "api=registry.example/api, web=registry.example/web".into(),
        );
        parse(&annotations).unwrap()
    }

    #[test]
    fn hold_and_release_read_alias_tag_pairs_under_tagpilots_prefix() {
        let s = read(&[
            ("tagpilot.dev/hold", "api=1.3.0, web=2.0.0"),
            ("tagpilot.dev/release-hold", "api=1.2.0"),
        ]);
        let pair = |alias: &str, tag: &str| HoldRequest {
            alias: alias.into(),
            tag: tag.into(),
        };
        assert_eq!(s.holds, [pair("api", "1.3.0"), pair("web", "2.0.0")]);
        assert_eq!(s.releases, [pair("api", "1.2.0")]);
        assert!(s.skipped.is_empty(), "{:?}", s.skipped);
    }

    #[test]
    fn a_hold_that_cannot_be_read_is_skipped_whole_with_why() {
        let s = read(&[
            ("tagpilot.dev/hold", "api=1.3.0, worker=1.0.0"),
            ("tagpilot.dev/release-hold", "api"),
            ("argocd-image-updater.argoproj.io/hold", "api=1.3.0"),
        ]);
        assert!(s.holds.is_empty() && s.releases.is_empty());
        let skipped: Vec<(&str, &str)> = s
            .skipped
            .iter()
            .map(|k| (k.key.as_str(), k.reason.as_str()))
            .collect();
        assert_eq!(
            skipped,
            [
                (
                    "argocd-image-updater.argoproj.io/hold",
                    "holds are tagpilot's own: read as tagpilot.dev/hold only"
                ),
                ("tagpilot.dev/hold", "alias \"worker\" is not in image-list"),
                ("tagpilot.dev/release-hold", "\"api\" is not <alias>=<tag>"),
            ]
        );
    }
}
