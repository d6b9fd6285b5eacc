//! `spec.chart` (issue 32): a policy follows one image or one chart, and what a chart has no
//! use for is refused where it is written.

use serde_saphyr::Spanned;

use super::Validator;
use super::raw::RawChart;
use crate::image::{Platform, Repository};
use crate::policy::chart::Chart;
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
    /// as written, and the chart when it follows one.
    pub(super) fn followed(
        &mut self,
        spec_at: SourceLocation,
        image: Option<Spanned<String>>,
        chart: Option<Spanned<RawChart>>,
    ) -> (Option<Repository>, Option<String>, Option<Chart>) {
        match (image, chart) {
            (Some(image), None) => match Repository::parse(&image.value) {
                Ok(r) => (Some(r), Some(image.value), None),
                Err(e) => {
                    self.error_from(&image, format!("spec.image: {e}"), e);
                    (None, None, None)
                }
            },
            (None, Some(chart)) => {
                match Chart::parse(&chart.value.repository, chart.value.name.as_deref()) {
                    Ok(c) => (Some(c.key.clone()), Some(c.to_string()), Some(c)),
                    Err(e) => {
                        self.error(&chart, format!("spec.chart: {e}"));
                        (None, None, None)
                    }
                }
            }
            (Some(image), Some(_)) => {
                self.error(
                    &image,
                    "spec.image and spec.chart are both set; a policy follows one image or one \
                     chart (bind an image to a chart with a second policy)",
                );
                (None, None, None)
            }
            (None, None) => {
                self.errors.push(PolicyError::Invalid {
                    location: spec_at,
                    policy: self.policy.clone(),
                    message: "spec sets neither image nor chart; say what the policy follows"
                        .to_string(),
                    error: None,
                });
                (None, None, None)
            }
        }
    }
}
