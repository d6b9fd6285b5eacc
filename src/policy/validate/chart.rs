//! `spec.chart` (issue 32): a policy follows one image or one chart, and what a chart has no
//! use for is refused where it is written.

use serde_saphyr::Spanned;

use super::Validator;
use super::raw::{RawChart, RawTarget};
use crate::image::{Platform, Repository};
use crate::policy::chart::Chart;
use crate::policy::pattern::{ImagePattern, is_pattern};
use crate::policy::{PolicyError, SourceLocation, Strategy};

impl Validator<'_> {
    /// What a chart has no use for is refused, never ignored: a chart has no platforms and
    /// no image digest to pin, and an HTTP chart repository lists no build times or digests.
    pub(super) fn chart_settings(
        &mut self,
        spec_at: &SourceLocation,
        chart: &Chart,
        strategy: &Option<Strategy>,
        platforms: &[Platform],
        pin_digest: bool,
    ) {
        let mut refuse = |what: &str| {
            self.errors.push(PolicyError::Invalid {
                location: spec_at.clone(),
                policy: self.policy.clone(),
                message: format!("spec.chart: {what}"),
                error: None,
            })
        };
        if !platforms.is_empty() {
            refuse("a chart has no platforms; remove platforms");
        }
        if pin_digest {
            refuse("chart versions are written without a digest; remove pinDigest");
        }
        if !chart.oci
            && let Some(s @ (Strategy::NewestBuild | Strategy::Digest { .. })) = strategy
        {
            refuse(&format!(
                "the {} strategy reads an OCI registry; an HTTP chart repository's index lists versions only (use semver, regex or alphabetical)",
                s.name()
            ));
        }
    }

    /// `spec.image` or `spec.chart`, exactly one: the repository the policy follows, the name
    /// as written, the chart when it follows one, and, for an image, its pattern and priority.
    /// `exclude` and `priority` order image patterns; a chart pattern is not supported, so a
    /// chart policy with either, or a chart written with `*`, is refused at its line.
    pub(super) fn followed(
        &mut self,
        spec_at: SourceLocation,
        image: Option<Spanned<String>>,
        chart: Option<Spanned<RawChart>>,
        (exclude, priority): (Vec<Spanned<String>>, Option<Spanned<i32>>),
        targets: &[Spanned<RawTarget>],
    ) -> Followed {
        match (image, chart) {
            (Some(image), None) => {
                let (repository, pattern, priority) =
                    self.image(&image, exclude, priority, targets);
                Followed {
                    image: repository,
                    image_name: Some(image.value),
                    chart: None,
                    pattern,
                    priority,
                }
            }
            (None, Some(chart)) => {
                if let Some(first) = exclude.first() {
                    self.error(
                        first,
                        "exclude: a chart policy follows one chart; chart patterns are not supported",
                    );
                }
                if let Some(p) = &priority {
                    self.error(
                        p,
                        "priority: orders image patterns only; a chart policy follows one chart",
                    );
                }
                let raw = &chart.value;
                if is_pattern(&raw.repository) || raw.name.as_deref().is_some_and(is_pattern) {
                    self.error(
                        &chart,
                        "spec.chart: a chart pattern is not supported; name one chart (a policy per chart)",
                    );
                    return Followed::default();
                }
                match Chart::parse(&raw.repository, raw.name.as_deref()) {
                    Ok(c) => Followed {
                        image: Some(c.key.clone()),
                        image_name: Some(c.to_string()),
                        chart: Some(c),
                        pattern: None,
                        priority: 0,
                    },
                    Err(e) => {
                        self.error(&chart, format!("spec.chart: {e}"));
                        Followed::default()
                    }
                }
            }
            (Some(image), Some(_)) => {
                self.error(
                    &image,
                    "spec.image and spec.chart are both set; a policy follows one image or one \
                     chart (bind an image to a chart with a second policy)",
                );
                Followed::default()
            }
            (None, None) => {
                self.errors.push(PolicyError::Invalid {
                    location: spec_at,
                    policy: self.policy.clone(),
                    message: "spec sets neither image nor chart; say what the policy follows"
                        .to_string(),
                    error: None,
                });
                Followed::default()
            }
        }
    }
}

/// What `spec.image` or `spec.chart` says the policy follows.
#[derive(Default)]
pub(super) struct Followed {
    /// The repository (for a pattern, its registry and path glob; for a chart, its key).
    pub(super) image: Option<Repository>,
    /// The image or chart as written.
    pub(super) image_name: Option<String>,
    pub(super) chart: Option<Chart>,
    pub(super) pattern: Option<ImagePattern>,
    pub(super) priority: i32,
}
