use std::path::PathBuf;

use super::*;
use crate::git::message::render_message;

fn failed(failure: &str) -> FailedUpdate {
    FailedUpdate {
        changes: Vec::new(),
        commit: "0123456789abcdef0123456789abcdef01234567".into(),
        application: "argocd/shop".into(),
        failure: failure.into(),
        deployers: Vec::new(),
    }
}

fn reverse() -> ChangeGroup {
    ChangeGroup {
        applications: Vec::new(),
        key: "revert-0123456789ab".into(),
        files: [(PathBuf::from("apps/api.yaml"), "x".into())].into(),
        changes: vec![Change {
            policy: "api".into(),
            image: "registry.example/shop/api".into(),
            file: "apps/api.yaml".into(),
            field: "Deployment/api container api".into(),
            from: "1.1.0".into(),
            to: "1.0.0".into(),
            ..Default::default()
        }],
    }
}

#[test]
fn the_message_says_what_and_why_and_ends_in_one_block_of_trailers() {
    // The failure's text is Argo CD's: nothing in it may be read as template syntax.
    let failure = "health Degraded after the sync: \"api\" {{ nope }} {% if %} \\ back\nslash";
    let template = message_template(&failed(failure));
    let message = render_message(Some(&template), "manifests", &reverse()).unwrap();
    assert_eq!(
        message,
        "revert(images): undo 0123456789ab (argocd/shop failed verification)\n\n\
         The Application argocd/shop did not become healthy after \
         0123456789abcdef0123456789abcdef01234567: health Degraded after the sync: \"api\" \
         {{ nope }} {% if %} \\ back\nslash\n\n\
         Set back, and nothing else:\n\n\
         - registry.example/shop/api: 1.1.0 -> 1.0.0 (apps/api.yaml)\n\n\
         Tagpilot-Revert: 0123456789abcdef0123456789abcdef01234567\n\
         Tagpilot-Policy: api\n"
    );
}
