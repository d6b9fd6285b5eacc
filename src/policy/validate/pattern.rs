//! `spec.image` as one repository or as a pattern (issue 31), with the keys only a pattern
//! reads: `exclude:` and `priority:`. What a pattern cannot mean for many images at once
//! (`kustomize.imageName`, a Helm target that names no repository value) is refused here, at
//! its line, rather than guessed at plan time.

use serde_saphyr::Spanned;

use super::Validator;
use super::raw::RawTarget;
use crate::image::Repository;
use crate::policy::pattern::{ImagePattern, is_pattern};

/// Why `promote:` and a pattern do not go together: an upstream is read per image before
/// planning, and a pattern's images are found only while planning.
pub(super) const PROMOTE_WITH_PATTERN: &str = "promote: a pattern policy cannot promote: its \
     images are found while planning, its upstreams are read before; write a policy for the \
     promoted image";

impl Validator<'_> {
    /// `spec.image`, `exclude` and `priority`: the repository the policy follows (for a
    /// pattern, its registry and path glob), the pattern, and the priority.
    pub(super) fn image(
        &mut self,
        image: &Spanned<String>,
        exclude: Vec<Spanned<String>>,
        priority: Option<Spanned<i32>>,
        targets: &[Spanned<RawTarget>],
    ) -> (Option<Repository>, Option<ImagePattern>, i32) {
        let written = &image.value;
        if !is_pattern(written) {
            if let Some(first) = exclude.first() {
                self.error(
                    first,
                    "exclude: only a pattern image (with * or **) excludes",
                );
            }
            if let Some(p) = &priority {
                self.error(
                    p,
                    "priority: orders patterns only; a policy naming one image exactly always \
                     wins over a pattern",
                );
            }
            let repository = match Repository::parse(written) {
                Ok(r) => Some(r),
                Err(e) => {
                    self.error_from(image, format!("spec.image: {e}"), e);
                    None
                }
            };
            return (repository, None, 0);
        }
        let mut pattern = match ImagePattern::parse(written) {
            Ok(p) => p,
            Err(e) => {
                self.error_from(
                    image,
                    format!("spec.image: pattern {written:?}: {e}"),
                    e.clone(),
                );
                return (None, None, 0);
            }
        };
        for e in &exclude {
            if let Err(err) = pattern.add_exclusion(&e.value) {
                self.error_from(e, format!("exclude: {:?}: {err}", e.value), err.clone());
            }
        }
        for t in targets {
            if t.value.kustomize.is_some() {
                self.error(
                    t,
                    "targets[].kustomize.imageName: a pattern follows many images, so no one \
                     name can stand for them in a kustomization",
                );
            }
            if let Some(h) = &t.value.helm
                && h.value.repository.is_none()
                && h.value.image.is_none()
            {
                self.error(
                    h,
                    "targets[].helm: a pattern policy's Helm values need `repository` or \
                     `image`: without it, which image a tag belongs to cannot be known",
                );
            }
        }
        let repository = Repository {
            registry: pattern.registry.clone(),
            path: pattern.path.clone(),
        };
        (
            Some(repository),
            Some(pattern),
            priority.map_or(0, |p| p.value),
        )
    }
}
