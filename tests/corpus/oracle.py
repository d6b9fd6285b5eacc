#!/usr/bin/env python3
"""An independent reader of image references: what the README says tagpilot reads, read with
PyYAML, never with tagpilot's code. `tests/it/real_corpus.rs` compares tagpilot's plan and apply
with its list.

Usage: oracle.py DIR  prints one JSON object:

  {"references": [{"file", "line", "column", "start_line", "shape", "image", "registry",
                   "path", "tag", "digest", "digest_line"}, ...],
   "unreadable": [{"file", "error"}, ...]}

`file` is relative to DIR; `line` and `column` (1-based) are where the version is written (the
tag, else the digest, else the name), so that is the line an update edits; `start_line` is
where the reference begins (the `image` key of a values map, the entry of a kustomization), so
a message about the reference may name any line from there. `image` is the
reference as the file composes it, without tag or digest; `registry` and `path` are its
normalised parts (Docker's rules: `docker.io` when no host is written, `library/` before a
one-part Docker Hub name). `tag` and `digest` are the current ones, or null; `digest_line` is
the line of a digest written under a key of its own (a values map's or kustomize's `digest`),
which must move with the tag.

What the README claims tagpilot reads, and so what this lists (each claim in the README's words):

- "containers of Deployments, StatefulSets, DaemonSets, Jobs, CronJobs, Pods, Argo Rollouts
  (init and ephemeral containers too)": `image:` of every entry of `containers`,
  `initContainers` and `ephemeralContainers` of the Pod spec of those kinds
  (shape `container`);
- "kustomize `images:`" in "kustomizations under every name kustomize reads
  (`kustomization.yaml`, `kustomization.yml`, and `Kustomization`)": every entry of the
  top-level `images:` list; its image is `newName`, else `name` (shape `kustomize`);
- "Helm values (`image: {registry, repository, tag}`, `image: repo:tag` ...)": in every YAML
  document that is a mapping (as Helm requires of values), not a Kubernetes resource (no
  `apiVersion` and `kind`) and not a kustomization, at any depth, a key `image` holding a mapping with a `repository` string
  (`registry`, `tag` and `digest` optional; a null or empty `registry` is no registry) (shape
  `helm-map`), or a string that is an image reference (shape `helm-string`). An empty or
  absent `tag` in a map is listed with `tag` "" or null: the chart's appVersion, which the
  README says is held. The README claims no more, but a string `image` with a `tag` key beside
  it (`{registry, image, tag}`, ingress-nginx's shape) is not a whole reference: it is listed
  as the image the chart composes, at its `tag` (shape `helm-split`), for tagpilot to update or
  name, never to read as a reference without a tag;
- "any value carrying a marker comment -- tagpilot's `# tagpilot: my-policy:tag` or Flux's
  `# {"$imagepolicy": "ns:my-policy:tag"}`": the scalar on the marker's line (shape `marker`;
  a marker wins over every other reading of its line).

Values that are not image references (`{{ .Values.image }}`, `${IMG}`) are not listed, as the
README says they are not tags at all; nor are files under a chart's `templates/` (beside its
`Chart.yaml`), which the README says are never edited. A value reached twice through a YAML alias is listed once.
"""

import json
import os
import re
import sys

import yaml

WORKLOAD_KINDS = {"Deployment", "StatefulSet", "DaemonSet", "Job", "CronJob", "Pod", "Rollout"}
KUSTOMIZATION_NAMES = {"kustomization.yaml", "kustomization.yml", "Kustomization"}
CONTAINER_LISTS = ("containers", "initContainers", "ephemeralContainers")

# The grammar of github.com/distribution/reference.
_ALNUM = r"[a-z0-9]+"
_SEP = r"(?:[._]|__|[-]+)"
_PATH_COMPONENT = _ALNUM + r"(?:" + _SEP + _ALNUM + r")*"
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN = _DOMAIN_COMPONENT + r"(?:\." + _DOMAIN_COMPONENT + r")*(?::[0-9]+)?"
_TAG = r"[\w][\w.-]{0,127}"
_DIGEST = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}"
NAME_RE = re.compile(r"^(?:(" + _DOMAIN + r")/)?(" + _PATH_COMPONENT + r"(?:/" + _PATH_COMPONENT + r")*)$")
REFERENCE_RE = re.compile(
    r"^((?:" + _DOMAIN + r"/)?" + _PATH_COMPONENT + r"(?:/" + _PATH_COMPONENT + r")*)"
    r"(?::(" + _TAG + r"))?(?:@(" + _DIGEST + r"))?$"
)
TAG_RE = re.compile(r"^" + _TAG + r"$")
DOMAIN_RE = re.compile(r"^" + _DOMAIN + r"$")
MARKER_RE = re.compile(r"#\s*(?:tagpilot:|\{\s*\"\$imagepolicy\")")

NULL_TAG = "tag:yaml.org,2002:null"


def marker_part(line):
    """The part a marker names (`tag`, `name`, `digest`), None for the whole reference."""
    m = re.search(r"#\s*tagpilot:\s*(\S+)", line) or re.search(
        r"\"\$imagepolicy\"\s*:\s*\"([^\"]*)\"", line
    )
    last = m.group(1).rsplit(":", 1)[-1] if m and ":" in m.group(1) else None
    return last if last in ("tag", "name", "digest") else None


def split_name(name):
    """(registry, path) of a name without tag or digest, by Docker's rules; None if not a name."""
    first, slash, rest = name.partition("/")
    if slash and ("." in first or ":" in first or first == "localhost" or first != first.lower()):
        if not DOMAIN_RE.match(first):
            return None
        registry, path = first, rest
    else:
        registry, path = "docker.io", name
    if not NAME_RE.match(path):
        return None
    if registry in ("index.docker.io", "registry-1.docker.io"):
        registry = "docker.io"
    if registry == "docker.io" and "/" not in path:
        path = "library/" + path
    return registry, path


def parse_reference(text):
    """(name, tag, digest) of a whole reference, or None."""
    m = REFERENCE_RE.match(text)
    if not m or split_name(m.group(1)) is None:
        return None
    return m.group(1), m.group(2), m.group(3)


def scalar(node):
    """The text of a scalar node, None for null or anything else."""
    if isinstance(node, yaml.ScalarNode) and node.tag != NULL_TAG:
        return node.value
    return None


def mapping(node):
    """key text -> (key node, value node) of a mapping node."""
    out = {}
    if isinstance(node, yaml.MappingNode):
        for k, v in node.value:
            if isinstance(k, yaml.ScalarNode):
                out[k.value] = (k, v)
    return out


class Reader:
    def __init__(self, rel):
        self.rel = rel
        self.refs = {}

    def add(self, node, shape, name, tag, digest, digest_node=None, start=None):
        parts = split_name(name)
        if parts is None:
            return
        key = (node.start_mark.line, node.start_mark.column)
        if key in self.refs:
            return
        self.refs[key] = {
            "file": self.rel,
            "line": node.start_mark.line + 1,
            "column": node.start_mark.column + 1,
            "start_line": (start or node).start_mark.line + 1,
            "shape": shape,
            "image": name,
            "registry": parts[0],
            "path": parts[1],
            "tag": tag,
            "digest": digest,
            "digest_line": digest_node.start_mark.line + 1 if digest and digest_node else None,
        }

    def image_string(self, node, shape):
        text = scalar(node)
        if text is None:
            return
        parsed = parse_reference(text)
        if parsed:
            self.add(node, shape, *parsed)

    def workload(self, doc, kind):
        spec = mapping(doc).get("spec", (None, None))[1]
        if kind == "CronJob":
            spec = mapping(spec).get("jobTemplate", (None, None))[1]
            spec = mapping(spec).get("spec", (None, None))[1]
        if kind != "Pod":
            template = mapping(spec).get("template", (None, None))[1]
            spec = mapping(template).get("spec", (None, None))[1]
        for key in CONTAINER_LISTS:
            containers = mapping(spec).get(key, (None, None))[1]
            if isinstance(containers, yaml.SequenceNode):
                for container in containers.value:
                    image = mapping(container).get("image")
                    if image:
                        self.image_string(image[1], "container")

    def kustomization(self, doc):
        images = mapping(doc).get("images", (None, None))[1]
        if not isinstance(images, yaml.SequenceNode):
            return
        for entry in images.value:
            keys = mapping(entry)
            name = scalar(keys.get("newName", (None, None))[1]) or scalar(
                keys.get("name", (None, None))[1]
            )
            if not name:
                continue
            tag_node = keys.get("newTag", (None, None))[1]
            digest_node = keys.get("digest", (None, None))[1]
            at = tag_node or digest_node or keys.get("name", (None, None))[1]
            if at is None:
                continue
            self.add(
                at, "kustomize", name, scalar(tag_node), scalar(digest_node), digest_node, entry
            )

    def values(self, node, seen):
        if id(node) in seen:
            return
        seen.add(id(node))
        if isinstance(node, yaml.SequenceNode):
            for item in node.value:
                self.values(item, seen)
        elif isinstance(node, yaml.MappingNode):
            siblings = mapping(node)
            for k, v in node.value:
                if isinstance(k, yaml.ScalarNode) and k.value == "image":
                    if isinstance(v, yaml.ScalarNode) and "tag" in siblings:
                        self.helm_split(siblings)
                    else:
                        self.helm_image(k, v)
                self.values(v, seen)

    def helm_image(self, key, node):
        if isinstance(node, yaml.ScalarNode):
            self.image_string(node, "helm-string")
            return
        keys = mapping(node)
        if "repository" not in keys:
            return
        repo_node = keys["repository"][1]
        repository = scalar(repo_node)
        if not repository:
            return
        registry = scalar(keys.get("registry", (None, None))[1])
        name = f"{registry}/{repository}" if registry else repository
        tag_node = keys.get("tag", (None, None))[1]
        digest_node = keys.get("digest", (None, None))[1]
        tag = scalar(tag_node) if tag_node is not None else None
        digest = scalar(digest_node) or None
        if tag and not TAG_RE.match(tag):
            return  # a template or placeholder the README says is not a tag at all
        at = tag_node if tag_node is not None else repo_node
        self.add(at, "helm-map", name, tag, digest, digest_node, key)

    def helm_split(self, keys):
        """`{registry, image, tag}`: the name beside its tag, as ingress-nginx writes it. The
        README claims `image: repo:tag` for a whole reference; a name with a `tag` beside it is
        not one, and the chart composes `registry/image:tag`."""
        image_node = keys["image"][1]
        name = scalar(image_node)
        if not name or parse_reference(name) is None:
            return
        registry = scalar(keys.get("registry", (None, None))[1])
        full = f"{registry}/{name}" if registry else name
        tag_node = keys["tag"][1]
        tag = scalar(tag_node)
        if tag and not TAG_RE.match(tag):
            return
        digest_node = keys.get("digest", (None, None))[1]
        digest = scalar(digest_node) or None
        self.add(tag_node, "helm-split", full, tag, digest, digest_node, keys["image"][0])

    def markers(self, text, docs):
        lines = {i for i, line in enumerate(text.splitlines()) if MARKER_RE.search(line)}
        if not lines:
            return
        found = {}

        def walk(node, seen):
            if id(node) in seen:
                return
            seen.add(id(node))
            if isinstance(node, yaml.ScalarNode):
                if node.start_mark.line in lines:
                    found.setdefault(node.start_mark.line, node)
            elif isinstance(node, yaml.SequenceNode):
                for item in node.value:
                    walk(item, seen)
            elif isinstance(node, yaml.MappingNode):
                for _, v in node.value:
                    walk(v, seen)

        for doc in docs:
            walk(doc, set())
        text_lines = text.splitlines()
        for line, node in found.items():
            for key in [k for k in self.refs if k[0] == line]:
                del self.refs[key]
            part = marker_part(text_lines[line])
            entry = {
                "file": self.rel,
                "line": line + 1,
                "column": node.start_mark.column + 1,
                "start_line": line + 1,
                "shape": "marker",
                "image": None,
                "registry": None,
                "path": None,
                "tag": node.value if part == "tag" else None,
                "digest": node.value if part == "digest" else None,
                "digest_line": None,
            }
            parsed = parse_reference(node.value) if part in (None, "name") else None
            if parsed:
                entry["image"] = parsed[0]
                entry["registry"], entry["path"] = split_name(parsed[0])
                entry["tag"], entry["digest"] = parsed[1], parsed[2]
            self.refs[(line, node.start_mark.column)] = entry

    def read(self, text):
        docs = [d for d in yaml.compose_all(text, Loader=yaml.SafeLoader) if d is not None]
        is_kustomization = os.path.basename(self.rel) in KUSTOMIZATION_NAMES
        for doc in docs:
            keys = mapping(doc)
            kind = scalar(keys.get("kind", (None, None))[1])
            api = scalar(keys.get("apiVersion", (None, None))[1])
            if is_kustomization:
                self.kustomization(doc)
            elif kind and api:
                if kind in WORKLOAD_KINDS and (kind != "Rollout" or api.startswith("argoproj.io/")):
                    self.workload(doc, kind)
            elif isinstance(doc, yaml.MappingNode):
                self.values(doc, set())
        self.markers(text, docs)
        return sorted(self.refs.values(), key=lambda r: (r["line"], r["column"]))


def in_chart_templates(root, rel):
    """The README: "Files under a Helm chart's `templates/` (beside its `Chart.yaml`) are never
    edited"."""
    parts = rel.split("/")
    for i, part in enumerate(parts[:-1]):
        if part == "templates" and os.path.isfile(os.path.join(root, *parts[:i], "Chart.yaml")):
            return True
    return False


def main(root):
    references, unreadable = [], []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(filenames):
            if not (name.endswith((".yaml", ".yml")) or name == "Kustomization"):
                continue
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, root).replace(os.sep, "/")
            if in_chart_templates(root, rel):
                continue
            with open(path, encoding="utf-8") as f:
                text = f.read()
            try:
                references.extend(Reader(rel).read(text))
            except yaml.YAMLError as e:
                unreadable.append({"file": rel, "error": str(e).splitlines()[0]})
    json.dump({"references": references, "unreadable": unreadable}, sys.stdout, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main(sys.argv[1])
