//! The YAML reader and editor against real-world files nobody on this project wrote
//! (`/work/shared/corpus`), plus property tests over generated documents.

use std::collections::BTreeMap;
use std::path::Path;

use tagpilot::manifest::{self, FieldKind, ImageField, ManifestError, Update, apply_edits, scan};

struct Scanned {
    rel: String,
    src: String,
    result: Result<Vec<ImageField>, ManifestError>,
}

fn scan_corpus(root: &Path) -> Vec<Scanned> {
    let mut out = Vec::new();
    for entry in walkdir::WalkDir::new(root).sort_by_file_name() {
        let entry = entry.unwrap();
        let name = entry.file_name().to_string_lossy().to_string();
        if !(name.ends_with(".yaml") || name.ends_with(".yml") || name == "Kustomization") {
            continue;
        }
        let path = entry.path();
        let src = std::fs::read_to_string(path).unwrap();
        let rel = path
            .strip_prefix(root)
            .unwrap()
            .to_string_lossy()
            .replace('\\', "/");
        let result = scan(Path::new(&rel), &src, &[]);
        out.push(Scanned { rel, src, result });
    }
    out
}

fn is_template(rel: &str) -> bool {
    rel.contains("/templates/")
}

#[test]
fn corpus_fields_are_found_and_templates_are_refused() {
    let root = crate::support::corpus::root();
    let scanned = scan_corpus(&root);
    assert!(
        scanned.len() > 100,
        "only {} YAML files found",
        scanned.len()
    );
    let by_file: BTreeMap<&str, &Scanned> = scanned.iter().map(|s| (s.rel.as_str(), s)).collect();
    let fields = |rel: &str| -> &Vec<ImageField> {
        match &by_file[rel].result {
            Ok(f) => f,
            Err(e) => panic!("{rel}: {e}"),
        }
    };

    // Every plain manifest in microservices-demo names its containers.
    let mut demo = 0;
    for s in scanned.iter().filter(|s| {
        s.rel
            .starts_with("microservices-demo/kubernetes-manifests/")
    }) {
        if s.rel.ends_with("kustomization.yaml") {
            continue;
        }
        let found = fields(&s.rel);
        assert!(
            found
                .iter()
                .any(|f| matches!(f.kind, FieldKind::Container { .. })),
            "{}: no container image found",
            s.rel
        );
        demo += found.len();
    }
    assert!(demo >= 12, "{demo}");
    let front = fields("microservices-demo/kubernetes-manifests/frontend.yaml");
    assert!(front.iter().any(|f| f.kind
        == FieldKind::Container {
            resource: "Deployment/frontend".into(),
            container: "server".into()
        }
        && f.repository().unwrap().path == "library/frontend"));
    let load = fields("microservices-demo/kubernetes-manifests/loadgenerator.yaml");
    let busybox = load
        .iter()
        .find(|f| f.repository().unwrap().path == "library/busybox")
        .unwrap();
    assert_eq!(busybox.current().0, Some("1.38.0"));
    assert!(busybox.current().1.unwrap().starts_with("sha256:fd8d9aa6"));

    // The released bundle is one multi-document file with every service in it.
    let release = fields("microservices-demo/release/kubernetes-manifests.yaml");
    assert!(release.len() >= 12, "{}", release.len());

    // Kustomize components rewrite images by name.
    let tags =
        fields("microservices-demo/kustomize/components/container-images-tag/kustomization.yaml");
    assert_eq!(tags.len(), 11);
    assert!(
        tags.iter()
            .all(|f| matches!(f.kind, FieldKind::Kustomize { .. })
                && f.current().0 == Some("CONTAINER_IMAGES_TAG"))
    );
    // `newName: CONTAINER_IMAGES_REGISTRY/...` is a placeholder, not a repository.
    assert!(
        fields(
            "microservices-demo/kustomize/components/container-images-registry/kustomization.yaml"
        )
        .is_empty()
    );

    // podinfo: kustomize base, Helm values, CronJobs.
    let podinfo = fields("podinfo/kustomize/deployment.yaml");
    assert_eq!(podinfo.len(), 1);
    assert_eq!(
        podinfo[0].repository().unwrap().to_string(),
        "ghcr.io/stefanprodan/podinfo"
    );
    for values in [
        "podinfo/charts/podinfo/values.yaml",
        "podinfo/charts/podinfo/values-prod.yaml",
    ] {
        let v = fields(values);
        let image = v.iter().find(|f| {
            f.kind
                == FieldKind::HelmValues {
                    path: "image".into(),
                }
        });
        let image = image.unwrap_or_else(|| panic!("{values}: {v:?}"));
        assert_eq!(
            image.repository().unwrap().to_string(),
            "ghcr.io/stefanprodan/podinfo"
        );
        assert!(image.current().0.is_some());
    }
    let cron = fields("podinfo/deploy/bases/database/cronjob-backup-daily.yaml");
    assert!(cron.iter().any(|f| matches!(&f.kind, FieldKind::Container { resource, .. } if resource.starts_with("CronJob/"))));

    // Helm templates either fail to parse (reported, left alone) or yield nothing.
    let templates: Vec<&Scanned> = scanned.iter().filter(|s| is_template(&s.rel)).collect();
    assert!(templates.len() > 10);
    let mut refused = 0;
    for t in &templates {
        match &t.result {
            Err(e @ ManifestError::Parse { .. }) => {
                assert!(e.to_string().starts_with(&format!("{}:", t.rel)), "{e}");
                refused += 1;
            }
            Err(e) => panic!("{}: {e}", t.rel),
            Ok(f) => assert!(f.is_empty(), "{}: template gave fields {f:?}", t.rel),
        }
    }
    assert!(
        refused * 2 > templates.len(),
        "only {refused} of {} templates refused",
        templates.len()
    );
    assert!(matches!(
        by_file["podinfo/charts/podinfo/templates/deployment.yaml"].result,
        Err(ManifestError::Parse { .. })
    ));

    // Nothing outside templates fails to parse.
    for s in scanned.iter().filter(|s| !is_template(&s.rel)) {
        if let Err(e) = &s.result {
            panic!("{}: {e}", s.rel);
        }
    }
}

/// A tag that reads as a number in plain YAML, to exercise the quoting rule everywhere.
const NEW_TAG: &str = "9.10";
const NEW_DIGEST: &str = "sha256:abababababababababababababababababababababababababababababababab";

#[test]
fn every_corpus_field_can_be_edited_surgically() {
    let root = crate::support::corpus::root();
    let mut edited = 0;
    for s in scan_corpus(&root) {
        let Ok(fields) = &s.result else { continue };
        for (i, field) in fields.iter().enumerate() {
            let name = field
                .repository()
                .map(|r| r.to_string())
                .unwrap_or_else(|| "ghcr.io/x/y".into());
            for digest in [None, Some(NEW_DIGEST)] {
                let update = Update {
                    name: &name,
                    tag: Some(NEW_TAG),
                    digest,
                };
                let edits = field
                    .edits(&update)
                    .unwrap_or_else(|e| panic!("{}: {e}", s.rel));
                let out = apply_edits(Path::new(&s.rel), &s.src, &edits)
                    .unwrap_or_else(|e| panic!("{}: {e}", s.rel));
                assert_changed_only_at(&s.src, &out, &edits, &s.rel);
                // Scanning the result finds the same field, now holding the new tag.
                let again = scan(Path::new(&s.rel), &out, &[]).unwrap();
                assert_eq!(again.len(), fields.len(), "{}", s.rel);
                assert_eq!(again[i].kind, field.kind, "{}", s.rel);
                // A kustomize entry is written only in the keys it pins.
                let pins = field.pins();
                let (old_tag, old_digest) = field.current();
                assert_eq!(
                    again[i].current(),
                    (
                        if pins.tag { Some(NEW_TAG) } else { old_tag },
                        if pins.digest { digest } else { old_digest }
                    ),
                    "{}: {:?}",
                    s.rel,
                    field.kind
                );
                // And a second run has nothing to do.
                assert!(again[i].edits(&update).unwrap().is_empty(), "{}", s.rel);
                edited += 1;
            }
        }
    }
    assert!(edited > 100, "{edited}");
}

/// Outside the edited spans, the old and new texts are byte for byte the same.
fn assert_changed_only_at(old: &str, new: &str, edits: &[manifest::Edit], what: &str) {
    let mut edits = edits.to_vec();
    edits.sort_by_key(|e| e.span.start);
    let mut rebuilt = String::new();
    let mut pos = 0;
    for e in &edits {
        rebuilt.push_str(&old[pos..e.span.start]);
        rebuilt.push_str(&e.text);
        pos = e.span.end;
    }
    rebuilt.push_str(&old[pos..]);
    assert_eq!(rebuilt, new, "{what}");
    for e in &edits {
        // Tags, digests and names never bring line breaks or comments with them.
        assert!(
            !e.text
                .trim_start_matches(['\r', '\n'])
                .contains(['\n', '#']),
            "{what}: {:?}",
            e.text
        );
    }
}

// === property tests ===

mod props {
    use super::*;
    use proptest::prelude::*;

    const REPOS: [&str; 4] = [
        "ghcr.io/a/app",
        "127.0.0.1:5000/shop/api",
        "nginx",
        "docker.io/library/redis",
    ];
    const TAGS: [&str; 10] = [
        "1.0.0",
        "1.10",
        "7",
        "v2.3.4",
        "latest",
        "1.2.3-alpine",
        "2024-01-02",
        "1e3",
        "true",
        "main-abc123",
    ];
    const DIGEST: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    #[derive(Debug, Clone)]
    struct Style {
        quote: u8,
        comment: Option<&'static str>,
        anchor: bool,
    }

    fn style() -> impl Strategy<Value = Style> {
        (
            0u8..3,
            prop::option::of(prop::sample::select(vec!["# note", "# 日本語 ünï", "#x"])),
            any::<bool>(),
        )
            .prop_map(|(quote, comment, anchor)| Style {
                quote,
                comment,
                anchor,
            })
    }

    #[derive(Debug, Clone)]
    struct Layout {
        crlf: bool,
        bom: bool,
        indent: usize,
        explicit_start: bool,
        explicit_end: bool,
        flow: bool,
    }

    fn layout() -> impl Strategy<Value = Layout> {
        (
            any::<bool>(),
            any::<bool>(),
            prop::sample::select(vec![2usize, 4]),
            any::<bool>(),
            any::<bool>(),
            any::<bool>(),
        )
            .prop_map(
                |(crlf, bom, indent, explicit_start, explicit_end, flow)| Layout {
                    crlf,
                    bom,
                    indent,
                    explicit_start,
                    explicit_end,
                    flow,
                },
            )
    }

    /// Writes a scalar in a style; a plain scalar that would not read back as the same string
    /// (`1.10`, `true`) is what the property is about, so it is written plain on purpose.
    fn scalar(text: &str, s: &Style, anchor_name: &str) -> String {
        let body = match s.quote {
            0 => text.to_string(),
            1 => format!("'{text}'"),
            _ => format!("\"{text}\""),
        };
        let anchor = if s.anchor {
            format!("&{anchor_name} ")
        } else {
            String::new()
        };
        let comment = s.comment.map(|c| format!(" {c}")).unwrap_or_default();
        format!("{anchor}{body}{comment}")
    }

    #[derive(Debug, Clone)]
    struct Image {
        repo: &'static str,
        tag: &'static str,
        style: Style,
    }

    fn image() -> impl Strategy<Value = Image> {
        (
            prop::sample::select(REPOS.to_vec()),
            prop::sample::select(TAGS.to_vec()),
            style(),
        )
            .prop_map(|(repo, tag, style)| Image { repo, tag, style })
    }

    #[derive(Debug, Clone)]
    enum Doc {
        Deployment(Vec<Image>),
        Values {
            map: Image,
            string: Image,
            has_tag: bool,
        },
    }

    fn doc() -> impl Strategy<Value = Doc> {
        prop_oneof![
            prop::collection::vec(image(), 1..4).prop_map(Doc::Deployment),
            (image(), image(), any::<bool>()).prop_map(|(map, string, has_tag)| Doc::Values {
                map,
                string,
                has_tag
            }),
        ]
    }

    fn render_doc(doc: &Doc, l: &Layout, n: usize, out: &mut Vec<String>) {
        let i = " ".repeat(l.indent);
        match doc {
            Doc::Deployment(images) => {
                out.push("apiVersion: apps/v1".into());
                out.push("kind: Deployment".into());
                out.push(format!("metadata: {{name: wébapp-{n}}}  # ünïcode"));
                out.push("spec:".into());
                out.push(format!("{i}template:"));
                out.push(format!("{i}{i}spec:"));
                out.push(format!("{i}{i}{i}containers:"));
                for (k, img) in images.iter().enumerate() {
                    let reference = format!("{}:{}", img.repo, img.tag);
                    if l.flow {
                        // A comment cannot sit inside a flow mapping on one line.
                        let s = Style {
                            comment: None,
                            ..img.style.clone()
                        };
                        let v = scalar(&reference, &s, &format!("a{n}x{k}"));
                        out.push(format!("{i}{i}{i}- {{name: c{k}, image: {v}}}"));
                    } else {
                        out.push(format!("{i}{i}{i}- name: c{k}"));
                        let v = scalar(&reference, &img.style, &format!("a{n}x{k}"));
                        out.push(format!("{i}{i}{i}  image: {v}"));
                    }
                }
            }
            Doc::Values {
                map,
                string,
                has_tag,
            } => {
                out.push("# values".into());
                out.push("image:".into());
                out.push(format!("{i}repository: {}", map.repo));
                if *has_tag {
                    out.push(format!(
                        "{i}tag: {}",
                        scalar(map.tag, &map.style, &format!("t{n}"))
                    ));
                }
                out.push(format!("{i}pullPolicy: IfNotPresent"));
                out.push("worker:".into());
                let reference = format!("{}:{}", string.repo, string.tag);
                out.push(format!(
                    "{i}image: {}",
                    scalar(&reference, &string.style, &format!("w{n}"))
                ));
            }
        }
    }

    fn render(docs: &[Doc], l: &Layout) -> String {
        let mut lines = Vec::new();
        for (n, d) in docs.iter().enumerate() {
            if l.explicit_start || n > 0 {
                lines.push("---".to_string());
            }
            render_doc(d, l, n, &mut lines);
            if l.explicit_end {
                lines.push("...".to_string());
            }
        }
        let eol = if l.crlf { "\r\n" } else { "\n" };
        let bom = if l.bom { "\u{feff}" } else { "" };
        format!("{bom}{}{eol}", lines.join(eol))
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

        /// Edited documents differ from the original only at the edited values: the bytes
        /// around them are untouched and scanning again finds every field, the edited ones
        /// with their new tag and digest, the others as they were.
        #[test]
        fn edits_change_only_the_edited_values(
            docs in prop::collection::vec(doc(), 1..3),
            l in layout(),
            picks in prop::collection::vec((any::<bool>(), prop::sample::select(TAGS.to_vec()), any::<bool>()), 8),
        ) {
            let src = render(&docs, &l);
            let path = Path::new("values.yaml");
            let fields = scan(path, &src, &[]).map_err(|e| TestCaseError::fail(format!("{e}\n{src}")))?;
            prop_assert!(!fields.is_empty(), "{}", src);
            let mut edits = Vec::new();
            let mut want = Vec::new();
            for (k, field) in fields.iter().enumerate() {
                let (edit, tag, pin) = picks[k % picks.len()];
                let name = field.repository().unwrap().to_string();
                if edit {
                    let digest = pin.then_some(DIGEST);
                    edits.extend(field.edits(&Update { name: &name, tag: Some(tag), digest }).unwrap());
                    want.push((Some(tag.to_string()), digest.map(String::from)));
                } else {
                    let (t, d) = field.current();
                    want.push((t.map(String::from), d.map(String::from)));
                }
            }
            let out = apply_edits(path, &src, &edits).map_err(|e| TestCaseError::fail(format!("{e}\n{src}")))?;
            assert_changed_only_at(&src, &out, &edits, &src);
            let again = scan(path, &out, &[]).unwrap();
            let got: Vec<_> = again
                .iter()
                .map(|f| (f.current().0.map(String::from), f.current().1.map(String::from)))
                .collect();
            prop_assert_eq!(got, want, "{}\n---- became ----\n{}", src, out);
            prop_assert_eq!(
                again.iter().map(|f| f.kind.clone()).collect::<Vec<_>>(),
                fields.iter().map(|f| f.kind.clone()).collect::<Vec<_>>()
            );
        }

        /// Arbitrary, mostly YAML-shaped input never panics the reader or the editor, and an
        /// edit that applies always scans again.
        #[test]
        fn editor_never_panics(
            pieces in prop::collection::vec(prop::sample::select(vec![
                "image: ", "kind: Pod\n", "spec:\n", "  containers:\n", "  - ", "name: x", "\n", "\r\n",
                "{", "}", "[", "]", ", ", "'", "\"", "#", " # tagpilot: p:tag", "&a ", "*a", "---\n", "...\n",
                "nginx:1.0", "ghcr.io/a/b:1.10", "|\n", ">-\n", "    ", "\t", "é", "\u{feff}", "images:\n",
                "newTag: 1", "repository: x/y", "tag: 2", ": ", "?", "- ", "{{ .Values.x }}", "%YAML 1.2\n",
            ]), 0..40),
            tag in prop::sample::select(TAGS.to_vec()),
            kustomize in any::<bool>(),
        ) {
            let src: String = pieces.concat();
            let path = Path::new(if kustomize { "kustomization.yaml" } else { "values.yaml" });
            if let Ok(fields) = scan(path, &src, &[]) {
                for field in &fields {
                    let name = field.repository().map(|r| r.to_string()).unwrap_or_else(|| "ghcr.io/x/y".into());
                    let Ok(edits) = field.edits(&Update { name: &name, tag: Some(tag), digest: Some(DIGEST) }) else {
                        continue;
                    };
                    if let Ok(out) = apply_edits(path, &src, &edits) {
                        assert_changed_only_at(&src, &out, &edits, &src);
                        prop_assert!(scan(path, &out, &[]).is_ok());
                    }
                }
            }
        }
    }
}

/// The golden cases' `out/` trees (written by hand for the plan-level harness) agree with what
/// this module does to `in/`, with the tags the cases' registries lead to.
#[test]
fn golden_cases_agree_with_the_editor() {
    use tagpilot::policy::HelmPaths;
    // Cases whose point is a decision the planner makes (a hold, a skipped Helm template, a
    // digest strategy): the editor alone would write what the planner refuses to.
    // The version labels' settings and second image are the planner's too.
    const PLANNER_DECISIONS: [&str; 7] = [
        "ci-placeholders",
        "helm-chart-templates",
        "helm-chart-values",
        "kustomize-component-placeholders",
        "kustomize-digest-entries",
        "version-labels-config",
        "version-labels-rollout",
    ];
    let mut cases = 0;
    for case in crate::golden::cases("rewrite") {
        let name = case.file_name().unwrap().to_string_lossy().to_string();
        // The chart cases (issue 32): each chart's version is its policy's decision too.
        if PLANNER_DECISIONS.contains(&name.as_str()) || name.starts_with("chart-") {
            continue;
        }
        cases += 1;
        let explicit = HelmPaths {
            repository: Some("services[1].img.repo".into()),
            tag: Some("services[1].img.version".into()),
            ..Default::default()
        };
        let (input, output) = (case.join("in"), case.join("out"));
        for entry in walkdir::WalkDir::new(&input).sort_by_file_name() {
            let entry = entry.unwrap();
            if !entry.file_type().is_file() {
                continue;
            }
            let rel = entry.path().strip_prefix(&input).unwrap();
            let src = std::fs::read_to_string(entry.path()).unwrap();
            let want = std::fs::read_to_string(output.join(rel))
                .unwrap_or_else(|e| panic!("{name}: out/{} missing: {e}", rel.display()));
            let helm = if name == "helm-explicit-paths" && rel.starts_with("apps/api") {
                vec![explicit.clone()]
            } else {
                vec![]
            };
            let fields = match scan(rel, &src, &helm) {
                Ok(f) => f,
                Err(ManifestError::Parse { .. }) => {
                    assert_eq!(
                        src,
                        want,
                        "{name}: {} does not parse and must be left alone",
                        rel.display()
                    );
                    continue;
                }
                Err(e) => panic!("{name}: {e}"),
            };
            let mut edits = Vec::new();
            let mut moves = Vec::new();
            let labels = tagpilot::config::version_labels::VersionLabels::defaults();
            for f in &fields {
                let repo = f.repository().map(|r| r.to_string());
                let policy = match &f.kind {
                    FieldKind::Marker { policy, .. } => Some(policy.as_str()),
                    _ => None,
                };
                let update = match (repo.as_deref(), policy) {
                    (Some("127.0.0.1:5000/shop/api"), _) | (_, Some("api")) => Update {
                        name: "127.0.0.1:5000/shop/api",
                        tag: Some("1.3.0"),
                        digest: None,
                    },
                    (Some("127.0.0.1:5000/shop/tool"), _) => Update {
                        name: "127.0.0.1:5000/shop/tool",
                        tag: Some("1.10"),
                        digest: None,
                    },
                    _ => continue,
                };
                edits.extend(f.edits(&update).unwrap_or_else(|e| panic!("{name}: {e}")));
                moves.extend(update.tag.map(|tag| tagpilot::manifest::ImageMove {
                    field: f,
                    tag,
                    labels: &labels,
                }));
            }
            // The version labels in the moving images' resources follow them (the defaults).
            let found = tagpilot::manifest::version_labels(rel, &src, &fields, &moves)
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            edits.extend(found.moved.into_iter().map(|m| m.edit));
            let got = apply_edits(rel, &src, &edits).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(got, want, "{name}: {}", rel.display());
        }
    }
    assert!(cases >= 20, "{cases}");
}
