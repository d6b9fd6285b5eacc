//! `deploy/`: the Helm chart and the kustomize base, rendered by the real `helm` and `kubectl`
//! and checked by `kubernetes-validate` (all three installed by `scripts/test.sh` into
//! `$TAGPILOT_TOOLS`; a missing tool fails these tests, it never skips them). Beyond schema
//! validity: the container args are flags `tagpilot run` accepts (the built binary parses
//! them), the Pods meet Pod Security `restricted`, RBAC grows only with the features that need
//! it, a typo in values fails, and the chart's defaults and the kustomize base render the same
//! Deployment args, ports and RBAC rules.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::{Value, json};

/// Where `scripts/test.sh` put helm, kubectl and kubernetes-validate.
fn tools() -> PathBuf {
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
