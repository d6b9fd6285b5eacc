//! Chart versions where teams pin them (issue 32): each place is a field keyed by its chart,
//! and an edit changes the version's bytes only.

use super::*;

/// The chart fields of a file: (place, chart as reports show it, version).
fn charts(name: &str, src: &str) -> Vec<(String, String, String)> {
    scan_ok(name, src)
        .into_iter()
        .filter_map(|f| match &f.kind {
            FieldKind::Chart { place } => Some((
                place.clone(),
                crate::policy::chart::display(f.repository().unwrap()),
                f.current().0.unwrap_or_default().to_string(),
            )),
            _ => None,
        })
        .collect()
}

/// The file with its `index`th field moved to `version`.
fn bump(name: &str, src: &str, index: usize, version: &str) -> String {
    edit(name, src, index, &tag(version))
}

const APPLICATION: &str = "\
apiVersion: argoproj.io/v1alpha1
kind: Application
metadata:
  name: web
spec:
  sources:
    - repoURL: https://charts.example/stable
      chart: podinfo
      targetRevision: 6.5.0   # the chart
    - repoURL: oci://registry.example:5000/charts/redis
      targetRevision: \"1.2.3\"
    - repoURL: registry.example:5000/charts
      chart: nginx
      targetRevision: 2.0.0
    - repoURL: https://git.example/team/config.git
      targetRevision: main
";

#[test]
fn argocd_sources_pin_chart_versions_by_chart_from_any_repository_url() {
    assert_eq!(
        charts("app.yaml", APPLICATION),
        [
            (
                "Application/web sources[0] targetRevision".to_string(),
                "https://charts.example/stable/podinfo".to_string(),
                "6.5.0".to_string()
            ),
            (
                "Application/web sources[1] targetRevision".to_string(),
                "oci://registry.example:5000/charts/redis".to_string(),
                "1.2.3".to_string()
            ),
            (
                "Application/web sources[2] targetRevision".to_string(),
                "oci://registry.example:5000/charts/nginx".to_string(),
                "2.0.0".to_string()
            ),
        ]
    );
    let out = bump("app.yaml", APPLICATION, 0, "6.6.0");
    assert_eq!(
        out,
        APPLICATION.replace("6.5.0   # the chart", "6.6.0   # the chart")
    );
    let out = bump("app.yaml", APPLICATION, 1, "1.3.0+build.1");
    assert_eq!(out, APPLICATION.replace("\"1.2.3\"", "\"1.3.0+build.1\""));
}

#[test]
fn chart_yaml_dependencies_and_kustomize_helm_charts_pin_versions() {
    let chart = "\
apiVersion: v2
name: shop
version: 0.1.0
dependencies:
  - name: redis
    version: 18.1.0
    repository: oci://registry.example/charts
  - name: common
    version: 1.0.0
    repository: file://../common
  - name: postgresql
    version: ~12.1.0
    repository: https://charts.example/bitnami
";
    let found = charts("shop/Chart.yaml", chart);
    assert_eq!(
        found.len(),
        2,
        "a file:// dependency is no chart to follow: {found:?}"
    );
    assert_eq!(found[0].0, "Chart.yaml dependency redis");
    assert_eq!(found[1].2, "~12.1.0");
    assert_eq!(
        bump("shop/Chart.yaml", chart, 0, "18.2.0"),
        chart.replace("18.1.0", "18.2.0")
    );
    let kustomization = "\
helmCharts:
- name: podinfo
  repo: https://charts.example/stable
  version: 6.5.0
  releaseName: web
";
    let found = charts("kustomization.yaml", kustomization);
    assert_eq!(found[0].0, "kustomize helmChart podinfo");
    assert_eq!(
        bump("kustomization.yaml", kustomization, 0, "6.6.0"),
        kustomization.replace("6.5.0", "6.6.0")
    );
}

#[test]
fn flux_helm_releases_find_their_repository_in_the_file_and_oci_repositories_pin_a_tag() {
    let flux = "\
apiVersion: source.toolkit.fluxcd.io/v1
kind: HelmRepository
metadata:
  name: stable
spec:
  url: https://charts.example/stable
---
apiVersion: helm.toolkit.fluxcd.io/v2
kind: HelmRelease
metadata:
  name: web
spec:
  chart:
    spec:
      chart: podinfo
      version: '6.5.0'
      sourceRef:
        kind: HelmRepository
        name: stable
---
apiVersion: helm.toolkit.fluxcd.io/v2
kind: HelmRelease
metadata:
  name: elsewhere
spec:
  chart:
    spec:
      chart: other
      version: 1.0.0
      sourceRef:
        kind: HelmRepository
        name: not-in-this-file
---
apiVersion: source.toolkit.fluxcd.io/v1beta2
kind: OCIRepository
metadata:
  name: redis
spec:
  url: oci://registry.example/charts/redis
  ref:
    tag: 18.1.0
";
    let found = charts("flux.yaml", flux);
    assert_eq!(
        found,
        [
            (
                "HelmRelease/web chart podinfo".to_string(),
                "https://charts.example/stable/podinfo".to_string(),
                "6.5.0".to_string()
            ),
            (
                "OCIRepository/redis ref.tag".to_string(),
                "oci://registry.example/charts/redis".to_string(),
                "18.1.0".to_string()
            ),
        ]
    );
    assert_eq!(
        bump("flux.yaml", flux, 0, "6.6.0"),
        flux.replace("'6.5.0'", "'6.6.0'")
    );
}

const HELMFILE: &str = "\
repositories:
  - name: stable
    url: https://charts.example/stable
  - name: registry
    url: registry.example/charts
    oci: true
releases:
  - name: web
    chart: stable/podinfo
    version: 6.5.0
    values:
      - values.yaml.gotmpl
  - name: cache
    chart: registry/redis
{{- if .Values.pinned }}
    version: {{ .Values.redisVersion }}
{{- end }}
  - name: local
    chart: ./charts/local
    version: 0.1.0
";

#[test]
fn helmfile_releases_pin_versions_and_a_templated_version_is_named_not_edited() {
    let name = "helmfile.yaml.gotmpl";
    let found = charts(name, HELMFILE);
    assert_eq!(
        found,
        [(
            "helmfile release web".to_string(),
            "https://charts.example/stable/podinfo".to_string(),
            "6.5.0".to_string()
        )]
    );
    assert_eq!(
        bump(name, HELMFILE, 0, "6.6.0"),
        HELMFILE.replace("6.5.0", "6.6.0")
    );
    let scanned = scan_with_markers(Path::new(name), HELMFILE, &[]).unwrap();
    let dropped: Vec<_> = scanned
        .dropped
        .iter()
        .map(|d| (d.line, d.repository.as_ref().unwrap().to_string()))
        .collect();
    assert_eq!(dropped, [(16, "registry.example/charts/redis".to_string())]);
    assert_eq!(
        scanned.templated.iter().map(|t| t.line).collect::<Vec<_>>(),
        [15, 16, 17]
    );
}

#[test]
fn a_templated_values_file_is_edited_on_its_literal_lines_only() {
    let name = "values.yaml.gotmpl";
    let src = "\
image:
  repository: registry.example/shop/app
  tag: 1.0.0
sidecar:
  image: \"{{ .Values.registry }}/shop/sidecar:1.0.0\"
";
    let fields = scan_ok(name, src);
    assert_eq!(fields.len(), 1, "{fields:?}");
    assert_eq!(
        retag(name, src, 0, "1.1.0"),
        src.replace("tag: 1.0.0", "tag: 1.1.0")
    );
}
