//! `deploy/`: the Helm chart and the kustomize base, rendered by the real `helm` and `kubectl`
//! and checked by `kubernetes-validate` (all three installed by `scripts/test.sh` into
//! `$TAGPILOT_TOOLS`; a missing tool fails these tests, it never skips them). Beyond schema
//! validity: the container args are flags `tagpilot run` accepts (the built binary parses
//! them), the Pods meet Pod Security `restricted`, RBAC grows only with the features that need
//! it, a typo in values fails, and the chart's defaults and the kustomize base render the same
//! Deployment args, ports and RBAC rules. The ImageUpdater CRD: installed only when asked, the
//! same from the chart and from kustomize, structural, and knowing exactly the fields tagpilot
//! reads.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::{Value, json};

/// Where `scripts/test.sh` put helm, kubectl and kubernetes-validate.
pub(crate) fn tools() -> PathBuf {
    let dir = std::env::var_os("TAGPILOT_TOOLS")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").expect("HOME")).join(".cache/tagpilot-tools")
        });
    for tool in ["bin/helm", "bin/kubectl", "venv/bin/kubernetes-validate"] {
        assert!(
            dir.join(tool).is_file(),
            "{} is missing: scripts/test.sh installs helm, kubectl and kubernetes-validate \
             (scripts/lib/deploy-tools.sh); or set TAGPILOT_TOOLS to where they are",
            dir.join(tool).display()
        );
    }
    dir
}

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn chart() -> PathBuf {
    root().join("deploy/helm/tagpilot")
}

fn run(command: &mut Command) -> Output {
    let shown = format!("{command:?}");
    command.output().unwrap_or_else(|e| panic!("{shown}: {e}"))
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// `helm template tagpilot deploy/helm/tagpilot -n tagpilot --set …`.
fn helm_template(sets: &[&str]) -> Result<String, String> {
    let mut command = Command::new(tools().join("bin/helm"));
    command
        .args(["template", "tagpilot"])
        .arg(chart())
        .args(["--namespace", "tagpilot"]);
    for set in sets {
        command.args(["--set", set]);
    }
    let out = run(&mut command);
    if out.status.success() {
        Ok(String::from_utf8(out.stdout).unwrap())
    } else {
        Err(text(&out))
    }
}

fn render(sets: &[&str]) -> String {
    helm_template(sets).unwrap_or_else(|e| panic!("helm template {sets:?} failed:\n{e}"))
}

fn kustomize() -> String {
    let out = run(Command::new(tools().join("bin/kubectl"))
        .arg("kustomize")
        .arg(root().join("deploy/kustomize")));
    assert!(out.status.success(), "kubectl kustomize:\n{}", text(&out));
    String::from_utf8(out.stdout).unwrap()
}

/// Every feature the chart has, switched on at once.
const FEATURES: &[&str] = &[
    "crds.install=true",
    "imageUpdaterMetrics=true",
    "applications.fromCluster.enabled=true",
    "applications.fromCluster.writeBackMethod=argocd",
    "applications.fromCluster.repositorySecrets=true",
    "applications.fromCluster.secrets[0].namespace=argocd",
    "applications.fromCluster.secrets[0].name=registry-creds",
    "serviceMonitor.enabled=true",
    "secrets.git=tagpilot-git",
    "secrets.registry=tagpilot-registry",
    "secrets.webhook.name=tagpilot-webhook",
    "secrets.env[0]=tagpilot-tokens",
    "replicas=3",
];

/// The value sets every render check runs over.
fn renders() -> Vec<(&'static str, String)> {
    vec![
        ("chart defaults", render(&[])),
        ("chart with every feature", render(FEATURES)),
        (
            "chart without leader election",
            render(&["leaderElection.enabled=false", "replicas=1"]),
        ),
        (
            "chart reading Applications of two namespaces",
            render(&[
                "applications.fromCluster.enabled=true",
                "applications.fromCluster.namespaces={team-a,team-b}",
            ]),
        ),
        ("kustomize base", kustomize()),
    ]
}

/// The objects of a multi-document YAML stream.
fn objects(yaml: &str) -> Vec<Value> {
    serde_saphyr::from_multiple::<Value>(yaml)
        .unwrap_or_else(|e| panic!("rendered YAML does not parse: {e}\n{yaml}"))
        .into_iter()
        .filter(|v| !v.is_null())
        .collect()
}

fn of_kind<'a>(objects: &'a [Value], kind: &str) -> Vec<&'a Value> {
    objects.iter().filter(|o| o["kind"] == kind).collect()
}

fn deployment(objects: &[Value]) -> &Value {
    let deployments = of_kind(objects, "Deployment");
    assert_eq!(deployments.len(), 1, "one Deployment");
    deployments[0]
}

fn container(objects: &[Value]) -> &Value {
    &deployment(objects)["spec"]["template"]["spec"]["containers"][0]
}

fn args(objects: &[Value]) -> Vec<String> {
    container(objects)["args"]
        .as_array()
        .expect("args")
        .iter()
        .map(|a| a.as_str().unwrap().to_string())
        .collect()
}

/// Every RBAC rule, as (kind of role, namespace, rule), sorted.
fn rbac(objects: &[Value]) -> Vec<(String, String, Value)> {
    let mut rules = Vec::new();
    for role in objects
        .iter()
        .filter(|o| o["kind"] == "Role" || o["kind"] == "ClusterRole")
    {
        for rule in role["rules"].as_array().cloned().unwrap_or_default() {
            rules.push((
                role["kind"].as_str().unwrap().to_string(),
                role["metadata"]["namespace"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
                rule,
            ));
        }
    }
    rules.sort_by_key(|r| format!("{r:?}"));
    rules
}

/// The rules of `rbac` about `resource`.
fn rules_for<'a>(
    rbac: &'a [(String, String, Value)],
    resource: &str,
) -> Vec<&'a (String, String, Value)> {
    rbac.iter()
        .filter(|(_, _, rule)| {
            rule["resources"]
                .as_array()
                .is_some_and(|r| r.iter().any(|x| x == resource))
        })
        .collect()
}

#[test]
fn helm_lint_passes_with_defaults_and_every_feature() {
    for sets in [&[][..], FEATURES] {
        let mut command = Command::new(tools().join("bin/helm"));
        command.args(["lint", "--strict"]).arg(chart());
        for set in sets {
            command.args(["--set", set]);
        }
        let out = run(&mut command);
        assert!(out.status.success(), "helm lint {sets:?}:\n{}", text(&out));
    }
}

#[test]
fn every_render_is_valid_for_kubernetes() {
    let dir = tempfile::tempdir().unwrap();
    for (name, yaml) in renders() {
        let file = dir.path().join(format!("{}.yaml", name.replace(' ', "-")));
        std::fs::write(&file, &yaml).unwrap();
        let out = run(Command::new(tools().join("venv/bin/kubernetes-validate"))
            .args(["--kubernetes-version", "1.31.0", "--strict", "--quiet"])
            .arg(&file));
        let report = text(&out);
        assert!(out.status.success(), "{name}:\n{report}");
        // The validator knows no CRDs and skips them with a warning; the ServiceMonitor is
        // checked below instead. Nothing else may be skipped.
        for line in report.lines().filter(|l| l.starts_with("WARN")) {
            assert!(
                line.contains("kind ServiceMonitor with api version monitoring.coreos.com/v1"),
                "{name}: {line}"
            );
        }
    }
}

#[test]
fn the_service_monitor_scrapes_every_replica_through_the_metrics_service() {
    assert!(of_kind(&objects(&render(&[])), "ServiceMonitor").is_empty());
    let objects = objects(&render(FEATURES));
    let monitors = of_kind(&objects, "ServiceMonitor");
    assert_eq!(monitors.len(), 1);
    let monitor = monitors[0];
    assert_eq!(monitor["apiVersion"], "monitoring.coreos.com/v1");
    let selector = monitor["spec"]["selector"]["matchLabels"]
        .as_object()
        .expect("matchLabels");
    let selected: Vec<&Value> = of_kind(&objects, "Service")
        .into_iter()
        .filter(|s| {
            selector
                .iter()
                .all(|(k, v)| s["metadata"]["labels"][k] == *v)
        })
        .collect();
    assert_eq!(selected.len(), 1, "the ServiceMonitor selects one Service");
    let service = selected[0];
    // Every replica, not only the leader: no leader label in its selector.
    assert_eq!(service["spec"]["selector"].get("tagpilot.dev/leader"), None);
    let endpoint = &monitor["spec"]["endpoints"][0];
    assert_eq!(endpoint["path"], "/metrics");
    assert!(
        service["spec"]["ports"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["name"] == endpoint["port"]),
        "the endpoint names a port of the Service"
    );
}

/// Runs the built binary with the rendered args: clap must accept every flag and value, so
/// the process gets as far as reading its configuration (absent here) and exits 1, never 2
/// (a usage error).
#[test]
fn container_args_are_flags_tagpilot_run_accepts() {
    let help = run(Command::new(env!("CARGO_BIN_EXE_tagpilot")).args(["run", "--help"]));
    let help = text(&help);
    for (name, yaml) in renders() {
        let objects = objects(&yaml);
        let args = args(&objects);
        assert_eq!(args[0], "run", "{name}");
        for arg in &args[1..] {
            let flag = arg.split('=').next().unwrap();
            assert!(
                help.contains(&format!("{flag} ")) || help.contains(&format!("{flag}\n")),
                "{name}: {flag} is not in `tagpilot run --help`"
            );
        }
        let dir = tempfile::tempdir().unwrap();
        let out = run(Command::new(env!("CARGO_BIN_EXE_tagpilot"))
            .args(&args)
            .current_dir(dir.path())
            .env_clear()
            .env("HOME", dir.path()));
        let said = text(&out);
        assert_eq!(out.status.code(), Some(1), "{name}: {args:?}\n{said}");
        assert!(
            said.contains("/etc/tagpilot/config/tagpilot.yaml"),
            "{name}: did not get as far as reading the config:\n{said}"
        );
    }
}

#[test]
fn pods_meet_pod_security_restricted_with_a_read_only_root_and_a_state_volume() {
    for (name, yaml) in renders() {
        let objects = objects(&yaml);
        let pod = &deployment(&objects)["spec"]["template"]["spec"];
        assert_eq!(pod["securityContext"]["runAsNonRoot"], true, "{name}");
        assert_eq!(
            pod["securityContext"]["seccompProfile"]["type"], "RuntimeDefault",
            "{name}"
        );
        assert!(pod.get("hostNetwork").is_none() && pod.get("hostPID").is_none());
        let c = container(&objects);
        let sc = &c["securityContext"];
        assert_eq!(sc["allowPrivilegeEscalation"], false, "{name}");
        assert_eq!(sc["readOnlyRootFilesystem"], true, "{name}");
        assert_eq!(sc["capabilities"]["drop"], json!(["ALL"]), "{name}");
        assert!(sc["capabilities"].get("add").is_none(), "{name}");
        // `restricted` allows only these volume types.
        for volume in pod["volumes"].as_array().unwrap() {
            let kinds: Vec<&String> = volume
                .as_object()
                .unwrap()
                .keys()
                .filter(|k| *k != "name")
                .collect();
            assert!(
                kinds.iter().all(|k| [
                    "configMap",
                    "secret",
                    "emptyDir",
                    "persistentVolumeClaim",
                    "projected"
                ]
                .contains(&k.as_str())),
                "{name}: {volume}"
            );
        }
        // Where the args point, something writable is mounted.
        let mounts: Vec<&str> = c["volumeMounts"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m["readOnly"] != true)
            .map(|m| m["mountPath"].as_str().unwrap())
            .collect();
        for dir in ["/var/lib/tagpilot", "/var/cache/tagpilot", "/tmp"] {
            assert!(
                mounts.contains(&dir),
                "{name}: {dir} not writable: {mounts:?}"
            );
        }
        let args = args(&objects);
        assert!(args.contains(&"--state-dir=/var/lib/tagpilot".to_string()));
        assert!(args.contains(&"--cache-dir=/var/cache/tagpilot".to_string()));
        let probes = (
            &c["livenessProbe"]["httpGet"]["path"],
            &c["readinessProbe"]["httpGet"]["path"],
        );
        assert_eq!(probes, (&json!("/livez"), &json!("/readyz")), "{name}");
    }
}

#[test]
fn chart_defaults_and_the_kustomize_base_render_the_same_deployment_and_rbac() {
    let chart = objects(&render(&[]));
    let base = objects(&kustomize());
    assert_eq!(args(&chart), args(&base), "container args");
    let c = container(&chart);
    let b = container(&base);
    for field in [
        "ports",
        "livenessProbe",
        "readinessProbe",
        "startupProbe",
        "securityContext",
        "resources",
    ] {
        assert_eq!(c[field], b[field], "container {field}");
    }
    let env_names = |c: &Value| -> Vec<String> {
        c["env"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["name"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(env_names(c), env_names(b), "container env");
    assert_eq!(c["volumeMounts"], b["volumeMounts"]);
    let pod = |o: &[Value]| deployment(o)["spec"]["template"]["spec"].clone();
    assert_eq!(
        pod(&chart)["securityContext"],
        pod(&base)["securityContext"]
    );
    assert_eq!(
        deployment(&chart)["spec"]["replicas"],
        deployment(&base)["spec"]["replicas"]
    );
    assert_eq!(
        deployment(&chart)["spec"]["strategy"],
        deployment(&base)["spec"]["strategy"]
    );
    assert_eq!(rbac(&chart), rbac(&base), "RBAC rules");
    assert!(!rbac(&chart).is_empty(), "leader election needs rules");
    let services = |o: &[Value]| -> Vec<(Value, Value, Value)> {
        of_kind(o, "Service")
            .into_iter()
            .map(|s| {
                (
                    s["metadata"]["name"].clone(),
                    s["spec"]["selector"].clone(),
                    s["spec"]["ports"].clone(),
                )
            })
            .collect()
    };
    assert_eq!(services(&chart), services(&base), "Services");
    let policy = |o: &[Value]| of_kind(o, "NetworkPolicy")[0]["spec"].clone();
    assert_eq!(policy(&chart), policy(&base), "NetworkPolicy");
}

#[test]
fn rbac_grows_only_with_the_features_that_need_it() {
    // Defaults: leader election only. The Lease by name (create cannot be narrowed), and the
    // label on the leader's own Pod; nothing about Applications or Secrets.
    let defaults = rbac(&objects(&render(&[])));
    assert_eq!(
        defaults
            .iter()
            .map(|(kind, ns, rule)| (kind.as_str(), ns.as_str(), rule.clone()))
            .collect::<Vec<_>>(),
        vec![
            (
                "Role",
                "tagpilot",
                json!({"apiGroups": [""], "resources": ["pods"], "verbs": ["patch"]})
            ),
            (
                "Role",
                "tagpilot",
                json!({"apiGroups": ["coordination.k8s.io"], "resourceNames": ["tagpilot"],
                       "resources": ["leases"], "verbs": ["get", "patch"]})
            ),
            (
                "Role",
                "tagpilot",
                json!({"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                       "verbs": ["create"]})
            ),
        ]
    );

    // No leader election, no cluster Applications: no rule at all.
    let single = objects(&render(&["leaderElection.enabled=false", "replicas=1"]));
    assert_eq!(rbac(&single), vec![], "a single replica needs no RBAC");
    assert!(of_kind(&single, "RoleBinding").is_empty());
    assert_eq!(
        deployment(&single)["spec"]["strategy"]["type"],
        "Recreate",
        "one writer: never two Pods side by side"
    );

    // Applications from the cluster, written back through git: list, never patch; no Secret.
    let git = rbac(&objects(&render(&[
        "applications.fromCluster.enabled=true",
    ])));
    let apps = rules_for(&git, "applications");
    assert_eq!(apps.len(), 1);
    assert_eq!(apps[0].0, "ClusterRole", "all namespaces");
    assert_eq!(apps[0].2["verbs"], json!(["list"]));
    assert!(rules_for(&git, "secrets").is_empty());
    // Where Applications are read, their ImageUpdater resources too, and their status written.
    let group = json!(["argocd-image-updater.argoproj.io"]);
    for (resource, verbs) in [
        ("imageupdaters", json!(["get", "list", "watch"])),
        ("imageupdaters/status", json!(["patch"])),
    ] {
        let rules = rules_for(&git, resource);
        assert_eq!(rules.len(), 1, "{resource}");
        assert_eq!(rules[0].0, "ClusterRole", "{resource}");
        assert_eq!(rules[0].2["apiGroups"], group, "{resource}");
        assert_eq!(rules[0].2["verbs"], verbs, "{resource}");
    }
    // No Secret for git credentials: no SSH host keys either.
    assert!(rules_for(&git, "configmaps").is_empty());
    // Without Applications from the cluster, nothing about ImageUpdaters.
    for resource in ["imageupdaters", "imageupdaters/status", "configmaps"] {
        assert!(rules_for(&defaults, resource).is_empty(), "{resource}");
    }

    // The argocd method in two namespaces: list and patch there, and nowhere else.
    let argocd = rbac(&objects(&render(&[
        "applications.fromCluster.enabled=true",
        "applications.fromCluster.writeBackMethod=argocd",
        "applications.fromCluster.namespaces={team-a,team-b}",
    ])));
    let apps = rules_for(&argocd, "applications");
    assert_eq!(
        apps.iter()
            .map(|(k, ns, r)| (k.as_str(), ns.as_str(), r["verbs"].clone()))
            .collect::<Vec<_>>(),
        vec![
            ("Role", "team-a", json!(["list", "patch"])),
            ("Role", "team-b", json!(["list", "patch"])),
        ]
    );
    for resource in ["imageupdaters", "imageupdaters/status"] {
        assert_eq!(
            rules_for(&argocd, resource)
                .iter()
                .map(|(k, ns, _)| (k.as_str(), ns.as_str()))
                .collect::<Vec<_>>(),
            vec![("Role", "team-a"), ("Role", "team-b")],
            "{resource}"
        );
    }

    // Secrets: `get` on exactly the ones named, `list` only for git:repocreds.
    let features = rbac(&objects(&render(FEATURES)));
    let secrets = rules_for(&features, "secrets");
    assert_eq!(
        secrets
            .iter()
            .map(|(k, ns, r)| (k.as_str(), ns.as_str(), r.clone()))
            .collect::<Vec<_>>(),
        vec![
            (
                "Role",
                "argocd",
                json!({"apiGroups": [""], "resourceNames": ["registry-creds"],
                       "resources": ["secrets"], "verbs": ["get"]})
            ),
            (
                "Role",
                "argocd",
                json!({"apiGroups": [""], "resources": ["secrets"], "verbs": ["list"]})
            ),
        ]
    );
    // Secrets can give git credentials over SSH: Argo CD's host keys, by name, in its namespace.
    let host_keys = json!({"apiGroups": [""], "resourceNames": ["argocd-ssh-known-hosts-cm"],
                           "resources": ["configmaps"], "verbs": ["get"]});
    assert_eq!(
        rules_for(&features, "configmaps")
            .iter()
            .map(|(k, ns, r)| (k.as_str(), ns.as_str(), r.clone()))
            .collect::<Vec<_>>(),
        vec![("Role", "argocd", host_keys.clone())]
    );
    let no_list = rbac(&objects(&render(&[
        "applications.fromCluster.enabled=true",
        "applications.fromCluster.secrets[0].namespace=team-a",
        "applications.fromCluster.secrets[0].name=pull",
    ])));
    assert!(
        rules_for(&no_list, "secrets")
            .iter()
            .all(|(_, _, r)| r["verbs"] == json!(["get"]) && r["resourceNames"] == json!(["pull"])),
        "{no_list:?}"
    );
    assert_eq!(
        rules_for(&no_list, "configmaps")
            .iter()
            .map(|(_, ns, r)| (ns.as_str(), r.clone()))
            .collect::<Vec<_>>(),
        vec![("argocd", host_keys)]
    );
}

#[test]
fn image_updater_metrics_are_switched_on_by_a_value() {
    let flag = "--image-updater-metrics".to_string();
    assert!(!args(&objects(&render(&[]))).contains(&flag));
    assert!(!args(&objects(&kustomize())).contains(&flag));
    assert!(args(&objects(&render(&["imageUpdaterMetrics=true"]))).contains(&flag));
}

#[test]
fn webhooks_reach_the_leader_only_with_leader_election() {
    let selector = |o: &[Value]| {
        of_kind(o, "Service")
            .into_iter()
            .find(|s| s["metadata"]["name"] == "tagpilot")
            .expect("the webhook Service")["spec"]["selector"]
            .clone()
    };
    let elected = objects(&render(&[]));
    assert_eq!(selector(&elected)["tagpilot.dev/leader"], "true");
    let single = objects(&render(&["leaderElection.enabled=false", "replicas=1"]));
    assert_eq!(selector(&single).get("tagpilot.dev/leader"), None);
    assert!(!args(&single).contains(&"--leader-elect".to_string()));
}

#[test]
fn the_config_map_holds_the_config_the_chart_wires_up() {
    let objects = objects(&render(&[
        "secrets.webhook.name=hook",
        "applications.fromCluster.enabled=true",
        "applications.fromCluster.selector=team=payments",
        "config.repositories[0].name=manifests",
        "config.repositories[0].url=https://git.example/m.git",
        "policies.api\\.yaml.kind=ImagePolicy",
    ]));
    let maps = of_kind(&objects, "ConfigMap");
    let config = maps
        .iter()
        .find(|m| m["metadata"]["name"] == "tagpilot-config")
        .unwrap();
    let config: Value =
        serde_saphyr::from_str(config["data"]["tagpilot.yaml"].as_str().unwrap()).unwrap();
    assert_eq!(
        config,
        json!({
            "applications": {"fromCluster": {"argocdNamespace": "argocd", "selector": "team=payments"}},
            "policies": "/etc/tagpilot/policies",
            "repositories": [{"name": "manifests", "url": "https://git.example/m.git"}],
            "webhooks": {"secretEnv": "TAGPILOT_WEBHOOK_SECRET"},
        })
    );
    let policies = maps
        .iter()
        .find(|m| m["metadata"]["name"] == "tagpilot-policies")
        .unwrap();
    assert!(
        policies["data"]["api.yaml"]
            .as_str()
            .unwrap()
            .contains("kind: ImagePolicy")
    );
    let env = &container(&objects)["env"];
    assert!(
        env.as_array()
            .unwrap()
            .iter()
            .any(|e| e["name"] == "TAGPILOT_WEBHOOK_SECRET"
                && e["valueFrom"]["secretKeyRef"]["name"] == "hook"),
        "{env}"
    );
}

#[test]
fn a_typo_or_a_second_writer_in_values_fails_the_install() {
    for (sets, names) in [
        (&["replica=3"][..], "replica"),
        (&["leaderElection.enable=true"][..], "enable"),
        (
            &["applications.fromCluster.writeBackMethod=patch"][..],
            "writeBackMethod",
        ),
        (&["interval=two minutes"][..], "interval"),
        (
            &["leaderElection.enabled=false", "replicas=2"][..],
            "replicas",
        ),
        (&["config.policies=elsewhere"][..], "config"),
    ] {
        let err = helm_template(sets).expect_err(&format!("{sets:?} was accepted"));
        assert!(err.contains(names), "{sets:?}: {err}");
    }
}

// === the ImageUpdater CRD ===

/// `kubectl kustomize deploy/kustomize/crds`.
fn kustomize_crds() -> String {
    let out = run(Command::new(tools().join("bin/kubectl"))
        .arg("kustomize")
        .arg(root().join("deploy/kustomize/crds")));
    assert!(
        out.status.success(),
        "kubectl kustomize crds:\n{}",
        text(&out)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn crds(objects: &[Value]) -> Vec<&Value> {
    of_kind(objects, "CustomResourceDefinition")
}

/// The one CRD of the kustomize crds directory.
fn crd() -> Value {
    let objects = objects(&kustomize_crds());
    assert_eq!(objects.len(), 1, "one object: the CRD");
    objects[0].clone()
}

/// The `v1alpha1` schema's `spec`.
fn spec_schema(crd: &Value) -> Value {
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"].clone()
}

/// An `ImageUpdater` that sets every field of the CRD's spec (the test below checks that it
/// does), in the shapes Image Updater documents.
const EVERY_FIELD: &str = r#"
apiVersion: argocd-image-updater.argoproj.io/v1alpha1
kind: ImageUpdater
metadata:
  name: every-field
  namespace: argocd
spec:
  namespace: argocd
  commonUpdateSettings: &settings
    updateStrategy: semver
    forceUpdate: false
    allowTags: regexp:^v[0-9.]+$
    ignoreTags: ["*-rc*"]
    pullSecret: pullsecret:argocd/registry
    platforms: [linux/amd64]
  writeBackConfig:
    method: git:repocreds
    gitConfig:
      repository: git@git.example:shop/deploy.git
      branch: main:image-updater-{{.SHA256}}
      writeBackTarget: kustomization:../base
      pullRequest:
        github: {}
        labels: [images]
  imagesVerification: &verification
    enabled: true
    cosignKey: {secretName: cosign, key: cosign.pub}
  applicationRefs:
    - namePattern: shop-*
      labelSelectors:
        matchLabels: {team: shop}
        matchExpressions:
          - {key: tier, operator: In, values: [web]}
      useAnnotations: false
      commonUpdateSettings: *settings
      writeBackConfig:
        method: git
        gitConfig:
          repository: https://git.example/shop/deploy.git
          branch: release
          writeBackTarget: helmvalues:values.yaml
          pullRequest:
            gitlab: {}
            labels: [images]
      imagesVerification: *verification
      images:
        - alias: api
          imageName: ghcr.io/shop/api:1.x
          commonUpdateSettings: *settings
          imagesVerification: *verification
          manifestTargets:
            helm: {name: image.repository, tag: image.tag, spec: image.full}
        - alias: web
          imageName: ghcr.io/shop/web
          manifestTargets:
            kustomize: {name: ghcr.io/shop/web}
        - alias: cron.v2
          imageName: ghcr.io/shop/cron
          manifestTargets:
            plugin: {name: CRON_IMAGE, tag: CRON_TAG, spec: CRON_SPEC}
    - namePattern: legacy
      useAnnotations: true
"#;

/// Every property path under a schema (`applicationRefs[].images[].alias`), and under each
/// the property names (`None` where the schema has no `properties`: a leaf or a map).
fn schema_fields(schema: &Value, path: &str, out: &mut Vec<(String, Option<Vec<String>>)>) {
    match schema["type"].as_str() {
        Some("array") => schema_fields(&schema["items"], &format!("{path}[]"), out),
        Some("object") => {
            let props = schema["properties"].as_object();
            out.push((
                path.to_string(),
                props.map(|p| {
                    let mut names: Vec<String> = p.keys().cloned().collect();
                    names.sort();
                    names
                }),
            ));
            for (name, sub) in props.into_iter().flatten() {
                schema_fields(sub, &format!("{path}.{name}"), out);
            }
        }
        _ => out.push((path.to_string(), None)),
    }
}

/// The same paths in a document (arrays' items merged).
fn document_fields(doc: &Value, path: &str, out: &mut std::collections::BTreeSet<String>) {
    out.insert(path.to_string());
    match doc {
        Value::Array(items) => {
            for item in items {
                document_fields(item, &format!("{path}[]"), out);
            }
        }
        Value::Object(map) => {
            for (name, sub) in map {
                document_fields(sub, &format!("{path}.{name}"), out);
            }
        }
        _ => {}
    }
}

/// The field names tagpilot's reader accepts in the object at `pointer` of `doc` (a JSON
/// pointer): an unknown field put there is refused with the list of those it expected.
fn fields_tagpilot_reads(doc: &Value, pointer: &str) -> Vec<String> {
    let mut probed = doc.clone();
    probed
        .pointer_mut(pointer)
        .and_then(Value::as_object_mut)
        .unwrap_or_else(|| panic!("{pointer} is not an object in the sample"))
        .insert("zzProbe".into(), json!(1));
    // JSON is YAML.
    let text = serde_json::to_string_pretty(&probed).unwrap();
    let err = tagpilot::argocd::read::image_updater::read_documents(Path::new("probe.yaml"), &text)
        .expect_err(&format!("an unknown field at {pointer} was accepted"))
        .to_string();
    assert!(err.contains("zzProbe"), "{pointer}: {err}");
    let mut names: Vec<String> = if err.contains("there are no fields") {
        Vec::new()
    } else {
        // `unknown field `zzProbe`, expected one of a, b` (or `expected a`).
        let expected = err
            .lines()
            .find_map(|l| l.split_once("expected ").map(|(_, rest)| rest))
            .unwrap_or_else(|| panic!("{pointer}: no expected fields in {err}"));
        expected
            .trim_start_matches("one of ")
            .split(", ")
            .map(|f| f.trim().trim_matches('`').to_string())
            .collect()
    };
    names.sort();
    names
}

/// Validates `docs` against the CRD's schema with jsonschema (from kubernetes-validate's
/// virtualenv). Unknown fields are refused, as `kubectl apply` (strict field validation) does:
/// `additionalProperties: false` is added wherever the schema lists `properties`. Returns each
/// document's errors.
fn validate_against_crd(crd: &Value, docs: &[Value]) -> Vec<Vec<String>> {
    fn strict(schema: &mut Value) {
        if let Some(map) = schema.as_object_mut() {
            if map.contains_key("properties") && !map.contains_key("additionalProperties") {
                map.insert("additionalProperties".into(), json!(false));
            }
            for (key, sub) in map.iter_mut() {
                if key != "anyOf" && key != "oneOf" {
                    strict(sub);
                }
            }
        } else if let Some(items) = schema.as_array_mut() {
            items.iter_mut().for_each(strict);
        }
    }
    let mut schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"].clone();
    strict(&mut schema);
    // metadata is the API server's; any is fine here.
    schema["properties"]["metadata"] = json!({"type": "object"});
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("input.json");
    std::fs::write(&input, json!({"schema": schema, "docs": docs}).to_string()).unwrap();
    let script = r#"
import json, sys, jsonschema
data = json.load(open(sys.argv[1]))
validator = jsonschema.Draft4Validator(data["schema"])
print(json.dumps([[f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(d)] for d in data["docs"]]))
"#;
    let out = run(Command::new(tools().join("venv/bin/python"))
        .args(["-c", script])
        .arg(&input));
    assert!(out.status.success(), "jsonschema:\n{}", text(&out));
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn the_image_updater_crd_is_installed_only_when_asked_and_is_the_kustomize_one() {
    assert!(crds(&objects(&render(&[]))).is_empty(), "off by default");
    let installed = objects(&render(&["crds.install=true"]));
    let from_chart = crds(&installed);
    assert_eq!(from_chart.len(), 1);
    let from_chart = from_chart[0];
    // Uninstalling the release must not delete every ImageUpdater with the CRD.
    assert_eq!(
        from_chart["metadata"]["annotations"]["helm.sh/resource-policy"],
        "keep"
    );
    let dropped = objects(&render(&["crds.install=true", "crds.keep=false"]));
    assert_eq!(crds(&dropped)[0]["metadata"].get("annotations"), None);

    let base = crd();
    assert!(
        from_chart["spec"] == base["spec"],
        "the chart's CRD differs from the kustomize one: deploy/helm/tagpilot/files/ and \
         deploy/kustomize/crds/ must hold the same imageupdaters.yaml"
    );
    assert_eq!(from_chart["metadata"]["name"], base["metadata"]["name"]);

    // Image Updater's identity, so that existing resources keep working.
    let spec = &base["spec"];
    assert_eq!(
        base["metadata"]["name"],
        "imageupdaters.argocd-image-updater.argoproj.io"
    );
    assert_eq!(spec["group"], "argocd-image-updater.argoproj.io");
    assert_eq!(spec["scope"], "Namespaced");
    assert_eq!(spec["names"]["kind"], "ImageUpdater");
    assert_eq!(spec["names"]["plural"], "imageupdaters");
    let versions = spec["versions"].as_array().unwrap();
    assert_eq!(versions.len(), 1);
    assert_eq!(versions[0]["name"], "v1alpha1");
    assert_eq!(versions[0]["served"], true);
    assert_eq!(versions[0]["storage"], true);
    assert_eq!(versions[0]["subresources"]["status"], json!({}));
    let status = &versions[0]["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"];
    let mut fields: Vec<&String> = status.as_object().unwrap().keys().collect();
    fields.sort();
    assert_eq!(
        fields,
        [
            "applicationsMatched",
            "conditions",
            "imagesManaged",
            "lastCheckedAt",
            "lastUpdatedAt",
            "observedGeneration",
            "recentUpdates"
        ]
    );

    // The kustomize directory is valid on its own (the chart's render is checked with the rest).
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("crds.yaml");
    std::fs::write(&file, kustomize_crds()).unwrap();
    let out = run(Command::new(tools().join("venv/bin/kubernetes-validate"))
        .args(["--kubernetes-version", "1.31.0", "--strict", "--quiet"])
        .arg(&file));
    assert!(out.status.success(), "{}", text(&out));
    assert!(!text(&out).contains("WARN"), "{}", text(&out));
}

/// What the API server requires of a CRD schema (a "structural" one), checked node by node:
/// every node has a type; `anyOf`/`oneOf` only constrain (no type, description or default) and
/// name only properties declared beside them; `properties` and `additionalProperties` exclude
/// each other; a list of type map has keys its items require.
#[test]
fn the_image_updater_crd_schema_is_structural() {
    fn check(schema: &Value, path: &str, problems: &mut Vec<String>) {
        let Some(map) = schema.as_object() else {
            problems.push(format!("{path}: not an object"));
            return;
        };
        if !map.contains_key("type") {
            problems.push(format!("{path}: no type"));
        }
        if map.contains_key("properties") && map.contains_key("additionalProperties") {
            problems.push(format!("{path}: properties and additionalProperties"));
        }
        for junctor in ["anyOf", "oneOf", "allOf", "not"] {
            for (i, branch) in map
                .get(junctor)
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .enumerate()
            {
                for forbidden in ["type", "description", "default", "additionalProperties"] {
                    if branch.get(forbidden).is_some() {
                        problems.push(format!("{path}.{junctor}[{i}]: {forbidden}"));
                    }
                }
                for name in branch["properties"]
                    .as_object()
                    .into_iter()
                    .flat_map(|p| p.keys())
                {
                    if schema["properties"].get(name).is_none() {
                        problems.push(format!("{path}.{junctor}[{i}]: {name} not declared"));
                    }
                }
                for name in branch["required"].as_array().into_iter().flatten() {
                    let name = name.as_str().unwrap();
                    if schema["properties"].get(name).is_none() {
                        problems.push(format!("{path}.{junctor}[{i}]: {name} not declared"));
                    }
                }
            }
        }
        if map.get("x-kubernetes-list-type") == Some(&json!("map")) {
            let required = &schema["items"]["required"];
            for key in map["x-kubernetes-list-map-keys"].as_array().unwrap() {
                if !required.as_array().unwrap().contains(key) {
                    problems.push(format!("{path}: list key {key} is not required"));
                }
            }
        }
        for (name, sub) in map
            .get("properties")
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
        {
            check(sub, &format!("{path}.{name}"), problems);
        }
        if let Some(items) = map.get("items") {
            check(items, &format!("{path}[]"), problems);
        }
        if let Some(values) = map.get("additionalProperties").filter(|v| v.is_object()) {
            check(values, &format!("{path}{{}}"), problems);
        }
    }
    let crd = crd();
    let mut problems = Vec::new();
    check(
        &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"],
        "",
        &mut problems,
    );
    assert_eq!(problems, Vec::<String>::new());
}

/// The CRD and tagpilot's reader (src/argocd/read/image_updater/mod.rs) know the same fields: a sample
/// that sets every field of the CRD's spec is valid for the CRD and read by tagpilot, and at
/// every object of it, the fields tagpilot accepts are the CRD's.
#[test]
fn the_image_updater_crd_and_tagpilot_read_the_same_fields() {
    let crd = crd();
    let sample: Value = serde_saphyr::from_str(EVERY_FIELD).unwrap();

    let mut in_crd = Vec::new();
    schema_fields(&spec_schema(&crd), "spec", &mut in_crd);
    let mut in_sample = std::collections::BTreeSet::new();
    document_fields(&sample["spec"], "spec", &mut in_sample);
    let missing: Vec<&String> = in_crd
        .iter()
        .map(|(path, _)| path)
        .filter(|p| !in_sample.contains(*p))
        // A pull request names one forge: the sample has GitHub at one level, GitLab at another.
        .filter(|p| {
            let other = if p.ends_with(".github") {
                p.replace(".github", ".gitlab")
            } else {
                p.replace(".gitlab", ".github")
            };
            !(p.ends_with("pullRequest.github") || p.ends_with("pullRequest.gitlab"))
                || !in_sample.contains(&other)
        })
        .collect();
    assert_eq!(
        missing,
        Vec::<&String>::new(),
        "the sample misses CRD fields"
    );

    let read =
        tagpilot::argocd::read::image_updater::read_documents(Path::new("s.yaml"), EVERY_FIELD)
            .unwrap_or_else(|e| panic!("tagpilot does not read the sample: {e}"));
    assert_eq!(read.len(), 1);

    // At each object with declared properties, tagpilot expects exactly those.
    for (path, names) in &in_crd {
        let Some(names) = names else { continue };
        // The sample's JSON pointer to the first object at `path`.
        let mut pointer = String::new();
        for part in path.split('.') {
            let (name, arrays) = part.split_at(part.find('[').unwrap_or(part.len()));
            pointer.push('/');
            pointer.push_str(name);
            for _ in 0..arrays.len() / 2 {
                pointer.push_str("/0");
            }
        }
        // Another entry where the first lacks the object (the plugin target, say); a forge
        // the other level has.
        let Some(pointer) = [0, 1, 2]
            .iter()
            .map(|i| pointer.replacen("/images/0", &format!("/images/{i}"), 1))
            .find(|p| sample.pointer(p).is_some_and(Value::is_object))
        else {
            assert!(
                path.contains("pullRequest.git"),
                "no object at {path} in the sample"
            );
            continue;
        };
        assert_eq!(
            &fields_tagpilot_reads(&sample, &pointer),
            names,
            "{path}: tagpilot's fields (left) and the CRD's (right) differ"
        );
    }
}

#[test]
fn the_image_updater_crd_accepts_image_updaters_resources_and_refuses_what_it_does() {
    let crd = crd();
    let sample: Value = serde_saphyr::from_str(EVERY_FIELD).unwrap();
    let golden: Vec<Value> = objects(
        &std::fs::read_to_string(
            root().join("tests/golden/argocd/image-updater/in/argocd/image-updaters.yaml"),
        )
        .unwrap(),
    );
    let mut docs = vec![sample.clone()];
    docs.extend(golden.iter().cloned());
    for (i, errors) in validate_against_crd(&crd, &docs).iter().enumerate() {
        assert_eq!(errors, &Vec::<String>::new(), "document {i}");
    }

    let with = |pointer: &str, value: Value| {
        let mut doc = sample.clone();
        *doc.pointer_mut(pointer).unwrap() = value;
        doc
    };
    let mut misspelt = sample.clone();
    misspelt["spec"]["commonUpdateSettings"]["updateStrategey"] = json!("semver");
    let refused = [
        ("a misspelt field", misspelt),
        (
            "an alias starting with a dot",
            with("/spec/applicationRefs/0/images/0/alias", json!(".api")),
        ),
        (
            "two manifest targets",
            with(
                "/spec/applicationRefs/0/images/1/manifestTargets",
                json!({"helm": {}, "kustomize": {"name": "web"}}),
            ),
        ),
        (
            "neither images nor useAnnotations",
            with("/spec/applicationRefs/1", json!({"namePattern": "legacy"})),
        ),
        (
            "a write-back method Image Updater does not have",
            with("/spec/writeBackConfig/method", json!("patch")),
        ),
        (
            "a pull request with no forge",
            with(
                "/spec/writeBackConfig/gitConfig/pullRequest",
                json!({"labels": ["x"]}),
            ),
        ),
        (
            "verification with no key",
            with("/spec/imagesVerification", json!({"enabled": true})),
        ),
        (
            "no applicationRefs",
            with("/spec/applicationRefs", json!([])),
        ),
    ];
    let docs: Vec<Value> = refused.iter().map(|(_, d)| d.clone()).collect();
    for ((what, _), errors) in refused.iter().zip(validate_against_crd(&crd, &docs)) {
        assert!(!errors.is_empty(), "{what} was accepted");
    }
}
