//! The YAML reader and editor against real-world files nobody on this project wrote
//! (`/work/shared/corpus`), plus property tests over generated documents.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use tagpilot::manifest::{self, FieldKind, ImageField, ManifestError, Update, apply_edits, scan};

/// `../shared/corpus` beside the repository (worktrees sit one level deeper, so the nearest
/// ancestor that has one wins).
fn corpus_root() -> Option<PathBuf> {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    let found = here
        .ancestors()
        .skip(1)
        .map(|a| a.join("shared/corpus"))
        .find(|c| c.is_dir());
    if let Some(root) = found {
        Some(root)
    } else {
        let root = here.join("../shared/corpus");
        eprintln!(
            "\n!!!! SKIPPING the corpus test: {} is absent. The real-world YAML files are not \
             checked in this run. !!!!\n",
            root.display()
        );
        None
    }
}

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
    let Some(root) = corpus_root() else { return };
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
    let Some(root) = corpus_root() else { return };
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
                assert_eq!(
                    again[i].current(),
                    (Some(NEW_TAG), digest),
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
