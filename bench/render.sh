#!/usr/bin/env bash
# Rendering time per Argo CD Application for the rendered diff (`plan --diff --rendered`,
# `write.renderedDiff`). Run by hand (not in CI); see bench/README.md for the numbers so far.
#
# Usage: bench/render.sh [APPLICATIONS]     (default 10 of each kind)
#
# Builds a repository holding APPLICATIONS Argo CD Applications of each kind — a plain
# directory, a kustomize overlay with the Application's kustomize options over a base, a local
# Helm chart with value files and parameters — each deploying an image at 1.0.0 that one policy
# follows, on a lab registry holding 1.0.0 and 1.1.0. Then runs `tagpilot plan --diff
# --rendered` (each Application rendered before and after the change) and prints, per kind, the
# median and the slowest time of one Application's two renders, from the `rendered` debug log
# lines, and the whole command's time beside `tagpilot plan --diff` without rendering.
#
# Environment:
#   TAGPILOT_BENCH_DIR  work directory (default ${TMPDIR:-/tmp}/tagpilot-render)
#   TAGPILOT            the tagpilot binary (default: target/release/tagpilot, built if missing)
#   PATH                must hold helm, and kustomize or kubectl
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BENCH_DIR="${TAGPILOT_BENCH_DIR:-${TMPDIR:-/tmp}/tagpilot-render}"
N="${1:-10}"
# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"
whole_numbers_or_usage 18 "$N"
command -v helm >/dev/null || { say "helm is not on PATH"; exit 1; }
command -v kustomize >/dev/null || command -v kubectl >/dev/null ||
    { say "neither kustomize nor kubectl is on PATH"; exit 1; }

# shellcheck source=scripts/lib/apt.sh
source "$ROOT/scripts/lib/apt.sh"
ensure_packages docker-registry python3 git

TAGPILOT="$(tagpilot_binary)"

rm -rf "$BENCH_DIR"
mkdir -p "$BENCH_DIR"
export TAGPILOT_LAB_DIR="$BENCH_DIR/lab"
cleanup() { "$ROOT/scripts/lab-registry.sh" stop 2>/dev/null || true; }
trap cleanup EXIT
REGISTRY="$("$ROOT/scripts/lab-registry.sh" start 0 | tail -n 1)"
python3 "$ROOT/scripts/push-images.py" --registry "$REGISTRY" --quiet \
    bench/render:1.0.0 bench/render:1.1.0 >/dev/null

BARE="$BENCH_DIR/manifests.git"
TREE="$BENCH_DIR/tree"
git init -q --bare -b main "$BARE"
python3 - "$TREE" "$N" "$REGISTRY" "file://$BARE" <<'EOF'
import os, sys
tree, n, registry, url = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
image = f"{registry}/bench/render"
def write(path, text):
    path = os.path.join(tree, path)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)
def deployment(name, ref):
    return (f"apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: {name}\nspec:\n"
            f"  selector:\n    matchLabels: {{app: {name}}}\n  template:\n"
            f"    metadata:\n      labels: {{app: {name}}}\n    spec:\n      containers:\n"
            f"        - name: app\n          image: {ref}\n")
def app(name, path, extra=""):
    return (f"apiVersion: argoproj.io/v1alpha1\nkind: Application\nmetadata:\n  name: {name}\n"
            f"  namespace: argocd\nspec:\n  destination: {{server: https://kubernetes.default.svc, "
            f"namespace: {name}}}\n  source:\n    repoURL: {url}\n    path: {path}\n{extra}")
for i in range(n):
    d = f"directory-{i:03}"
    write(f"apps/{d}/deployment.yaml", deployment(d, f"{image}:1.0.0"))
    write(f"apps/{d}/service.yaml", f"apiVersion: v1\nkind: Service\nmetadata:\n  name: {d}\nspec:\n  ports: [{{port: 80}}]\n")
    write(f"argocd/{d}.yaml", app(d, f"apps/{d}", "    directory: {recurse: true}\n"))
    k = f"kustomize-{i:03}"
    write(f"apps/{k}/base/deployment.yaml", deployment(k, image))
    write(f"apps/{k}/base/kustomization.yaml", "resources: [deployment.yaml]\n")
    write(f"apps/{k}/overlay/kustomization.yaml",
          f"resources: [../base]\nimages:\n  - name: {image}\n    newTag: 1.0.0\n")
    write(f"argocd/{k}.yaml", app(k, f"apps/{k}/overlay",
          "    kustomize: {namePrefix: prod-, commonLabels: {env: prod}}\n"))
    h = f"helm-{i:03}"
    write(f"charts/{h}/Chart.yaml", f"apiVersion: v2\nname: {h}\nversion: 0.1.0\n")
    write(f"charts/{h}/values.yaml", f"image:\n  repository: {image}\n  tag: 1.0.0\nreplicas: 1\n")
    write(f"charts/{h}/templates/deployment.yaml",
          "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: {{ .Release.Name }}\n"
          "spec:\n  replicas: {{ .Values.replicas }}\n  template:\n    spec:\n      containers:\n"
          "        - name: app\n          image: \"{{ .Values.image.repository }}:{{ .Values.image.tag }}\"\n")
    write(f"argocd/{h}.yaml", app(h, f"charts/{h}",
          "    helm: {releaseName: bench, parameters: [{name: replicas, value: '2'}]}\n"))
EOF
(
    cd "$TREE"
    git init -q -b main
    git add .
    git -c user.name=bench -c user.email=bench@example.invalid commit -q -m "applications"
    git push -q "$BARE" main
)
RUN="$BENCH_DIR/run"
mkdir -p "$RUN/policies"
cat >"$RUN/tagpilot.yaml" <<EOF
registries:
  - host: $REGISTRY
    insecure: true
policies: policies/
repositories:
  - name: manifests
    url: file://$BARE
    branch: main
applications:
  fromGit:
    - repository: manifests
      paths: ["argocd/*.yaml"]
EOF
cat >"$RUN/policies/render.yaml" <<EOF
apiVersion: tagpilot.dev/v1alpha1
kind: ImagePolicy
metadata:
  name: render
spec:
  image: $REGISTRY/bench/render
  strategy:
    semver: {}
  targets:
    - repository: manifests
      paths: ["apps/**", "charts/**"]
EOF

seconds() { python3 -c "import time; print(time.monotonic())"; }
cd "$RUN"
say "plan --diff (no rendering), $((3 * N)) Applications"
start=$(seconds)
"$TAGPILOT" plan --diff --cache-dir "$BENCH_DIR/cache" >"$BENCH_DIR/plain.out"
plain=$(python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.2f}')" "$start" "$(seconds)")
say "plan --diff --rendered"
start=$(seconds)
"$TAGPILOT" --log tagpilot=debug --log-format json plan --diff --rendered \
    --cache-dir "$BENCH_DIR/cache" >"$BENCH_DIR/rendered.out" 2>"$BENCH_DIR/rendered.log"
rendered=$(python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.2f}')" "$start" "$(seconds)")
failed=$(grep -c "could not be rendered" "$BENCH_DIR/rendered.out" || true)
[[ "$failed" == 0 ]] || { echo "PROBLEM: $failed Applications could not be rendered" >&2; exit 1; }

python3 - "$BENCH_DIR/rendered.log" "$N" "$plain" "$rendered" <<'EOF'
import json, statistics, sys
log, n, plain, rendered = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
took = {}
for line in open(log):
    try:
        entry = json.loads(line)
    except ValueError:
        continue
    fields = entry.get("fields", {})
    if fields.get("message") != "rendered":
        continue
    kind = fields["application"].split("/")[-1].rsplit("-", 1)[0]
    took.setdefault(kind, []).append(int(fields["took_ms"]))
for kind in ("directory", "kustomize", "helm"):
    ms = took.get(kind, [])
    if len(ms) != n:
        sys.exit(f"PROBLEM: {len(ms)} of {n} {kind} Applications rendered")
    print(f"{kind:<10} {n} Applications  median {statistics.median(ms):.0f} ms  "
          f"slowest {max(ms)} ms  (before and after)")
print(f"plan --diff {plain} s, plan --diff --rendered {rendered} s")
EOF
