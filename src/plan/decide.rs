//! Deciding one reference: the policy's choice among the candidates, and the digest when the
//! reference pins one. Registry look-ups go through [`Inspector`], once per (repository, tag).
//!
//! A policy's required platforms are checked here, for every strategy, on the registry's
//! answer: the chosen candidate is inspected, and when its image lacks one it is passed over
//! for the next (`choose_checked`). Only the candidates up to the first that qualifies are
//! inspected; a policy without platforms inspects nothing for them.

use std::collections::HashMap;

use futures_util::stream::{self, StreamExt};

use super::model::SkippedTags;
use super::reasons::{HoldReason, IMPLICIT_TAG};
use super::{Progress, REGISTRY_CONCURRENCY};
use crate::image::{Platform, Repository, is_valid_digest, is_valid_tag};
use crate::manifest::{FieldKind, ImageField, MarkerPart, Pins};
use crate::policy::{ImagePolicy, Strategy};
use crate::registry::{ImageInfo, Registry, RegistryError, SignatureVerdict};
use crate::select::{self, Decision, SkipReason, Skipped, TagCandidate};

/// Why a reference could not be decided: the registry did not answer what was needed.
pub type DecideError = RegistryError;

/// What one image reference should become.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Move { tag: String, digest: Option<String> },
    Stay,
    Hold(HoldReason),
}

/// What deciding a field reads from it: the tag and digest it holds, the part a marker holds,
/// and which parts it lets tagpilot write. Kept for every owned field while the registries are
/// asked, in place of the whole field (its slots and names), which a large tree cannot afford
/// 100,000 times over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct FieldFacts {
    tag: Option<Box<str>>,
    digest: Option<Box<str>>,
    marker: Option<MarkerPart>,
    pins: Pins,
    /// A kustomize entry that pins no version: what it has instead (`` only `newName` ``).
    pins_nothing: Option<&'static str>,
    /// A whole reference without tag or digest: decided as the `latest` it is pulled as.
    implicit_latest: bool,
    /// Helm values with an empty tag: the chart's own appVersion (see [`EMPTY_TAG`]).
    empty_tag: bool,
    /// Helm values with no tag key: the chart's default tag (see [`MISSING_TAG`]).
    missing_tag: bool,
}

impl FieldFacts {
    pub(super) fn of(field: &ImageField) -> Self {
        let (tag, digest) = field.current();
        FieldFacts {
            tag: tag.map(Box::from),
            digest: digest.map(Box::from),
            marker: match field.kind {
                FieldKind::Marker { part, .. } => Some(part),
                _ => None,
            },
            pins: field.pins(),
            pins_nothing: field.pins_nothing(),
            implicit_latest: field.implicit_latest(),
            empty_tag: field.empty_tag(),
            missing_tag: field.missing_tag(),
        }
    }

    /// The tag and digest the field holds now.
    pub(super) fn current(&self) -> (Option<&str>, Option<&str>) {
        (self.tag.as_deref(), self.digest.as_deref())
    }

    pub(super) fn pins(&self) -> Pins {
        self.pins
    }
}

/// Decides one field: a `:name` or `:digest` marker holds no tag (the policy's best tag is the
/// target), and a `:digest` marker always pins.
pub(super) async fn decide<R: Registry>(
    policy: &ImagePolicy,
    field: &FieldFacts,
    candidates: &[TagCandidate],
    inspector: &Inspector<'_, R>,
) -> Result<Outcome, DecideError> {
    let (current_tag, current_digest) = field.current();
    // An untagged reference is the `latest` a runtime pulls, decided exactly as an explicit
    // one: under semver it is held unless the policy replaces unreadable tags.
    let current_tag = match field.implicit_latest {
        true => Some(IMPLICIT_TAG),
        false => current_tag,
    };
    let (current_tag, pin) = match field.marker {
        Some(MarkerPart::Name) => (None, false),
        Some(MarkerPart::Digest) => (None, true),
        _ => (current_tag, false),
    };
    // A kustomize entry is written only in the keys it has: tag strategies need `newTag`, the
    // digest strategy needs `digest`.
    let pins = field.pins;
    let digest_strategy = matches!(policy.strategy, Strategy::Digest { .. });
    if let Some(only) = field.pins_nothing {
        return Ok(Outcome::Hold(HoldReason::PinsNoVersion {
            only,
            digest_strategy,
        }));
    }
    if digest_strategy && !pins.digest {
        return Ok(Outcome::Hold(HoldReason::PinsNoDigest));
    }
    if !digest_strategy && !pins.tag {
        return Ok(Outcome::Hold(HoldReason::PinsNoTag {
            strategy: policy.strategy.name(),
        }));
    }
    // An empty tag (`tag: ""`) or none in Helm values leaves the chart's own version running,
    // which no tag written here should pin away; held like a tag the strategy cannot read.
    if field.empty_tag && !policy.replace_unreadable_tags {
        return Ok(Outcome::Hold(HoldReason::EmptyTag));
    }
    if field.missing_tag && !digest_strategy && !policy.replace_unreadable_tags {
        return Ok(Outcome::Hold(HoldReason::MissingTag));
    }
    let outcome = decide_reference(
        policy,
        current_tag,
        current_digest,
        pin,
        candidates,
        inspector,
    )
    .await?;
    Ok(match outcome {
        Outcome::Hold(reason) if field.implicit_latest => {
            Outcome::Hold(HoldReason::ImplicitLatest(Box::new(reason)))
        }
        other => other,
    })
}

/// Decides a reference currently on `current_tag`/`current_digest`, wherever it is written (a
/// manifest field, an Argo CD override). Digest pinning applies when `pin` is set, when the
/// policy asks for it, when its strategy is `digest`, or when the reference already carries a
/// digest (leaving an old digest beside a new tag would pin the old image).
#[tracing::instrument(skip_all, fields(policy = %policy.name, image = %policy.image))]
pub async fn decide_reference<R: Registry>(
    policy: &ImagePolicy,
    current_tag: Option<&str>,
    current_digest: Option<&str>,
    pin: bool,
    candidates: &[TagCandidate],
    inspector: &Inspector<'_, R>,
) -> Result<Outcome, DecideError> {
    let tag = match &policy.strategy {
        Strategy::Digest { tag } => {
            // `choose` is not asked here (the followed tag is the answer even when the listing
            // lacks it), so the unreadable-tag rule is applied here too.
            if let Some(why) = current_tag.and_then(|c| select::unreadable_current(policy, c, &[]))
                && !policy.replace_unreadable_tags
            {
                return Ok(Outcome::Hold(why.into()));
            }
            if let Some(reason) = inspector.refusal(policy, tag).await? {
                let skipped = Skipped {
                    tag: tag.clone(),
                    reason,
                };
                let hold = HoldReason::Refused(skipped.clone());
                inspector.record_skipped(policy, vec![skipped]).await;
                return Ok(Outcome::Hold(hold));
            }
            tag.clone()
        }
        _ => match choose_checked(policy, current_tag, candidates, inspector).await? {
            Decision::Update(c) => c.tag,
            Decision::UpToDate => match current_tag {
                Some(t) => t.to_string(),
                None => return Ok(Outcome::Stay),
            },
            Decision::Hold(reason) => return Ok(Outcome::Hold(reason.into())),
        },
    };
    // The digest strategy follows one tag: its digest is what must be signed.
    if matches!(policy.strategy, Strategy::Digest { .. })
        && let Some(reason) = inspector.not_signed(policy, &tag).await?
    {
        return Ok(Outcome::Hold(HoldReason::Refused(Skipped { tag, reason })));
    }
    let pin = pin
        || policy.pin_digest
        || matches!(policy.strategy, Strategy::Digest { .. })
        || current_digest.is_some();
    let digest = if pin {
        Some(inspector.digest(policy, &tag).await?)
    } else {
        None
    };
    if Some(tag.as_str()) == current_tag && digest.as_deref() == current_digest {
        return Ok(Outcome::Stay);
    }
    Ok(Outcome::Move { tag, digest })
}

/// The policy's choice among `candidates`, passing over each best candidate whose image the
/// policy refuses (a required platform missing) for the next, until one passes. Only a tag
/// that would be chosen is inspected, so a policy whose newest tag passes costs one
/// inspection. Skips that leave the reference where it is hold it, naming the newest skipped
/// tag: "up to date" would hide a newer tag the policy refused.
async fn choose_checked<R: Registry>(
    policy: &ImagePolicy,
    current_tag: Option<&str>,
    candidates: &[TagCandidate],
    inspector: &Inspector<'_, R>,
) -> Result<Decision, DecideError> {
    let (decision, skipped) = choose_passing(policy, current_tag, candidates, inspector).await?;
    let Some(passed) = select::held_by_skips(&skipped) else {
        return Ok(decision);
    };
    inspector.record_skipped(policy, skipped).await;
    Ok(match decision {
        update @ Decision::Update(_) => update,
        Decision::UpToDate => Decision::Hold(select::HoldReason::PassedOver { held: None, passed }),
        Decision::Hold(reason) => Decision::Hold(select::HoldReason::PassedOver {
            held: Some(Box::new(reason)),
            passed,
        }),
    })
}

/// The choice among the candidates the policy does not refuse, and the ones it passed over on
/// the way, best first (see [`choose_checked`]).
pub(super) async fn choose_passing<R: Registry>(
    policy: &ImagePolicy,
    current_tag: Option<&str>,
    candidates: &[TagCandidate],
    inspector: &Inspector<'_, R>,
) -> Result<(Decision, Vec<Skipped>), DecideError> {
    let mut skipped: Vec<Skipped> = Vec::new();
    let mut remaining: Option<Vec<TagCandidate>> = None;
    loop {
        let list = remaining.as_deref().unwrap_or(candidates);
        let decision = select::choose(policy, current_tag, list);
        let Decision::Update(chosen) = &decision else {
            return Ok((decision, skipped));
        };
        let Some(reason) = inspector.refusal(policy, &chosen.tag).await? else {
            return Ok((decision, skipped));
        };
        let tag = chosen.tag.clone();
        remaining = Some(list.iter().filter(|c| c.tag != tag).cloned().collect());
        skipped.push(Skipped { tag, reason });
    }
}

/// Registry look-ups by (repository, tag, wanted platforms), each done at most once per plan.
/// The platforms are part of the key because the build time depends on them. It also keeps
/// the candidates each policy passed over ([`Inspector::into_skipped`]), for the report.
pub struct Inspector<'r, R> {
    registry: &'r R,
    seen: tokio::sync::Mutex<HashMap<InspectionKey, ImageInfo>>,
    /// Per policy and image, in the order first met: the tags passed over, each once.
    skipped: tokio::sync::Mutex<Vec<(String, Repository, Vec<Skipped>)>>,
}

type InspectionKey = (Repository, String, Vec<Platform>);

impl<'r, R: Registry> Inspector<'r, R> {
    pub fn new(registry: &'r R) -> Self {
        Inspector {
            registry,
            seen: Default::default(),
            skipped: Default::default(),
        }
    }

    /// The registry it asks.
    pub fn registry(&self) -> &'r R {
        self.registry
    }

    /// Why `tag` may not be taken under `policy` though it ranks: the platforms the policy
    /// requires that its image lacks (every one, or for Image Updater's any one). Asks the
    /// registry only when the policy requires platforms, once per (repository, tag, platforms)
    /// as every inspection.
    async fn refusal(
        &self,
        policy: &ImagePolicy,
        tag: &str,
    ) -> Result<Option<SkipReason>, RegistryError> {
        if !policy.platforms.is_empty() {
            let info = self.info(policy, tag).await?;
            let missing = if policy.any_platform {
                select::no_wanted_platform(&policy.platforms, &info.platforms)
            } else {
                select::missing_platforms(&policy.platforms, &info.platforms)
            };
            if let Some(missing) = missing {
                return Ok(Some(missing));
            }
        }
        self.not_signed(policy, tag).await
    }

    /// Why `tag` is no candidate for its signatures (issue 22), or `None` when it may be
    /// chosen (it verifies, or no `signatures:` applies). Only then is its digest asked for.
    async fn not_signed(
        &self,
        policy: &ImagePolicy,
        tag: &str,
    ) -> Result<Option<SkipReason>, RegistryError> {
        if policy.signatures.is_none() && !self.registry.requires_signatures(&policy.image) {
            return Ok(None);
        }
        let digest = self.digest(policy, tag).await?;
        // Boxed: the verification's future is deep (the crate's client inside the client's
        // memo), and inlined into every planner's future it overflows rustc's layout depth.
        let verdict = Box::pin(self.registry.verify_signatures(
            &policy.image,
            &digest,
            policy.signatures.as_ref(),
        ))
        .await?;
        Ok(match verdict {
            SignatureVerdict::NotRequired | SignatureVerdict::Verified { .. } => None,
            SignatureVerdict::Unsigned => Some(SkipReason::Unsigned),
            SignatureVerdict::Untrusted { found, signer } => {
                Some(SkipReason::Untrusted { found, signer })
            }
            SignatureVerdict::LogRefused { key, why } => Some(SkipReason::LogRefused { key, why }),
            SignatureVerdict::Unverifiable { why, found } => {
                Some(SkipReason::Unverifiable { why, found })
            }
        })
    }

    /// Keeps what `policy` passed over, each tag once.
    async fn record_skipped(&self, policy: &ImagePolicy, skipped: Vec<Skipped>) {
        let mut all = self.skipped.lock().await;
        let index = match all
            .iter()
            .position(|(name, image, _)| *name == policy.name && *image == policy.image)
        {
            Some(i) => i,
            None => {
                all.push((policy.name.clone(), policy.image.clone(), Vec::new()));
                all.len() - 1
            }
        };
        let Some((_, _, have)) = all.get_mut(index) else {
            return;
        };
        for s in skipped {
            if !have.iter().any(|h| h.tag == s.tag) {
                have.push(s);
            }
        }
    }

    /// The tags each policy passed over, per policy and image, for the report.
    pub fn into_skipped(self) -> Vec<SkippedTags> {
        self.skipped
            .into_inner()
            .into_iter()
            .map(|(policy, image, skipped)| SkippedTags::new(&policy, &image.to_string(), skipped))
            .collect()
    }

    async fn info(&self, policy: &ImagePolicy, tag: &str) -> Result<ImageInfo, RegistryError> {
        let key = (
            policy.image.clone(),
            tag.to_string(),
            policy.platforms.clone(),
        );
        if let Some(info) = self.seen.lock().await.get(&key) {
            return Ok(info.clone());
        }
        let info = self
            .registry
            .inspect(&policy.image, tag, &policy.platforms)
            .await?;
        self.seen.lock().await.insert(key, info.clone());
        Ok(info)
    }

    /// The digest a tag points at: from an earlier inspection when there was one, else one HEAD
    /// request (which Docker Hub does not count as a pull).
    async fn digest(&self, policy: &ImagePolicy, tag: &str) -> Result<String, RegistryError> {
        let key = (
            policy.image.clone(),
            tag.to_string(),
            policy.platforms.clone(),
        );
        if let Some(info) = self.seen.lock().await.get(&key) {
            return Ok(info.digest.clone());
        }
        self.registry.digest(&policy.image, tag).await
    }

    /// The tags that pass the policy's filters, with build times when its strategy needs them,
    /// and ages when the policy has a `minAge` (measured at the registry's clock's time of day,
    /// the clock that dated when it first saw each tag).
    #[tracing::instrument(skip_all, fields(policy = %policy.name, image = %policy.image))]
    pub async fn candidates(
        &self,
        policy: &ImagePolicy,
        tags: &[String],
        progress: &dyn Progress,
    ) -> Result<Vec<TagCandidate>, RegistryError> {
        let kept = select::filter_tags(policy, tags);
        if kept.is_empty() {
            // Nothing passes the filters: the tags go to the selection bare, so that its hold
            // says why each was left out, not that the registry has none.
            return Ok(tags.iter().map(TagCandidate::new).collect());
        }
        let mut candidates = if select::needs_build_time(policy) {
            progress.phase("reading build times", kept.len() as u64);
            self.inspect_many(policy, &kept, progress).await?
        } else {
            kept.iter().map(|t| TagCandidate::new(*t)).collect()
        };
        if policy.min_age.is_some() {
            add_ages(
                self.registry,
                policy,
                &mut candidates,
                self.registry.clock().wall(),
            );
        }
        Ok(candidates)
    }

    /// Build times for every kept tag; the strategy that needs them cannot rank without them.
    async fn inspect_many(
        &self,
        policy: &ImagePolicy,
        tags: &[&str],
        progress: &dyn Progress,
    ) -> Result<Vec<TagCandidate>, RegistryError> {
        let owned: Vec<String> = tags.iter().map(|t| t.to_string()).collect();
        let results: Vec<Result<TagCandidate, RegistryError>> = stream::iter(owned)
            .map(|tag| async move {
                let info = self.info(policy, &tag).await;
                progress.advance();
                info.map(|i| TagCandidate {
                    tag,
                    created: i.created,
                    no_image_for_platform: !i.offers_any(&policy.platforms),
                    digest: Some(i.digest),
                    age: None,
                })
            })
            .buffered(REGISTRY_CONCURRENCY)
            .collect()
            .await;
        results.into_iter().collect()
    }
}

/// How long each candidate has existed, for `minAge`: since its build when the strategy reads
/// build times (newestBuild), else since the registry client first saw it (known only with a
/// state directory; unknown otherwise, which `minAge` takes as too young).
fn add_ages<R: Registry>(
    registry: &R,
    policy: &ImagePolicy,
    candidates: &mut [TagCandidate],
    now: jiff::Timestamp,
) {
    let since: Vec<Option<jiff::Timestamp>> = if select::needs_build_time(policy) {
        candidates.iter().map(|c| c.created).collect()
    } else {
        let tags: Vec<&str> = candidates.iter().map(|c| c.tag.as_str()).collect();
        registry.first_seen(&policy.image, &tags)
    };
    for (candidate, since) in candidates.iter_mut().zip(since) {
        // A build time in the future (a skewed clock) is no age at all.
        candidate.age = since.map(|t| match t > now {
            true => std::time::Duration::ZERO,
            false => now.duration_since(t).unsigned_abs(),
        });
    }
}

/// The reference to ask a registry for the version [`version_text`] shows: the digest when
/// there is one (it names the image exactly), else the tag; `None` for a reference without
/// either, which names no image to ask about (`(none)` is for people, not for registries).
pub fn version_reference(text: &str) -> Option<&str> {
    let reference = match text.split_once('@') {
        Some((_, digest)) => digest,
        None => text,
    };
    // A digest marker may hold what is not quite a digest (Flux's own test fixture has
    // `sha256:1234567890abcdef`): nothing a registry could answer.
    (is_valid_digest(reference) || is_valid_tag(reference)).then_some(reference)
}

/// What reports show for a reference without tag or digest.
const NO_VERSION: &str = "(none)";

/// `tag`, `tag@digest` or `digest`, as reports show a reference's version.
pub fn version_text(tag: Option<&str>, digest: Option<&str>) -> String {
    match (tag, digest) {
        (Some(t), Some(d)) => format!("{t}@{d}"),
        (Some(t), None) => t.to_string(),
        (None, Some(d)) => d.to_string(),
        (None, None) => NO_VERSION.to_string(),
    }
}
