//! Rendered manifests as resources: split into documents, keyed by kind, namespace and name,
//! compared before and after, with Secret data redacted.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::affected::RenderedResource;

/// One rendered resource.
#[derive(Debug, Clone, PartialEq)]
pub struct Resource {
    pub kind: String,
    pub namespace: Option<String>,
    pub name: String,
    pub value: Value,
}

/// The resources of a rendered (multi-document) YAML text; `List`s are unpacked, empty
/// documents skipped.
pub fn parse_resources(text: &str) -> Result<Vec<Resource>, super::RenderError> {
    let docs: Vec<Value> =
        serde_saphyr::from_multiple_with_options(text, crate::yaml_error::options()).map_err(
            |e| super::RenderError::NotYaml {
                message: e.to_string(),
            },
        )?;
    let mut out = Vec::new();
    for doc in docs {
        push(&mut out, doc);
    }
    Ok(out)
}

fn push(out: &mut Vec<Resource>, doc: Value) {
    let Value::Object(map) = &doc else {
        return;
    };
    let kind = map.get("kind").and_then(Value::as_str).unwrap_or_default();
    if kind.ends_with("List")
        && let Some(Value::Array(items)) = map.get("items")
    {
        for item in items.clone() {
            push(out, item);
        }
        return;
    }
    let metadata = map.get("metadata");
    let text = |key: &str| {
        metadata
            .and_then(|m| m.get(key))
            .and_then(Value::as_str)
            .map(str::to_owned)
    };
    out.push(Resource {
        kind: kind.to_owned(),
        namespace: text("namespace"),
        name: text("name").unwrap_or_default(),
        value: doc,
    });
}

/// The resources that differ between `before` and `after`, in kind, namespace, name order,
/// each as YAML; a Secret's `data` and `stringData` values are redacted, saying which changed.
pub fn changed_resources(before: Vec<Resource>, after: Vec<Resource>) -> Vec<RenderedResource> {
    type Key = (String, Option<String>, String);
    let index = |list: Vec<Resource>| -> BTreeMap<Key, Value> {
        list.into_iter()
            .map(|r| ((r.kind, r.namespace, r.name), r.value))
            .collect()
    };
    let (mut before, mut after) = (index(before), index(after));
    let mut keys: Vec<Key> = before.keys().chain(after.keys()).cloned().collect();
    keys.sort();
    keys.dedup();
    let mut out = Vec::new();
    for key in keys {
        let (mut old, mut new) = (before.remove(&key), after.remove(&key));
        if old == new {
            continue;
        }
        if key.0 == "Secret" {
            redact(&mut old, &mut new);
        }
        out.push(RenderedResource {
            kind: key.0,
            namespace: key.1,
            name: key.2,
            before: old.as_ref().map(yaml),
            after: new.as_ref().map(yaml),
        });
    }
    out
}

/// Replaces every value of a Secret's `data` and `stringData` by `<redacted>`; on the after
/// side by `<redacted, changed>` where it differs from the before side (or is new), so the
/// diff shows which keys changed and never what they hold.
fn redact(before: &mut Option<Value>, after: &mut Option<Value>) {
    for field in ["data", "stringData"] {
        let old = side(before.as_ref(), field);
        let new = side(after.as_ref(), field);
        for (doc, is_after) in [(before.as_mut(), false), (after.as_mut(), true)] {
            let Some(Value::Object(map)) = doc.and_then(|d| d.get_mut(field)) else {
                continue;
            };
            for (key, value) in map.iter_mut() {
                let changed = is_after && old.get(key) != new.get(key);
                *value = Value::String(
                    if changed {
                        "<redacted, changed>"
                    } else {
                        "<redacted>"
                    }
                    .into(),
                );
            }
        }
    }
}

fn side(doc: Option<&Value>, field: &str) -> BTreeMap<String, Value> {
    match doc.and_then(|d| d.get(field)) {
        Some(Value::Object(map)) => map.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
        _ => BTreeMap::new(),
    }
}

/// One changed resource as a unified diff of its YAML, headed `before`/`after`.
pub fn unified(resource: &RenderedResource) -> String {
    let (old, new) = (
        resource.before.as_deref().unwrap_or(""),
        resource.after.as_deref().unwrap_or(""),
    );
    similar::TextDiff::from_lines(old, new)
        .unified_diff()
        .context_radius(3)
        .header("before", "after")
        .to_string()
}

fn yaml(value: &Value) -> String {
    serde_saphyr::to_string(value)
        .unwrap_or_else(|_| serde_json::to_string_pretty(value).unwrap_or_default() + "\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_changed_resources_are_kept_and_secret_data_is_redacted() {
        let before = parse_resources(
            "apiVersion: v1\nkind: Secret\nmetadata: {name: s, namespace: shop}\n\
             data: {password: aHVudGVyMg==, user: YWRtaW4=}\n---\n\
             apiVersion: v1\nkind: ConfigMap\nmetadata: {name: same}\ndata: {a: b}\n---\n\
             apiVersion: v1\nkind: ConfigMap\nmetadata: {name: gone}\n",
        )
        .unwrap();
        let after = parse_resources(
            "apiVersion: v1\nkind: Secret\nmetadata: {name: s, namespace: shop}\n\
             data: {password: c2VjcmV0, user: YWRtaW4=}\nstringData: {token: abc}\n---\n\
             ---\napiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: ConfigMap\n  metadata: {name: same}\n  data: {a: b}\n",
        )
        .unwrap();
        let changed = changed_resources(before, after);
        let headers: Vec<String> = changed.iter().map(RenderedResource::header).collect();
        assert_eq!(headers, ["ConfigMap/gone", "Secret/shop/s"]);
        assert_eq!(changed[0].after, None);
        let secret = &changed[1];
        let (old, new) = (
            secret.before.as_deref().unwrap(),
            secret.after.as_deref().unwrap(),
        );
        for text in [old, new] {
            assert!(
                !text.contains("aHVudGVyMg") && !text.contains("c2VjcmV0"),
                "{text}"
            );
            assert!(!text.contains("abc") && !text.contains("YWRtaW4"), "{text}");
        }
        assert!(new.contains("password: <redacted, changed>"), "{new}");
        assert!(old.contains("password: <redacted>"), "{old}");
        assert!(new.contains("user: <redacted>"), "{new}");
        assert!(new.contains("token: <redacted, changed>"), "{new}");
    }
}
