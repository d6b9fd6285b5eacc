//! `promote:` of a policy, checked value by value: which environments it follows, how long
//! their tags must have stayed healthy, and how several of them combine. A value that cannot be
//! read is an error at its line, and the policy is not loaded: it never falls back to following
//! the registry.

use serde_saphyr::Spanned;

use super::raw::{RawPromote, RawUpstream};
use super::{Validator, is_valid_name};
use crate::policy::{FanIn, Promote, Strategy, Upstream};

impl Validator<'_> {
    /// `spec.promote`: at least one upstream, a duration, `all` or `any`.
    pub(super) fn promote(
        &mut self,
        raw: Spanned<RawPromote>,
        strategy: &Option<Strategy>,
    ) -> Option<Promote> {
        let before = self.errors.len();
        let source = self.at(&raw);
        if let Some(Strategy::Digest { .. }) = strategy {
            self.error(
                &raw,
                "promote: the digest strategy follows one mutable tag; an environment promotes \
                 versions, so use semver, regex, newestBuild or alphabetical",
            );
        }
        if raw.value.from.is_empty() {
            self.error(
                &raw,
                "promote.from names no upstream; list the environments to follow \
                 (application, path or policy)",
            );
        }
        let RawPromote {
            from,
            after,
            fan_in,
            write,
        } = raw.value;
        let from: Vec<Upstream> = from.into_iter().filter_map(|u| self.upstream(u)).collect();
        let after = match after {
            None => std::time::Duration::ZERO,
            Some(a) => match humantime::parse_duration(a.value.trim()) {
                Ok(d) => d,
                Err(e) => {
                    self.error(
                        &a,
                        format!(
                            "promote.after: {:?} is not a duration (30m, 2h, 1d): {e}",
                            a.value
                        ),
                    );
                    std::time::Duration::ZERO
                }
            },
        };
        let fan_in = match fan_in {
            None => FanIn::All,
            Some(f) => match f.value.trim() {
                "all" => FanIn::All,
                "any" => FanIn::Any,
                other => {
                    self.error(
                        &f,
                        format!("promote.fanIn: {other:?} is neither `all` nor `any`"),
                    );
                    FanIn::All
                }
            },
        };
        let push = match write {
            None => false,
            Some(w) => match w.value.trim() {
                "pullRequest" => false,
                "push" => true,
                other => {
                    self.error(
                        &w,
                        format!("promote.write: {other:?} is neither `pullRequest` nor `push`"),
                    );
                    false
                }
            },
        };
        if self.errors.len() > before {
            return None;
        }
        Some(Promote {
            from,
            after,
            fan_in,
            push,
            source,
        })
    }

    /// One `promote.from[]` entry.
    fn upstream(&mut self, raw: Spanned<RawUpstream>) -> Option<Upstream> {
        let before = self.errors.len();
        let RawUpstream {
            application,
            namespace,
            path,
            policy,
            repository,
        } = &raw.value;
        let given: Vec<&str> = [
            application.as_ref().map(|_| "application"),
            path.as_ref().map(|_| "path"),
            policy.as_ref().map(|_| "policy"),
        ]
        .into_iter()
        .flatten()
        .collect();
        if given.len() != 1 {
            let what = match given.len() {
                0 => "names none".to_string(),
                _ => format!("names {}", given.join(" and ")),
            };
            self.error(
                &raw,
                format!("promote.from[] {what}; name exactly one of application, path or policy"),
            );
            return None;
        }
        for value in [application, path, policy, namespace, repository]
            .into_iter()
            .flatten()
        {
            if value.value.trim().is_empty() {
                self.error(value, "promote.from[]: an empty value names nothing");
            }
        }
        if let (Some(ns), None) = (namespace, application) {
            self.error(
                ns,
                "promote.from[].namespace is an Application's namespace; it goes with `application`",
            );
        }
        if let (Some(r), Some(_)) = (repository, application) {
            self.error(
                r,
                "promote.from[].repository names where a path or policy is; an Application \
                 is found in the cluster",
            );
        }
        if let Some(p) = path
            && (p.value.starts_with('/') || p.value.split('/').any(|c| c == ".."))
        {
            self.error(
                p,
                format!(
                    "promote.from[].path {:?} must be relative to its repository's root, \
                     without `..`",
                    p.value
                ),
            );
        }
        if let Some(p) = policy
            && !is_valid_name(&p.value)
        {
            self.error(
                p,
                format!("promote.from[].policy {:?} is not a policy name", p.value),
            );
        }
        if self.errors.len() > before {
            return None;
        }
        let repository = repository.as_ref().map(|r| r.value.clone());
        let upstream = if let Some(a) = application {
            Upstream::Application {
                name: a.value.clone(),
                namespace: namespace.as_ref().map(|n| n.value.clone()),
            }
        } else if let Some(p) = path {
            Upstream::Path {
                path: p.value.trim_start_matches("./").to_string(),
                repository,
            }
        } else {
            Upstream::Policy {
                name: policy.as_ref()?.value.clone(),
                repository,
            }
        };
        Some(upstream)
    }
}
