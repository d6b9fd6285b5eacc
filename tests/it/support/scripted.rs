//! Scripted registry answers (`wiremock`) for what the real distribution 2.8 cannot be made to
//! do: 429 with `Retry-After`, pagination quirks, malformed bodies. Everything is about the one
//! repository `shop/api`; callers add their own query matchers and `.expect(n)` counts.

use serde_json::json;
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockBuilder, ResponseTemplate};

/// The tag-list endpoint of `shop/api`.
pub const TAGS_LIST: &str = "/v2/shop/api/tags/list";

/// Any `GET` of the tag list of `shop/api`.
pub fn get_tags_list() -> MockBuilder {
    Mock::given(method("GET")).and(path(TAGS_LIST))
}

/// One page of `shop/api`'s tags.
pub fn tags_page(tags: &[&str]) -> ResponseTemplate {
    ResponseTemplate::new(200).set_body_json(json!({"name": "shop/api", "tags": tags}))
}

/// The first tag-list request is refused with 429 and this `Retry-After`; mount a
/// lower-priority answer for the retry.
pub fn too_many_requests_once(retry_after: &str) -> Mock {
    get_tags_list()
        .respond_with(ResponseTemplate::new(429).insert_header("retry-after", retry_after))
        .up_to_n_times(1)
        .with_priority(1)
}

/// What a captive proxy answers instead of JSON.
pub fn proxy_login_page() -> ResponseTemplate {
    ResponseTemplate::new(200).set_body_string("<html>proxy login</html>")
}
