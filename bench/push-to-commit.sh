#!/usr/bin/env bash
# From `docker push` to a commit: how long a pushed image takes to reach the manifest repository
# when the registry notifies `tagpilot run`. Run by hand (not in CI); see bench/README.md.
#
# Usage: bench/push-to-commit.sh [SCENARIO...]      (default: every scenario below)
#
#   sequential   one image, 20 tags, each pushed once the previous one's commit is on main
#   one-image    one image, 20 tags pushed back to back
#   images       20 distinct images written to one manifest repository, pushed back to back
#   repos        100 pushes over 10 images, each written to its own manifest repository
#   pushers      the same 100 pushes from ten pushers at once, one per image
#
# Starts Debian's docker-registry (CNCF distribution 2.8) on a free loopback port with a
# `notifications.endpoints` entry pointing at `tagpilot run`'s /webhooks/distribution (with the
# bearer secret, ignoring `pull` events as the book's configuration does), and per scenario
# fresh bare git repositories with one Deployment per image and `tagpilot run --interval 1h`
# (so only notifications can bring a new tag in). A push is bench/img-I:1.0.N
# (scripts/push-images.py; the push has ended when the registry answered the manifest PUT); a
# watcher reads each bare repository's main branch every 5 ms. A sample is the time from the end
# of a push to the first commit on main holding that tag or a later one of the same image.
# Prints every scenario's median, 95th percentile and number of commits.
#
# Environment:
#   TAGPILOT_BENCH_DIR  work directory (default ${TMPDIR:-/tmp}/tagpilot-push-to-commit)
#   TAGPILOT            the tagpilot binary (default: target/release/tagpilot, built if missing)
# Goal: p95 at most 1 s and a median of at most 250 ms in every scenario.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BENCH_DIR="${TAGPILOT_BENCH_DIR:-${TMPDIR:-/tmp}/tagpilot-push-to-commit}"
SCENARIOS=("$@")
((${#SCENARIOS[@]})) || SCENARIOS=(sequential one-image images repos pushers)
# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"
for s in "${SCENARIOS[@]}"; do
    case "$s" in sequential | one-image | images | repos | pushers) ;; *) usage_exit 23 ;; esac
done

# shellcheck source=scripts/lib/apt.sh
source "$ROOT/scripts/lib/apt.sh"
ensure_packages docker-registry python3 git curl

TAGPILOT="$(tagpilot_binary)"

rm -rf "$BENCH_DIR"
mkdir -p "$BENCH_DIR"
free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}
REGISTRY_PORT="$(free_port)"
DAEMON_PORT="$(free_port)"
REGISTRY="127.0.0.1:$REGISTRY_PORT"
SECRET="bench-$RANDOM$RANDOM"
PIDS=()
cleanup() {
    local pid
    for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
}
trap cleanup EXIT

# === the registry, notifying tagpilot ===

cat >"$BENCH_DIR/registry.yml" <<EOF
version: 0.1
log:
  level: error
  accesslog:
    disabled: true
storage:
  filesystem:
    rootdirectory: $BENCH_DIR/storage
http:
  addr: $REGISTRY
  secret: tagpilot-bench-not-a-secret
notifications:
  endpoints:
    - name: tagpilot
      url: http://127.0.0.1:$DAEMON_PORT/webhooks/distribution
      headers:
        Authorization: ["Bearer $SECRET"]
      timeout: 2s
      threshold: 5
      backoff: 100ms
      ignore:
        actions: [pull]
EOF
/usr/bin/docker-registry serve "$BENCH_DIR/registry.yml" >"$BENCH_DIR/registry.log" 2>&1 </dev/null &
PIDS+=($!)
for _ in $(seq 100); do
    curl -fsS -o /dev/null "http://$REGISTRY/v2/" 2>/dev/null && break
    sleep 0.1
done

# === the scenarios: manifest repositories, tagpilot, pushes ===

say "registry $REGISTRY notifies tagpilot on 127.0.0.1:$DAEMON_PORT"
python3 - "$ROOT" "$REGISTRY" "$DAEMON_PORT" "$SECRET" "$TAGPILOT" "$BENCH_DIR" "${SCENARIOS[@]}" <<'PY'
import os, re, shutil, statistics, subprocess, sys, threading, time, urllib.request

root, registry, port, secret, tagpilot, bench = sys.argv[1:7]
scenarios = sys.argv[7:]
# name: (images, repositories, tags per image, pushers, wait for each commit)
SHAPES = {
    "sequential": (1, 1, 20, 1, True),
    "one-image": (1, 1, 20, 1, False),
    "images": (20, 1, 1, 1, False),
    "repos": (10, 10, 10, 1, False),
    "pushers": (10, 10, 10, 10, False),
}
env = dict(os.environ, HOME=bench, GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL="/dev/null",
           BENCH_WEBHOOK_SECRET=secret)
run = lambda *a, **k: subprocess.run(*a, check=True, env=env, **k)

def push(*specs):
    run([sys.executable, f"{root}/scripts/push-images.py", "--registry", registry, "--quiet", *specs])

def scenario(name, images, repos, tags, pushers, wait):
    work = f"{bench}/{name}"
    os.makedirs(f"{work}/config/policies")
    names = [f"bench/{name}-{i:02d}" for i in range(images)]
    push(*[f"{n}:1.0.0" for n in names])
    bares = [f"{work}/manifests-{r}.git" for r in range(repos)]
    repo_of = {n: i % repos for i, n in enumerate(names)}
    for r, bare in enumerate(bares):
        seed = f"{work}/seed-{r}"
        run(["git", "init", "-q", "--bare", "-b", "main", bare])
        run(["git", "init", "-q", "-b", "main", seed])
        for n in names:
            if repo_of[n] != r:
                continue
            app = n.rsplit("/", 1)[1]
            os.makedirs(f"{seed}/apps/{app}")
            with open(f"{seed}/apps/{app}/deployment.yaml", "w") as f:
                f.write(f"apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: {app}\nspec:\n"
                        f"  template:\n    spec:\n      containers:\n        - name: {app}\n"
                        f"          image: {registry}/{n}:1.0.0\n")
        run(["git", "-C", seed, "add", "."])
        run(["git", "-C", seed, "-c", "user.name=bench", "-c", "user.email=bench@example.invalid",
             "commit", "-q", "-m", "seed"])
        run(["git", "-C", seed, "push", "-q", bare, "main"])
    with open(f"{work}/config/tagpilot.yaml", "w") as f:
        f.write(f"registries:\n  - host: {registry}\n    insecure: true\npolicies: policies/\n"
                "repositories:\n")
        for r, bare in enumerate(bares):
            f.write(f"  - name: manifests-{r}\n    url: file://{bare}\n    branch: main\n"
                    "    write:\n      mode: push\n")
        f.write("webhooks:\n  secretEnv: BENCH_WEBHOOK_SECRET\n")
    for n in names:
        app = n.rsplit("/", 1)[1]
        with open(f"{work}/config/policies/{app}.yaml", "w") as f:
            f.write(f"apiVersion: tagpilot.dev/v1alpha1\nkind: ImagePolicy\nmetadata:\n  name: {app}\n"
                    f"spec:\n  image: {registry}/{n}\n  strategy:\n    semver: {{}}\n  targets:\n"
                    f"    - repository: manifests-{repo_of[n]}\n      paths: [\"apps/{app}/**\"]\n")
    log = open(f"{work}/daemon.log", "w")
    daemon = subprocess.Popen([tagpilot, "run", "--interval", "1h", "--listen", f"127.0.0.1:{port}",
                               "--state-dir", f"{work}/state", "--cache-dir", f"{work}/cache"],
                              cwd=f"{work}/config", env=env, stderr=log, stdout=log)
    try:
        for _ in range(600):
            try:
                if urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=1).status == 200:
                    break
            except OSError:
                pass
            time.sleep(0.1)
        else:
            sys.exit(f"PROBLEM: tagpilot was not ready; see {work}/daemon.log")
        return measure(name, names, bares, repo_of, tags, pushers, wait)
    finally:
        daemon.terminate()
        daemon.wait()

def on_main(bare):
    """{image: newest N on main} and the number of commits on main."""
    shown = subprocess.run(["git", "--git-dir", bare, "grep", "-h", "image:", "main", "--", "apps"],
                           capture_output=True, text=True, env=env).stdout
    held = {m.group(1): int(m.group(2)) for m in re.finditer(r"/(bench/[\w-]+):1\.0\.(\d+)", shown)}
    count = subprocess.run(["git", "--git-dir", bare, "rev-list", "--count", "main"],
                           capture_output=True, text=True, env=env).stdout
    return held, int(count or 1) - 1

def measure(name, names, bares, repo_of, tags, pushers, wait):
    pushed = {}      # (image, n) -> when the push ended
    committed = {}   # (image, n) -> when main first held n or later
    lock, done = threading.Lock(), threading.Event()
    commits = [0] * len(bares)

    def watch():
        while not done.is_set():
            now = time.monotonic()
            for r, bare in enumerate(bares):
                held, commits[r] = on_main(bare)
                with lock:
                    for (image, n), at in pushed.items():
                        if (image, n) not in committed and held.get(image, 0) >= n:
                            committed[(image, n)] = now
            time.sleep(0.005)

    def pusher(own):
        for n in range(1, tags + 1):
            for image in own:
                push(f"{image}:1.0.{n}")
                with lock:
                    pushed[(image, n)] = time.monotonic()
                while wait and (image, n) not in committed:
                    time.sleep(0.002)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    groups = [names[i::pushers] for i in range(pushers)]
    threads = [threading.Thread(target=pusher, args=(g,)) for g in groups]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    deadline = time.monotonic() + 60
    while len(committed) < len(pushed):
        if time.monotonic() > deadline:
            sys.exit(f"PROBLEM: {len(pushed) - len(committed)} pushes of {name} not committed in 60 s")
        time.sleep(0.01)
    time.sleep(0.5)
    done.set()
    watcher.join()
    samples = sorted(committed[k] - pushed[k] for k in pushed)
    median = statistics.median(samples)
    p95 = samples[min(len(samples) - 1, max(0, round(0.95 * len(samples)) - 1))]
    return (name, len(samples), median, p95, samples[0], samples[-1], sum(commits))

rows = []
for name in scenarios:
    rows.append(scenario(name, *SHAPES[name]))
    r = rows[-1]
    print(f"{r[0]}: {r[1]} pushes, median {r[2] * 1000:.0f} ms, p95 {r[3] * 1000:.0f} ms, "
          f"{r[6]} commits", flush=True)
print()
print("| scenario | pushes | median | p95 | min | max | commits |")
print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
for name, count, median, p95, lo, hi, commits in rows:
    print(f"| {name} | {count} | {median * 1000:.0f} ms | {p95 * 1000:.0f} ms | "
          f"{lo * 1000:.0f} ms | {hi * 1000:.0f} ms | {commits} |")
PY
