use super::*;

/// Issue 17, "Filters fail closed": `ignoreTags` globs that are each valid but too large
/// to match together used to become an empty set, which ignores nothing.
#[test]
fn ignore_tags_that_cannot_be_matched_together_are_an_error() {
    let globs: Vec<String> = (0..400)
        .map(|i| format!("      - \"{}{i}\"\n", "?[a-z]".repeat(400)))
        .collect();
    let yaml = format!(
        "apiVersion: tagpilot.dev/v1alpha1\nkind: ImagePolicy\nmetadata:\n  name: api\nspec:\n  image: r.example/api\n  strategy: {{semver: {{}}}}\n  ignoreTags:\n{}",
        globs.concat()
    );
    let errors = crate::policy::parse_file(Path::new("p.yaml"), &yaml)
        .expect_err("no policy that ignores nothing");
    let text = errors.to_string();
    assert!(text.contains("p.yaml:9"), "{text}");
    assert!(
        text.contains("ignoreTags: the globs cannot be matched together"),
        "{text}"
    );
}

#[test]
fn value_paths() {
    for ok in ["image.tag", "images[1].tag", "a.b[0][2].c", "tag"] {
        assert!(check_value_path(ok).is_ok(), "{ok}");
    }
    for bad in ["", "image..tag", "images[x].tag", "images[1", ".tag", "a[]"] {
        assert!(check_value_path(bad).is_err(), "{bad}");
    }
}

/// Issue 22: a `signatures:` key that cannot be read is an error at the setting's line, and
/// the policy is not planned; it never means "no signature required".
#[test]
fn a_signature_key_that_cannot_be_read_is_an_error_at_its_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p.yaml");
    let yaml = "apiVersion: tagpilot.dev/v1alpha1\nkind: ImagePolicy\nmetadata:\n  name: api\nspec:\n  image: r.example/api\n  strategy: {semver: {}}\n  signatures:\n    keys: [{file: gone.pub}]\n";
    let text = crate::policy::parse_file(&path, yaml)
        .expect_err("no policy without its key")
        .to_string();
    assert!(text.contains("p.yaml:9"), "{text}");
    assert!(
        text.contains("spec.signatures: reading the public key file"),
        "{text}"
    );
    assert!(text.contains("gone.pub"), "{text}");
    let pem = rcgen::KeyPair::generate().unwrap().public_key_pem();
    std::fs::write(dir.path().join("cosign.pub"), pem).unwrap();
    let ok = crate::policy::parse_file(&path, &yaml.replace("gone.pub", "cosign.pub")).unwrap();
    assert_eq!(ok[0].signatures.as_ref().unwrap().keys.len(), 1);
}

/// Issue 28: `./apps/**` and a bare `apps` matched no file; Flux users write both.
#[test]
fn target_paths_read_as_flux_users_write_them() {
    assert_eq!(target_globs("./apps/**"), ["apps/**"]);
    assert_eq!(target_globs("apps"), ["apps", "apps/**"]);
    assert_eq!(target_globs("./apps/"), ["apps/**"]);
    assert_eq!(target_globs("."), ["**"]);
    assert_eq!(target_globs("apps/*/values.yaml"), ["apps/*/values.yaml"]);
    let yaml = "apiVersion: tagpilot.dev/v1alpha1\nkind: ImagePolicy\nmetadata:\n  name: api\nspec:\n  image: r.example/api\n  strategy: {semver: {}}\n  targets:\n    - paths: [./apps/**]\n    - paths: [clusters/prod]\n";
    let policy = &crate::policy::parse_file(Path::new("p.yaml"), yaml).unwrap()[0];
    assert!(policy.targets[0].matches(Path::new("apps/api/deploy.yaml")));
    assert!(policy.targets[1].matches(Path::new("clusters/prod/apps/api.yaml")));
    assert!(!policy.targets[1].matches(Path::new("clusters/production/api.yaml")));
}

/// Issue 32: a policy follows one image or one chart; what a chart has no use for is refused,
/// each at the spec, never ignored.
#[test]
fn a_chart_policy_is_checked_for_what_a_chart_can_be() {
    let doc = |spec: &str| {
        format!(
            "apiVersion: tagpilot.dev/v1alpha1\nkind: ImagePolicy\nmetadata:\n  name: c\nspec:\n{spec}"
        )
    };
    let ok = crate::policy::parse_file(
        Path::new("p.yaml"),
        &doc("  chart: {repository: https://charts.example/stable, name: web}\n  strategy: {semver: {range: \"<2\"}}\n  minAge: 1h\n"),
    )
    .unwrap();
    let chart = ok[0].chart.as_ref().unwrap();
    assert_eq!(ok[0].image.registry, "https://charts.example/stable");
    assert_eq!(chart.name, "web");
    for (spec, says) in [
        (
            "  image: r.example/a\n  chart: {repository: oci://r.example/charts/a}\n  strategy: {semver: {}}\n",
            "spec.image and spec.chart are both set",
        ),
        (
            "  strategy: {semver: {}}\n",
            "spec sets neither image nor chart",
        ),
        (
            "  chart: {repository: https://charts.example}\n  strategy: {semver: {}}\n",
            "spec.chart: an HTTP chart repository needs the chart's name",
        ),
        (
            "  chart: {repository: https://charts.example, name: a}\n  strategy: {newestBuild: {}}\n",
            "the newestBuild strategy reads an OCI registry",
        ),
        (
            "  chart: {repository: oci://r.example/charts/a}\n  strategy: {semver: {}}\n  platforms: [linux/amd64]\n",
            "a chart has no platforms",
        ),
        (
            "  chart: {repository: oci://r.example/charts/a}\n  strategy: {semver: {}}\n  exclude: [oci://r.example/charts/b]\n",
            "p.yaml:8:13: policy \"c\": exclude: a chart policy follows one chart",
        ),
        (
            "  chart: {repository: oci://r.example/charts/a}\n  strategy: {semver: {}}\n  priority: 2\n",
            "p.yaml:8:13: policy \"c\": priority: orders image patterns only",
        ),
        (
            "  chart: {repository: oci://r.example/charts/*}\n  strategy: {semver: {}}\n",
            "p.yaml:6:10: policy \"c\": spec.chart: a chart pattern is not supported",
        ),
    ] {
        let errors = crate::policy::parse_file(Path::new("p.yaml"), &doc(spec))
            .expect_err(spec)
            .to_string();
        assert!(errors.contains(says), "{spec}: {errors}");
    }
}

/// Issue 31: a pattern is checked like every other value, each problem at its
/// `file:line:column`, and the keys only a pattern reads are refused on an exact image.
#[test]
fn a_pattern_and_its_keys_are_checked_at_their_lines() {
    let doc = |name: &str, spec: &str| {
        format!(
            "apiVersion: tagpilot.dev/v1alpha1\nkind: ImagePolicy\nmetadata:\n  name: {name}\nspec:\n  strategy: {{semver: {{}}}}\n{spec}---\n"
        )
    };
    let yaml = [
        doc("nohost", "  image: shop/**\n"),
        doc("regex", "  image: r.example/shop/*-(api|web)\n"),
        doc(
            "mixed",
            "  image: r.example/shop/*\n  exclude: [other.example/shop/x]\n",
        ),
        doc("exact", "  image: r.example/shop/api\n  priority: 3\n"),
        doc(
            "alias",
            "  image: r.example/shop/*\n  targets:\n    - kustomize: {imageName: api}\n",
        ),
        doc(
            "helm",
            "  image: r.example/shop/*\n  targets:\n    - helm: {tag: image.tag}\n",
        ),
        doc(
            "promote",
            "  image: r.example/shop/*\n  promote: {from: [{path: envs/staging/a.yaml}]}\n",
        ),
        doc(
            "fine",
            "  image: r.example/shop/**\n  exclude: [r.example/shop/legacy-*]\n  priority: 5\n",
        ),
    ]
    .concat();
    let errors = crate::policy::parse_file(Path::new("p.yaml"), &yaml)
        .expect_err("every broken pattern is named");
    let text = errors.to_string();
    for (line, words) in [
        (
            "p.yaml:7:10",
            "policy \"nohost\": spec.image: pattern \"shop/**\": a pattern names its registry host first",
        ),
        (
            "p.yaml:15:10",
            "policy \"regex\": spec.image: pattern \"r.example/shop/*-(api|web)\": '(' is not a wildcard here",
        ),
        (
            "p.yaml:24:13",
            "exclude: \"other.example/shop/x\": in registry other.example, the pattern in r.example",
        ),
        ("p.yaml:33:13", "priority: orders patterns only"),
        (
            "p.yaml:43:7",
            "targets[].kustomize.imageName: a pattern follows many images",
        ),
        (
            "p.yaml:53:13",
            "targets[].helm: a pattern policy's Helm values need `repository` or `image`",
        ),
        ("p.yaml:62:12", "promote: a pattern policy cannot promote"),
    ] {
        assert!(
            text.lines()
                .any(|l| l.starts_with(line) && l.contains(words)),
            "{line} {words}:\n{text}"
        );
    }
    assert_eq!(errors.0.len(), 7, "{text}");
}
