//! `.argocd-source-<app>.yaml`: Argo CD's parameter-override file, in Image Updater's shape,
//! read and rewritten whole as Image Updater does. The same overrides sit in a live
//! Application's spec, so [`super::patch`] edits them with this type too. Pure.

use crate::image::{ImageRef, Repository};
use crate::plan;
use crate::policy::ImagePolicy;

use super::super::read::settings::ImageSettings;
use super::super::resolve::SourceKind;

pub use crate::application::override_file::{
    HelmOverrides, KustomizeOverrides, OverrideFile, OverrideParameter,
};

impl OverrideFile {
    /// The file as Image Updater writes it (`marshalParamsOverride` in its
    /// `pkg/argocd/update.go`), so that a repository switching from Image Updater sees no diff
    /// beyond the tags: go-yaml's style (two-space indent, list items not indented under their
    /// key, long strings on one line, never folded into `>-` blocks), Helm parameters sorted
    /// by name (its `sortHelmParameters`), and the original's leading comments and `---`
    /// carried over verbatim (its `leadingDocumentStartPrefix`).
    pub fn render(&self, original: Option<&str>) -> String {
        let mut sorted;
        let mut this = self;
        if let Some(h) = &self.helm
            && !h.parameters.is_sorted_by(|a, b| a.name <= b.name)
        {
            sorted = self.clone();
            if let Some(h) = &mut sorted.helm {
                h.parameters.sort_by(|a, b| a.name.cmp(&b.name));
            }
            this = &sorted;
        }
        // go-yaml quotes by YAML 1.2's core schema (`1.2.0` stays plain, `"1.10"` is quoted)
        // and also quotes YAML 1.1's booleans; Argo CD reads the file as YAML 1.1, so a value
        // only 1.1 reads as a boolean or a number makes the whole file quoted by 1.1's rules.
        let yaml_12 = !this.strings().any(yaml_11_special);
        let options = serde_saphyr::ser_options! {
            indent_step: 2,
            compact_list_indent: true,
            prefer_block_scalars: false,
            yaml_12: yaml_12,
            no_lang_directive: true,
        };
        let body =
            serde_saphyr::to_string_with_options(this, options).expect("override file serialises");
        match original.and_then(leading_document_start) {
            Some(prefix) if !body.starts_with("---") => format!("{prefix}{body}"),
            _ => body,
        }
    }

    /// Every string tagpilot writes in the file.
    fn strings(&self) -> impl Iterator<Item = &str> {
        let helm = self
            .helm
            .iter()
            .flat_map(|h| &h.parameters)
            .flat_map(|p| [p.name.as_str(), p.value.as_str()]);
        let kustomize = self
            .kustomize
            .iter()
            .flat_map(|k| &k.images)
            .map(String::as_str);
        helm.chain(kustomize)
    }

    /// The image's current tag and digest in this file, if it names the image.
    pub fn current(
        &self,
        kind: SourceKind,
        image: &ImageSettings,
        policy: &ImagePolicy,
    ) -> Option<(Option<String>, Option<String>)> {
        match kind {
            SourceKind::Kustomize | SourceKind::Directory => {
                let k = self.kustomize.as_ref()?;
                let entry = k
                    .images
                    .iter()
                    .find(|e| kustomize_entry_names(e, image, policy))?;
                let reference = entry.split_once('=').map_or(entry.as_str(), |(_, r)| r);
                let r = ImageRef::parse(reference).ok()?;
                Some((r.tag, r.digest))
            }
            SourceKind::Helm => {
                let params = &self.helm.as_ref()?.parameters;
                let get = |n: &str| params.iter().find(|p| p.name == n).map(|p| p.value.clone());
                if let Some(spec) = &image.helm.spec {
                    let r = ImageRef::parse(&get(spec)?).ok()?;
                    return Some((r.tag, r.digest));
                }
                let tag = get(image.helm.tag_or_default())?;
                match tag.split_once('@') {
                    Some((t, d)) => Some((
                        Some(t.to_string()).filter(|t| !t.is_empty()),
                        Some(d.to_string()),
                    )),
                    None => Some((Some(tag), None)),
                }
            }
        }
    }

    /// Sets the image to `tag` (and `digest`), replacing its entry or adding one.
    pub fn set(
        &mut self,
        kind: SourceKind,
        image: &ImageSettings,
        policy: &ImagePolicy,
        tag: &str,
        digest: Option<&str>,
    ) {
        match kind {
            SourceKind::Kustomize | SourceKind::Directory => {
                let reference = ImageRef::render(&image.image, Some(tag), digest);
                let entry = match &image.kustomize_image_name {
                    Some(k) if *k != image.image => format!("{k}={reference}"),
                    _ => reference,
                };
                let k = self.kustomize.get_or_insert_with(Default::default);
                match k
                    .images
                    .iter_mut()
                    .find(|e| kustomize_entry_names(e, image, policy))
                {
                    Some(e) => *e = entry,
                    None => k.images.push(entry),
                }
            }
            SourceKind::Helm => {
                let h = self.helm.get_or_insert_with(Default::default);
                let mut put = |name: &str, value: String| match h
                    .parameters
                    .iter_mut()
                    .find(|p| p.name == name)
                {
                    Some(p) => {
                        p.value = value;
                        p.forcestring = true;
                    }
                    None => h.parameters.push(OverrideParameter {
                        name: name.to_string(),
                        value,
                        forcestring: true,
                    }),
                };
                match &image.helm.spec {
                    Some(spec) => put(spec, ImageRef::render(&image.image, Some(tag), digest)),
                    None => {
                        put(image.helm.name_or_default(), image.image.clone());
                        put(
                            image.helm.tag_or_default(),
                            plan::version_text(Some(tag), digest),
                        );
                    }
                }
            }
        }
    }
}

/// Whether YAML 1.1 (not 1.2) reads `s`, unquoted, as something else than a string: its
/// booleans (`yes`, `on`, `n`, …) and base-60 numbers (`1:20`).
fn yaml_11_special(s: &str) -> bool {
    const BOOLS: [&str; 8] = ["y", "yes", "n", "no", "on", "off", "true", "false"];
    if BOOLS.iter().any(|b| s.eq_ignore_ascii_case(b)) {
        return true;
    }
    let digits = s.trim_start_matches(['-', '+']);
    digits.contains(':')
        && digits.split(':').all(|p| {
            !p.is_empty()
                && p.chars()
                    .all(|c| c.is_ascii_digit() || c == '_' || c == '.')
        })
}

/// The leading blank lines, comments and directives of `text` together with the `---` that
/// follows them, verbatim; `None` when no `---` follows them (Image Updater's
/// `leadingDocumentStartPrefix`).
fn leading_document_start(text: &str) -> Option<&str> {
    let mut at = 0;
    for line in text.split_inclusive('\n') {
        let trimmed = line.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') || trimmed.starts_with('%') {
            at += line.len();
            continue;
        }
        let bare = line.trim_end_matches(['\n', '\r']);
        let marker = bare == "---" || bare.starts_with("--- ") || bare.starts_with("---\t");
        return marker.then(|| &text[..at + line.len()]);
    }
    None
}

/// Whether a kustomize override entry (`[old=]image[:tag][@digest]`) is the one for `image`.
fn kustomize_entry_names(entry: &str, image: &ImageSettings, policy: &ImagePolicy) -> bool {
    let name = match entry.split_once('=') {
        Some((old, _)) => old.to_string(),
        None => match ImageRef::parse(entry) {
            Ok(r) => r.name,
            Err(_) => return false,
        },
    };
    image.kustomize_image_name.as_deref() == Some(name.as_str())
        || Repository::parse(&name).is_ok_and(|r| r == policy.image)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::argocd::read::annotations;
    use crate::policy::Strategy;
    use std::collections::BTreeMap as Map;

    /// The first image of an `image-list` annotation (with `pairs` under Image Updater's
    /// prefix) and a newest-build policy for it.
    pub(crate) fn image(pairs: &[(&str, &str)]) -> (ImageSettings, ImagePolicy) {
        let mut m: Map<String, String> = pairs
            .iter()
            .map(|(k, v)| {
                (
                    format!("{}{k}", annotations::IMAGE_UPDATER_PREFIX),
                    v.to_string(),
                )
            })
            .collect();
        m.entry(format!(
            "{}write-back-method",
            annotations::IMAGE_UPDATER_PREFIX
        ))
        .or_insert("git".into());
        let a = annotations::parse(&m).unwrap();
        let i = a.images[0].clone();
        let p = ImagePolicy::adhoc(&i.image, Strategy::NewestBuild).unwrap();
        (i, p)
    }

    #[test]
    fn kustomize_override_entries_are_replaced_by_name_or_added() {
        let (img, pol) = image(&[("image-list", "api=r.example/shop/api")]);
        let mut f = OverrideFile::parse(
            "kustomize:\n  images:\n  - r.example/shop/web:1.0.0\n  - r.example/shop/api:1.0.0\n",
        )
        .unwrap();
        assert_eq!(
            f.current(SourceKind::Kustomize, &img, &pol),
            Some((Some("1.0.0".into()), None))
        );
        f.set(SourceKind::Kustomize, &img, &pol, "1.2.0", None);
        assert_eq!(
            f.kustomize.as_ref().unwrap().images,
            vec!["r.example/shop/web:1.0.0", "r.example/shop/api:1.2.0"]
        );
        let (img, pol) = image(&[
            ("image-list", "api=r.example/shop/api"),
            ("api.kustomize.image-name", "api"),
        ]);
        let mut f = OverrideFile::default();
        f.set(SourceKind::Kustomize, &img, &pol, "2.0.0", None);
        assert_eq!(
            f.kustomize.as_ref().unwrap().images,
            vec!["api=r.example/shop/api:2.0.0"]
        );
        assert_eq!(
            f.current(SourceKind::Kustomize, &img, &pol),
            Some((Some("2.0.0".into()), None))
        );
    }

    #[test]
    fn helm_override_parameters_use_image_updater_names_and_keep_other_keys() {
        let (img, pol) = image(&[
            ("image-list", "api=r.example/shop/api"),
            ("api.helm.image-name", "api.image.repository"),
            ("api.helm.image-tag", "api.image.tag"),
        ]);
        let mut f = OverrideFile::parse(
            "helm:\n  parameters:\n  - name: api.image.tag\n    value: 1.0.0\n    forcestring: true\n  valueFiles: [prod.yaml]\n",
        )
        .unwrap();
        assert_eq!(
            f.current(SourceKind::Helm, &img, &pol),
            Some((Some("1.0.0".into()), None))
        );
        f.set(SourceKind::Helm, &img, &pol, "1.1.0", None);
        let text = f.render(None);
        let back = OverrideFile::parse(&text).unwrap();
        let h = back.helm.unwrap();
        // Sorted by name, as Image Updater's `sortHelmParameters` writes them.
        assert_eq!(
            h.parameters,
            vec![
                OverrideParameter {
                    name: "api.image.repository".into(),
                    value: "r.example/shop/api".into(),
                    forcestring: true
                },
                OverrideParameter {
                    name: "api.image.tag".into(),
                    value: "1.1.0".into(),
                    forcestring: true
                },
            ]
        );
        assert!(h.other.contains_key("valueFiles"), "{text}");
    }

    /// Image Updater writes the file with go-yaml (`marshalWithIndent`: two-space indent,
    /// `CompactSeqIndent`, no line folding) and carries a leading `---` and the comments before
    /// it over (`leadingDocumentStartPrefix`, its test cases in `pkg/argocd/update_test.go`).
    #[test]
    fn the_file_is_written_as_image_updater_writes_it() {
        let long = "registry.example/platform/team-shop/services/checkout-api-with-a-rather-long-name-for-one-service";
        let original = format!(
            "# managed by argocd-image-updater\n---\nhelm:\n  parameters:\n  - name: image.name\n    value: {long}\n    forcestring: true\n  - name: image.tag\n    value: 1.1.0\n    forcestring: true\n"
        );
        let mut f = OverrideFile::parse(&original).unwrap();
        f.helm.as_mut().unwrap().parameters[1].value = "1.2.0".into();
        assert_eq!(
            f.render(Some(&original)),
            original.replace("value: 1.1.0", "value: 1.2.0")
        );
        let mut one = OverrideFile::default();
        one.helm.get_or_insert_default().parameters = vec![OverrideParameter {
            name: "image.tag".into(),
            value: "1.10".into(),
            forcestring: true,
        }];
        assert_eq!(
            one.render(None),
            "helm:\n  parameters:\n  - name: image.tag\n    value: \"1.10\"\n    forcestring: true\n"
        );
        // Argo CD reads the file as YAML 1.1, where a plain `yes` is a boolean.
        one.helm.as_mut().unwrap().parameters[0].value = "yes".into();
        let text = one.render(None);
        assert!(
            text.contains("value: 'yes'") || text.contains("value: \"yes\""),
            "{text}"
        );
        let kustomize = "kustomize:\n  images:\n  - registry.example/shop/api:1.2.0\n";
        assert_eq!(
            OverrideFile::parse(kustomize).unwrap().render(None),
            kustomize
        );
    }
}
