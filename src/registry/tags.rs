//! Tag-list pagination, decided without I/O: given the page just read and its `Link` header,
//! which URL comes next, if any.
//!
//! Registries disagree here (see `shared/reference/registries.md`): distribution 2.8 ignores `n`
//! and `last` and sends every tag at once, unsorted; distribution 3, GHCR, Docker Hub and Harbor
//! paginate with `Link: <…>; rel="next"`; a few paginate without `Link`. So: follow `Link` when
//! present; without it, ask for `last=<last tag of the page>` only when the page came back full
//! (as many tags as we asked for with `n`), since a short page without `Link` is the whole list.
//! That last rule keeps a 2.8 registry at one request per repository. Never assume order, and
//! stop on a page that brings nothing new or a URL already visited: a pagination loop is the
//! registry's bug, not a reason to spin. A registry that paginates without end, each page new,
//! is stopped by the bounds of `registries[].tagList` (pages, tags, time) instead.

use std::collections::HashSet;

use reqwest::header::LINK;
use reqwest::{Method, Url};
use serde::Deserialize;
use tracing::warn;

use super::RegistryError;
use super::error::{Malformation, TagListBound, malformed, unreachable};
use super::send::{RegistryRequest, Target};
use super::state::{Kind, RegistryClient, RegistryState};
use crate::config::TagListLimits;
use crate::image::Repository;

impl RegistryClient {
    /// Every tag of `repo`, following pagination as [`TagPager`] decides, within the bounds of
    /// `registries[].tagList`: past any of them the listing fails for this repository alone.
    pub(super) async fn fetch_tags(&self, repo: &Repository) -> Result<Vec<String>, RegistryError> {
        let reg = self.registry(&repo.registry);
        let limits = reg.tag_list;
        let too_long = |bound| RegistryError::TagListTooLong {
            registry: repo.registry.clone(),
            repository: repo.path.clone(),
            bound,
        };
        let listing = self.paginate(&reg, repo, limits);
        match tokio::time::timeout(limits.timeout, listing).await {
            Ok(result) => result.map_err(|e| match e {
                Paged::Registry(e) => e,
                Paged::Bound(bound) => too_long(bound),
            }),
            Err(_) => Err(too_long(TagListBound::Time(limits.timeout))),
        }
    }

    async fn paginate(
        &self,
        reg: &RegistryState,
        repo: &Repository,
        limits: TagListLimits,
    ) -> Result<Vec<String>, Paged> {
        let base = Url::parse(&format!("{}/v2/{}/tags/list", reg.base, repo.path))
            .map_err(|e| malformed(repo, "repository URL", e))?;
        let mut pager = TagPager::new(base, self.options.page_size.max(1), limits);
        // The spec allows tags of 128 characters: a page holding more than `maxTags` of those is
        // not read to its end, so one endless body cannot grow memory either.
        let max_page_bytes = limits.max_tags.saturating_mul(132).saturating_add(4096);
        while let Some(url) = pager.next_url().cloned() {
            let mut resp = self
                .send(
                    reg,
                    repo,
                    RegistryRequest {
                        kind: Kind::TagList,
                        method: Method::GET,
                        url: url.clone(),
                        accept: None,
                        target: Target::Tags,
                    },
                )
                .await?;
            let link = link_next(
                resp.headers()
                    .get_all(LINK)
                    .iter()
                    .filter_map(|v| v.to_str().ok()),
            );
            let mut body = Vec::new();
            while let Some(chunk) = resp.chunk().await.map_err(|e| unreachable(repo, e))? {
                if body.len() + chunk.len() > max_page_bytes {
                    return Err(Paged::Bound(TagListBound::PageBytes(max_page_bytes)));
                }
                body.extend_from_slice(&chunk);
            }
            #[derive(Deserialize)]
            struct TagPage {
                #[serde(default)]
                tags: Option<Vec<String>>,
            }
            let page: TagPage =
                serde_json::from_slice(&body).map_err(|e| malformed(repo, "tag list", e))?;
            let next = match link {
                Some(link) => {
                    let next = url
                        .join(&link)
                        .map_err(|e| malformed(repo, "tag list Link header", e))?;
                    // Credentials go to the registry only; a Link elsewhere is a registry bug.
                    if next.origin() != url.origin() {
                        return Err(malformed(
                            repo,
                            "tag list Link header",
                            Malformation::LinkOutsideRegistry(next.to_string()),
                        )
                        .into());
                    }
                    Some(next)
                }
                None => None,
            };
            pager
                .accept(page.tags.unwrap_or_default(), next)
                .map_err(Paged::Bound)?;
        }
        if pager.stopped_on_repeat {
            warn!("the registry repeated a page of tags; stopped paginating");
        }
        Ok(pager.into_tags())
    }
}

/// Why a listing stopped short: the registry's error, or one of our bounds.
enum Paged {
    Registry(RegistryError),
    Bound(TagListBound),
}

impl From<RegistryError> for Paged {
    fn from(e: RegistryError) -> Self {
        Paged::Registry(e)
    }
}

pub(crate) struct TagPager {
    /// The first page's URL without query; `last` pages are built from it.
    base: Url,
    page_size: usize,
    limits: TagListLimits,
    next: Option<Url>,
    visited: HashSet<String>,
    seen: HashSet<String>,
    tags: Vec<String>,
    /// Set when pagination stopped because the registry repeated itself.
    pub(crate) stopped_on_repeat: bool,
}

impl TagPager {
    /// `base` is `…/v2/<name>/tags/list` without query.
    pub(crate) fn new(base: Url, page_size: usize, limits: TagListLimits) -> Self {
        let mut first = base.clone();
        first
            .query_pairs_mut()
            .append_pair("n", &page_size.to_string());
        TagPager {
            base,
            page_size,
            limits,
            next: Some(first),
            visited: HashSet::new(),
            seen: HashSet::new(),
            tags: Vec::new(),
            stopped_on_repeat: false,
        }
    }

    /// The URL to fetch next; `None` when the list is complete.
    pub(crate) fn next_url(&self) -> Option<&Url> {
        self.next.as_ref()
    }

    /// Takes in the page read from [`TagPager::next_url`] and its `Link: rel="next"` target
    /// (already resolved against the page's URL). Fails when the listing has more tags than
    /// `maxTags`, or would need a page past `maxPages`.
    pub(crate) fn accept(
        &mut self,
        page: Vec<String>,
        link_next: Option<Url>,
    ) -> Result<(), TagListBound> {
        if let Some(current) = self.next.take() {
            self.visited.insert(current.to_string());
        }
        let page_len = page.len();
        let last = page.last().cloned();
        let mut new = 0;
        for tag in page {
            if self.seen.insert(tag.clone()) {
                self.tags.push(tag);
                new += 1;
            }
        }
        if self.tags.len() > self.limits.max_tags {
            return Err(TagListBound::Tags(self.limits.max_tags));
        }
        if page_len > 0 && new == 0 {
            self.stopped_on_repeat = true;
            return Ok(());
        }
        let candidate = match (link_next, last) {
            (Some(link), _) => Some(link),
            (None, Some(last)) if page_len >= self.page_size => {
                let mut url = self.base.clone();
                url.query_pairs_mut()
                    .append_pair("n", &self.page_size.to_string())
                    .append_pair("last", &last);
                Some(url)
            }
            _ => None,
        };
        match candidate {
            Some(url) if self.visited.contains(url.as_str()) => self.stopped_on_repeat = true,
            Some(_) if self.visited.len() >= self.limits.max_pages => {
                return Err(TagListBound::Pages(self.limits.max_pages));
            }
            other => self.next = other,
        }
        Ok(())
    }

    pub(crate) fn into_tags(self) -> Vec<String> {
        self.tags
    }
}

/// The target of the `rel="next"` entry of `Link` header values, as written (maybe relative).
pub(crate) fn link_next<'a>(values: impl Iterator<Item = &'a str>) -> Option<String> {
    for value in values {
        for entry in value.split(',') {
            let entry = entry.trim();
            let Some(rest) = entry.strip_prefix('<') else {
                continue;
            };
            let Some((target, params)) = rest.split_once('>') else {
                continue;
            };
            let is_next = params.split(';').any(|p| {
                let Some((k, v)) = p.trim().split_once('=') else {
                    return false;
                };
                k.trim().eq_ignore_ascii_case("rel")
                    && v.trim()
                        .trim_matches('"')
                        .split_ascii_whitespace()
                        .any(|r| r.eq_ignore_ascii_case("next"))
            });
            if is_next {
                return Some(target.trim().to_string());
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base() -> Url {
        Url::parse("http://127.0.0.1:5000/v2/shop/api/tags/list").unwrap()
    }

    fn limits() -> TagListLimits {
        TagListLimits::default()
    }

    fn tags(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_short_page_without_link_is_the_whole_list() {
        let mut p = TagPager::new(base(), 3, limits());
        assert_eq!(
            p.next_url().unwrap().as_str(),
            "http://127.0.0.1:5000/v2/shop/api/tags/list?n=3"
        );
        p.accept(tags(&["b", "a"]), None).unwrap();
        assert!(p.next_url().is_none());
        assert_eq!(p.into_tags(), tags(&["b", "a"]));
    }

    #[test]
    fn a_full_page_without_link_asks_for_last_of_the_page_in_page_order() {
        let mut p = TagPager::new(base(), 2, limits());
        p.accept(tags(&["z", "a"]), None).unwrap();
        assert_eq!(
            p.next_url().unwrap().as_str(),
            "http://127.0.0.1:5000/v2/shop/api/tags/list?n=2&last=a"
        );
        p.accept(tags(&["c"]), None).unwrap();
        assert!(p.next_url().is_none());
        assert_eq!(p.into_tags(), tags(&["z", "a", "c"]));
    }

    #[test]
    fn link_is_followed_even_after_a_short_page() {
        let mut p = TagPager::new(base(), 100, limits());
        let next = Url::parse("http://127.0.0.1:5000/v2/shop/api/tags/list?cursor=xyz").unwrap();
        p.accept(tags(&["a"]), Some(next.clone())).unwrap();
        assert_eq!(p.next_url(), Some(&next));
    }

    #[test]
    fn a_page_with_nothing_new_stops() {
        let mut p = TagPager::new(base(), 2, limits());
        p.accept(tags(&["a", "b"]), None).unwrap();
        p.accept(tags(&["b", "a"]), None).unwrap();
        assert!(p.next_url().is_none());
        assert!(p.stopped_on_repeat);
        assert_eq!(p.into_tags(), tags(&["a", "b"]));
    }

    #[test]
    fn a_link_back_to_a_visited_page_stops() {
        let mut p = TagPager::new(base(), 100, limits());
        let first = p.next_url().unwrap().clone();
        let second = Url::parse("http://127.0.0.1:5000/v2/shop/api/tags/list?page=2").unwrap();
        p.accept(tags(&["a"]), Some(second)).unwrap();
        p.accept(tags(&["b"]), Some(first)).unwrap();
        assert!(p.next_url().is_none());
        assert!(p.stopped_on_repeat);
    }

    #[test]
    fn null_or_empty_tags_end_the_list() {
        let mut p = TagPager::new(base(), 2, limits());
        p.accept(Vec::new(), None).unwrap();
        assert!(p.next_url().is_none());
        assert!(p.into_tags().is_empty());
    }

    #[test]
    fn endless_new_pages_stop_at_max_pages_and_tags_at_max_tags() {
        let bounded = TagListLimits {
            max_pages: 3,
            max_tags: 5,
            ..limits()
        };
        let page = |n: usize| Url::parse(&format!("{}?page={n}", base())).unwrap();
        let mut p = TagPager::new(base(), 100, bounded);
        p.accept(tags(&["a"]), Some(page(2))).unwrap();
        p.accept(tags(&["b"]), Some(page(3))).unwrap();
        assert_eq!(
            p.accept(tags(&["c"]), Some(page(4))),
            Err(TagListBound::Pages(3)),
            "a fourth page is not asked for"
        );
        let mut p = TagPager::new(base(), 100, bounded);
        p.accept(tags(&["a", "b", "c"]), Some(page(2))).unwrap();
        assert_eq!(
            p.accept(tags(&["d", "e", "f"]), None),
            Err(TagListBound::Tags(5))
        );
        // Exactly at the bounds is still a whole list.
        let mut p = TagPager::new(base(), 100, bounded);
        p.accept(tags(&["a", "b"]), Some(page(2))).unwrap();
        p.accept(tags(&["c"]), Some(page(3))).unwrap();
        p.accept(tags(&["d", "e"]), None).unwrap();
        assert_eq!(p.into_tags().len(), 5);
    }

    #[test]
    fn link_header_parsing() {
        let v = r#"</v2/shop/api/tags/list?n=2&last=b>; rel="next""#;
        assert_eq!(
            link_next([v].into_iter()).as_deref(),
            Some("/v2/shop/api/tags/list?n=2&last=b")
        );
        let v = r#"<https://x/prev>; rel="prev", <https://x/next>; rel=next"#;
        assert_eq!(
            link_next([v].into_iter()).as_deref(),
            Some("https://x/next")
        );
        assert_eq!(
            link_next([r#"<https://x/prev>; rel="prev""#].into_iter()),
            None
        );
    }
}
