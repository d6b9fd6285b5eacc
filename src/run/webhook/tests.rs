//! Every kind against the payloads its registry documents (`tests/fixtures/webhooks/`, sources
//! in its README): what is accepted and which repository it hints at, what is ignored, and what
//! is refused before anything is read.

use axum::http::HeaderValue;
use hmac::{Hmac, Mac};

use super::image_updater::{self, Type};
use super::*;

fn fixture(name: &str) -> Vec<u8> {
    let path = format!(
        "{}/tests/fixtures/webhooks/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn secrets() -> Secrets {
    Secrets::shared(Secret::new("s3cret").unwrap())
}

fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for (k, v) in pairs {
        h.append(
            axum::http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
            HeaderValue::from_str(v).unwrap(),
        );
    }
    h
}

fn query(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn post(kind: Kind, h: &[(&str, &str)], q: &[(&str, &str)], body: &[u8]) -> Answer {
    handle(
        kind,
        &secrets(),
        &headers(h),
        &query(q),
        Ok(Bytes::copy_from_slice(body)),
    )
}

fn repo(s: &str) -> Repository {
    Repository::parse(s).unwrap()
}

fn accepted(answer: &Answer, want: &[&str]) {
    assert_eq!(
        (answer.verdict, answer.status),
        (Verdict::Accepted, StatusCode::ACCEPTED),
        "{}",
        answer.text
    );
    let want: Vec<Repository> = want.iter().map(|w| repo(w)).collect();
    assert_eq!(answer.hints, want);
}

fn refused(answer: &Answer, verdict: Verdict, status: StatusCode) {
    assert_eq!(
        (answer.verdict, answer.status),
        (verdict, status),
        "{}",
        answer.text
    );
    assert!(answer.hints.is_empty(), "a refused request hinted");
}

/// `sha256=<hex>` as GitHub signs `body` with `secret`.
fn github_signature(secret: &str, body: &[u8]) -> String {
    let mut mac = Hmac::<sha2_for_hmac::Sha256>::new_from_slice(secret.as_bytes()).unwrap();
    mac.update(body);
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

const BEARER: (&str, &str) = ("authorization", "Bearer s3cret");
const SECRET: (&str, &str) = ("secret", "s3cret");

// === distribution ===

#[test]
fn distribution_hints_at_the_manifest_push_of_an_envelope_and_not_its_blobs() {
    let a = post(
        Kind::Distribution,
        &[BEARER],
        &[],
        &fixture("distribution-push.v2.json"),
    );
    accepted(&a, &["registrycluster.local/library/test"]);
}

#[test]
fn distribution_pulls_blob_pushes_and_deletes_are_ignored() {
    let pull = post(
        Kind::Distribution,
        &[BEARER],
        &[],
        &fixture("distribution-pull.v1.json"),
    );
    refused(&pull, Verdict::Ignored, StatusCode::ACCEPTED);
    let blobs_only = br#"{"events":[{"action":"push","target":{"mediaType":"application/octet-stream","repository":"shop/api","url":"http://r:5000/v2/shop/api/blobs/sha256:ab"},"request":{"host":"r:5000"}}]}"#;
    refused(
        &post(Kind::Distribution, &[BEARER], &[], blobs_only),
        Verdict::Ignored,
        StatusCode::ACCEPTED,
    );
    let delete = br#"{"events":[{"action":"delete","target":{"digest":"sha256:d89e","repository":"library/test"}}]}"#;
    refused(
        &post(Kind::Distribution, &[BEARER], &[], delete),
        Verdict::Ignored,
        StatusCode::ACCEPTED,
    );
}

#[test]
fn distribution_takes_only_the_bearer_secret_and_reads_nothing_without_it() {
    let body = fixture("distribution-push.v2.json");
    for h in [
        vec![("authorization", "Bearer s3cre")],
        vec![("authorization", "s3cret")],
        vec![],
    ] {
        refused(
            &post(Kind::Distribution, &h, &[SECRET], &body),
            Verdict::Unauthorized,
            StatusCode::UNAUTHORIZED,
        );
    }
    // A wrong secret is refused before a malformed body is noticed.
    refused(
        &post(
            Kind::Distribution,
            &[("authorization", "Bearer no")],
            &[],
            b"not json",
        ),
        Verdict::Unauthorized,
        StatusCode::UNAUTHORIZED,
    );
}

#[test]
fn a_kind_without_a_secret_is_refused_never_open() {
    let a = handle(
        Kind::Distribution,
        &Secrets::default(),
        &headers(&[("authorization", "Bearer ")]),
        &[],
        Ok(Bytes::from(fixture("distribution-push.v2.json"))),
    );
    refused(&a, Verdict::Unauthorized, StatusCode::UNAUTHORIZED);
    assert!(
        a.text.contains("no secret is configured for distribution"),
        "{}",
        a.text
    );
}

#[test]
fn malformed_bodies_are_refused_with_the_reason() {
    let a = post(
        Kind::Distribution,
        &[BEARER],
        &[],
        br#"{"events": [{"action": "push"}]}"#,
    );
    refused(&a, Verdict::Malformed, StatusCode::BAD_REQUEST);
    assert!(
        a.text.contains("not a distribution notification envelope"),
        "{}",
        a.text
    );
    assert!(a.text.contains("target"), "{}", a.text);
    let bad_repo = br#"{"events":[{"action":"push","target":{"repository":"Shop/API","tag":"1"},"request":{"host":"r:5000"}}]}"#;
    let a = post(Kind::Distribution, &[BEARER], &[], bad_repo);
    refused(&a, Verdict::Malformed, StatusCode::BAD_REQUEST);
    assert!(a.text.contains("r:5000/Shop/API"), "{}", a.text);
}

#[test]
fn a_malformed_body_s_answer_says_each_part_once() {
    // The error says its own part; the JSON error is its source, and the answer joins them.
    let body = br#"{"events": 1}"#;
    let e = distribution::parse(body).unwrap_err();
    assert_eq!(e.to_string(), "not a distribution notification envelope");
    assert!(
        std::error::Error::source(&e)
            .is_some_and(|s| s.to_string().contains("expected a sequence")),
        "{e:?}"
    );
    let a = post(Kind::Distribution, &[BEARER], &[], body);
    refused(&a, Verdict::Malformed, StatusCode::BAD_REQUEST);
    assert!(
        a.text
            .starts_with("not a distribution notification envelope: invalid type: integer `1`"),
        "{}",
        a.text
    );
    assert_eq!(a.text.matches("invalid type").count(), 1, "{}", a.text);
    assert_eq!(a.error, Some("not_json"));
    // A repository's own error is a cause too, named once.
    let bad_repo = br#"{"events":[{"action":"push","target":{"repository":"Shop/API","tag":"1"},"request":{"host":"r:5000"}}]}"#;
    let a = post(Kind::Distribution, &[BEARER], &[], bad_repo);
    assert!(
        a.text
            .starts_with("r:5000/Shop/API is not an image repository: image reference"),
        "{}",
        a.text
    );
    assert_eq!(a.text.matches("r:5000/Shop/API").count(), 2, "{}", a.text);
    assert_eq!(a.error, Some("not_a_repository"));
    // What is not a parse failure carries no error label.
    let a = post(
        Kind::Distribution,
        &[BEARER],
        &[],
        &fixture("distribution-pull.v1.json"),
    );
    refused(&a, Verdict::Ignored, StatusCode::ACCEPTED);
    assert_eq!(a.error, None);
}

#[test]
fn a_bad_base64_cause_is_rendered_after_the_field() {
    let a = post(
        Kind::Gar,
        &[],
        &[SECRET],
        br#"{"message":{"data":"%%%","messageId":"1"},"subscription":"s"}"#,
    );
    assert!(
        a.text.starts_with("message.data is not base64: Invalid"),
        "{}",
        a.text
    );
    assert_eq!(a.error, Some("not_base64"));
}

// === Docker Hub ===

#[test]
fn dockerhub_hints_at_its_repository_with_the_secret_in_the_url() {
    let body = fixture("dockerhub-push.json");
    let a = post(Kind::DockerHub, &[], &[SECRET], &body);
    accepted(&a, &["docker.io/svendowideit/testhook"]);
    refused(
        &post(Kind::DockerHub, &[BEARER], &[("secret", "wrong")], &body),
        Verdict::Unauthorized,
        StatusCode::UNAUTHORIZED,
    );
    refused(
        &post(
            Kind::DockerHub,
            &[],
            &[SECRET],
            br#"{"repository": {"repo_name": "a/b"}}"#,
        ),
        Verdict::Malformed,
        StatusCode::BAD_REQUEST,
    );
}

// === GitHub ===

#[test]
fn ghcr_hints_at_the_published_container_package_when_the_signature_is_right() {
    for (event, file) in [
        ("package", "ghcr-package-published.json"),
        ("registry_package", "ghcr-registry-package-published.json"),
    ] {
        let body = fixture(file);
        let signature = github_signature("s3cret", &body);
        let a = post(
            Kind::Ghcr,
            &[
                ("x-github-event", event),
                ("x-hub-signature-256", &signature),
            ],
            &[],
            &body,
        );
        accepted(&a, &["ghcr.io/codertocat/hello-world"]);
    }
}

#[test]
fn ghcr_refuses_a_wrong_missing_or_stale_signature() {
    let body = fixture("ghcr-package-published.json");
    let by_other = github_signature("other", &body);
    let mut tampered = body.clone();
    tampered[10] ^= 1;
    let good = github_signature("s3cret", &body);
    for (h, b) in [
        (vec![("x-hub-signature-256", by_other.as_str())], &body),
        (vec![], &body),
        (vec![("x-hub-signature-256", good.as_str())], &tampered),
        // The secret itself, sent as a header, is no signature.
        (vec![("authorization", "Bearer s3cret")], &body),
    ] {
        let mut h = h.clone();
        h.push(("x-github-event", "package"));
        refused(
            &post(Kind::Ghcr, &h, &[SECRET], b),
            Verdict::Unauthorized,
            StatusCode::UNAUTHORIZED,
        );
    }
}

#[test]
fn ghcr_ignores_pings_other_actions_and_other_packages() {
    let ping = br#"{"zen":"Design for failure.","hook_id":1}"#;
    let sig = github_signature("s3cret", ping);
    refused(
        &post(
            Kind::Ghcr,
            &[("x-github-event", "ping"), ("x-hub-signature-256", &sig)],
            &[],
            ping,
        ),
        Verdict::Ignored,
        StatusCode::ACCEPTED,
    );
    let text = String::from_utf8(fixture("ghcr-package-published.json")).unwrap();
    for variant in [
        text.replace(r#""action": "published""#, r#""action": "deleted""#),
        text.replace(r#""ecosystem": "docker""#, r#""ecosystem": "npm""#)
            .replace(r#""type": "CONTAINER""#, r#""type": "NPM""#),
    ] {
        assert_ne!(variant, text);
        let sig = github_signature("s3cret", variant.as_bytes());
        refused(
            &post(
                Kind::Ghcr,
                &[("x-github-event", "package"), ("x-hub-signature-256", &sig)],
                &[],
                variant.as_bytes(),
            ),
            Verdict::Ignored,
            StatusCode::ACCEPTED,
        );
    }
}

// === Harbor ===

#[test]
fn harbor_hints_at_the_pushed_artifact_from_its_resource_url() {
    let body = fixture("harbor-push-artifact.json");
    accepted(
        &post(Kind::Harbor, &[("authorization", "s3cret")], &[], &body),
        &["localhost/harbor/alpine"],
    );
    accepted(
        &post(
            Kind::Harbor,
            &[BEARER],
            &[],
            &fixture("harbor-push-artifact.v2.2.json"),
        ),
        &["hub.harbor.com/test-webhook/debian"],
    );
    // Harbor set to its CloudEvents format, sent to the same endpoint.
    accepted(
        &post(
            Kind::Harbor,
            &[BEARER],
            &[],
            &fixture("cloudevents-harbor-artifact-pushed.json"),
        ),
        &["localhost/harbor/alpine"],
    );
    refused(
        &post(
            Kind::Harbor,
            &[BEARER],
            &[],
            &fixture("harbor-delete-artifact.json"),
        ),
        Verdict::Ignored,
        StatusCode::ACCEPTED,
    );
    refused(
        &post(
            Kind::Harbor,
            &[("authorization", "s3cre")],
            &[SECRET],
            &body,
        ),
        Verdict::Unauthorized,
        StatusCode::UNAUTHORIZED,
    );
}

// === Quay ===

#[test]
fn quay_hints_at_the_repository_of_its_docker_url() {
    let body = fixture("quay-repository-push.json");
    accepted(
        &post(Kind::Quay, &[], &[SECRET], &body),
        &["quay.io/dgangaia/test"],
    );
    refused(
        &post(Kind::Quay, &[], &[], &body),
        Verdict::Unauthorized,
        StatusCode::UNAUTHORIZED,
    );
    let build = br#"{"build_id":"296ec063","repository":"dgangaia/test","docker_url":"quay.io/dgangaia/test","docker_tags":["latest"]}"#;
    refused(
        &post(Kind::Quay, &[], &[SECRET], build),
        Verdict::Ignored,
        StatusCode::ACCEPTED,
    );
}

// === Google Artifact Registry ===

#[test]
fn gar_hints_at_the_image_of_the_pubsub_message() {
    let body = fixture("gar-pubsub-push.json");
    accepted(
        &post(Kind::Gar, &[], &[SECRET], &body),
        &["us-east1-docker.pkg.dev/my-project/my-repo/hello-world"],
    );
    let delete = base64::engine::general_purpose::STANDARD.encode(
        r#"{"action":"DELETE","digest":"us-east1-docker.pkg.dev/p/r/i@sha256:6ec128e26cd5b1a1a4e9b1c5d0b2f4c2a8f1d6e3b7c9a0f2e4d6b8c0a2e4f6a8"}"#,
    );
    let body = format!(r#"{{"message":{{"data":"{delete}","messageId":"1"}},"subscription":"s"}}"#);
    refused(
        &post(Kind::Gar, &[], &[SECRET], body.as_bytes()),
        Verdict::Ignored,
        StatusCode::ACCEPTED,
    );
    let a = post(
        Kind::Gar,
        &[],
        &[SECRET],
        br#"{"message":{"data":"%%%","messageId":"1"},"subscription":"s"}"#,
    );
    refused(&a, Verdict::Malformed, StatusCode::BAD_REQUEST);
    assert!(a.text.contains("base64"), "{}", a.text);
}

use base64::Engine;

// === CloudEvents ===

#[test]
fn cloudevents_structured_harbor_and_ecr_pushes_are_read() {
    accepted(
        &post(
            Kind::CloudEvents,
            &[("content-type", "application/cloudevents+json")],
            &[SECRET],
            &fixture("cloudevents-harbor-artifact-pushed.json"),
        ),
        &["localhost/harbor/alpine"],
    );
    accepted(
        &post(
            Kind::CloudEvents,
            &[("x-webhook-secret", "s3cret")],
            &[],
            &fixture("cloudevents-ecr-image-push.json"),
        ),
        &["123456789012.dkr.ecr.us-west-2.amazonaws.com/my-app"],
    );
    refused(
        &post(
            Kind::CloudEvents,
            &[BEARER],
            &[],
            &fixture("cloudevents-harbor-artifact-pulled.json"),
        ),
        Verdict::Ignored,
        StatusCode::ACCEPTED,
    );
}

#[test]
fn cloudevents_binary_mode_reads_the_ce_headers() {
    let data = serde_json::to_vec(
        &serde_json::from_slice::<serde_json::Value>(&fixture(
            "cloudevents-harbor-artifact-pushed.json",
        ))
        .unwrap()["data"],
    )
    .unwrap();
    let h = [
        BEARER,
        ("ce-specversion", "1.0"),
        ("ce-id", "66e18103-09c1-41f6-982f-37df223f3eeb"),
        ("ce-source", "/projects/2/webhook/policies/15"),
        ("ce-type", "harbor.artifact.pushed"),
        ("content-type", "application/json"),
    ];
    accepted(
        &post(Kind::CloudEvents, &h, &[], &data),
        &["localhost/harbor/alpine"],
    );
    let unknown = [
        BEARER,
        ("ce-specversion", "1.0"),
        ("ce-id", "1"),
        ("ce-source", "/x"),
        ("ce-type", "com.example.object.created"),
    ];
    refused(
        &post(Kind::CloudEvents, &unknown, &[], b"{}"),
        Verdict::Ignored,
        StatusCode::ACCEPTED,
    );
    let a = post(
        Kind::CloudEvents,
        &[BEARER, ("ce-specversion", "1.0")],
        &[],
        b"{}",
    );
    refused(&a, Verdict::Malformed, StatusCode::BAD_REQUEST);
    assert!(a.text.contains("no id"), "{}", a.text);
}

#[test]
fn cloudevents_without_required_attributes_are_malformed() {
    let a = post(
        Kind::CloudEvents,
        &[BEARER],
        &[],
        br#"{"specversion":"1.0","id":"1","source":"/x"}"#,
    );
    refused(&a, Verdict::Malformed, StatusCode::BAD_REQUEST);
    assert!(a.text.contains("no type"), "{}", a.text);
    let a = post(
        Kind::CloudEvents,
        &[BEARER],
        &[],
        br#"{"specversion":"0.3","id":"1","source":"/x","type":"t"}"#,
    );
    refused(&a, Verdict::Malformed, StatusCode::BAD_REQUEST);
}

// === Argo CD Image Updater's endpoint ===

fn image_updater(h: &[(&str, &str)], q: &[(&str, &str)], body: &[u8]) -> (Option<Type>, Answer) {
    image_updater::handle(
        &secrets(),
        &headers(h),
        &query(q),
        Ok(Bytes::copy_from_slice(body)),
    )
}

#[test]
fn image_updater_url_secret_types_take_the_secret_only_from_the_url() {
    for (t, file, want) in [
        (
            "docker.io",
            "dockerhub-push.json",
            "docker.io/svendowideit/testhook",
        ),
        (
            "quay.io",
            "quay-repository-push.json",
            "quay.io/dgangaia/test",
        ),
        (
            "aliyun-acr",
            "aliyun-acr-push.json",
            "registry.cn-hangzhou.aliyuncs.com/namespace/repotest",
        ),
    ] {
        let body = fixture(file);
        let (kind, a) = image_updater(&[], &[("type", t), SECRET], &body);
        assert_eq!(kind.map(Type::name), Some(t));
        accepted(&a, &[want]);
        let (_, a) = image_updater(
            &[BEARER, ("x-webhook-secret", "s3cret")],
            &[("type", t)],
            &body,
        );
        refused(&a, Verdict::Unauthorized, StatusCode::UNAUTHORIZED);
    }
    let (_, a) = image_updater(
        &[],
        &[
            ("type", "aliyun-acr"),
            SECRET,
            (
                "registry_url",
                "my-instance-registry.cn-shanghai.cr.aliyuncs.com",
            ),
        ],
        &fixture("aliyun-acr-push.json"),
    );
    accepted(
        &a,
        &["my-instance-registry.cn-shanghai.cr.aliyuncs.com/namespace/repotest"],
    );
}

#[test]
fn image_updater_ghcr_takes_signed_published_package_events() {
    let body = fixture("ghcr-package-published.json");
    let sig = github_signature("s3cret", &body);
    let (_, a) = image_updater(
        &[("x-github-event", "package"), ("x-hub-signature-256", &sig)],
        &[("type", "ghcr.io")],
        &body,
    );
    accepted(&a, &["ghcr.io/codertocat/hello-world"]);
    let (_, a) = image_updater(
        &[("x-github-event", "package")],
        &[("type", "ghcr.io"), SECRET],
        &body,
    );
    refused(&a, Verdict::Unauthorized, StatusCode::UNAUTHORIZED);
    // Image Updater reads `package` events only.
    let body = fixture("ghcr-registry-package-published.json");
    let sig = github_signature("s3cret", &body);
    let (_, a) = image_updater(
        &[
            ("x-github-event", "registry_package"),
            ("x-hub-signature-256", &sig),
        ],
        &[("type", "ghcr.io")],
        &body,
    );
    refused(&a, Verdict::Ignored, StatusCode::ACCEPTED);
}

#[test]
fn image_updater_harbor_and_acr_compare_the_whole_authorization_header() {
    for (t, file, want) in [
        (
            "harbor",
            "harbor-push-artifact.v2.2.json",
            "hub.harbor.com/test-webhook/debian",
        ),
        ("acr", "acr-push.json", "myregistry.azurecr.io/hello-world"),
    ] {
        let body = fixture(file);
        let (_, a) = image_updater(&[("authorization", "s3cret")], &[("type", t)], &body);
        accepted(&a, &[want]);
        for wrong in [
            ("authorization", "Bearer s3cret"),
            ("x-webhook-secret", "s3cret"),
        ] {
            let (_, a) = image_updater(&[wrong], &[("type", t), SECRET], &body);
            refused(&a, Verdict::Unauthorized, StatusCode::UNAUTHORIZED);
        }
    }
    let delete = br#"{"action":"delete","target":{"repository":"hello-world"},"request":{"host":"myregistry.azurecr.io"}}"#;
    let (_, a) = image_updater(&[("authorization", "s3cret")], &[("type", "acr")], delete);
    refused(&a, Verdict::Ignored, StatusCode::ACCEPTED);
}

#[test]
fn image_updater_cloudevents_take_the_url_or_x_webhook_secret() {
    let body = fixture("cloudevents-ecr-image-push.json");
    let want = ["123456789012.dkr.ecr.us-west-2.amazonaws.com/my-app"];
    accepted(
        &image_updater(&[], &[("type", "cloudevents"), SECRET], &body).1,
        &want,
    );
    accepted(
        &image_updater(
            &[("x-webhook-secret", "s3cret")],
            &[("type", "cloudevents")],
            &body,
        )
        .1,
        &want,
    );
    let (_, a) = image_updater(&[BEARER], &[("type", "cloudevents")], &body);
    refused(&a, Verdict::Unauthorized, StatusCode::UNAUTHORIZED);
}

#[test]
fn image_updater_type_comes_from_the_query_or_x_registry_type() {
    let body = fixture("dockerhub-push.json");
    let (kind, a) = image_updater(&[("x-registry-type", "docker.io")], &[SECRET], &body);
    assert_eq!(kind, Some(Type::DockerHub));
    accepted(&a, &["docker.io/svendowideit/testhook"]);
    for q in [vec![SECRET], vec![("type", "gitlab.com"), SECRET]] {
        let (kind, a) = image_updater(&[], &q, &body);
        assert_eq!(kind, None);
        refused(&a, Verdict::UnknownKind, StatusCode::BAD_REQUEST);
        assert!(a.text.contains("docker.io, ghcr.io, harbor"), "{}", a.text);
    }
}

/// Image Updater's `gitlab` type (its `pkg/webhook/gitlab_test.go`, `TestGitLabWebhook_Parse`
/// and `_Validate`): distribution's envelope from GitLab's container registry, the manifest push
/// read and the blob push left out, `request.host` the registry; the secret is the whole
/// `Authorization` header, so `Bearer <secret>` is refused.
#[test]
fn image_updater_gitlab_reads_distribution_envelopes_with_the_whole_authorization_header() {
    let body = fixture("gitlab-registry-push.json");
    let (kind, a) = image_updater(&[("authorization", "s3cret")], &[("type", "gitlab")], &body);
    assert_eq!(kind, Some(Type::GitLab));
    accepted(&a, &["registry.example.com/mygroup/myimage"]);
    let (kind, a) = image_updater(
        &[("authorization", "s3cret"), ("x-registry-type", "gitlab")],
        &[],
        &body,
    );
    assert_eq!(kind, Some(Type::GitLab));
    accepted(&a, &["registry.example.com/mygroup/myimage"]);
    for wrong in [&[BEARER][..], &[("authorization", "wrong")], &[]] {
        let (_, a) = image_updater(wrong, &[("type", "gitlab"), SECRET], &body);
        refused(&a, Verdict::Unauthorized, StatusCode::UNAUTHORIZED);
    }
    // A pull, like every event but a manifest push, hints at nothing.
    let (_, a) = image_updater(
        &[("authorization", "s3cret")],
        &[("type", "gitlab")],
        &fixture("distribution-pull.v1.json"),
    );
    refused(&a, Verdict::Ignored, StatusCode::ACCEPTED);
    // Its secret is distribution's.
    let only_distribution = Secrets::only("distribution", Secret::new("d").unwrap());
    let (_, a) = image_updater::handle(
        &only_distribution,
        &headers(&[("authorization", "d")]),
        &query(&[("type", "gitlab")]),
        Ok(Bytes::from(body)),
    );
    accepted(&a, &["registry.example.com/mygroup/myimage"]);
}

#[test]
fn image_updater_types_without_a_secret_are_refused() {
    let only_harbor = Secrets::only("harbor", Secret::new("h").unwrap());
    let (_, a) = image_updater::handle(
        &only_harbor,
        &HeaderMap::new(),
        &query(&[("type", "docker.io"), ("secret", "h")]),
        Ok(Bytes::from(fixture("dockerhub-push.json"))),
    );
    refused(&a, Verdict::Unauthorized, StatusCode::UNAUTHORIZED);
    assert!(a.text.contains("webhooks.dockerhub"), "{}", a.text);
}
