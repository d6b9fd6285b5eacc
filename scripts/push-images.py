#!/usr/bin/env python3
"""Push tiny synthetic images to a registry over the distribution HTTP API (stdlib only).

Usage:
  scripts/push-images.py --registry 127.0.0.1:5000 shop/api:1.2.3 shop/api:1.3.0 ...
  scripts/push-images.py --registry 127.0.0.1:5000 --from-file tags.txt
  scripts/push-images.py --registry 127.0.0.1:5000 'demo/web:2.0.0 platforms=linux/amd64,linux/arm64/v8'

Each image spec is `REPO:TAG` followed by optional whitespace-separated fields:
  created=2024-05-01T10:00:00Z    the config blob's build time (default: --created-base plus one
                                  day per earlier spec of the same repository, so that later
                                  specs are newer)
  platforms=linux/amd64,linux/arm64/v8
                                  push one image per platform and tag a multi-arch index
                                  (default: a single image for --platform)
In --from-file files, one spec per line; blank lines and lines starting with # are skipped.

Every image shares one tiny layer (uploaded once per repository, cross-mounted where the registry
allows); each tag gets its own small config blob (architecture, os, created, a version label), so
every tag has its own digest. Work is spread over a few keep-alive connections; 2,000 tags push in
seconds on loopback. `--print-digests` prints `REPO:TAG DIGEST` lines on stdout.

--shared-config (OCI only) pushes one config blob per platform for all tags and puts the version
and build time in the manifest annotations (org.opencontainers.image.version / .created) instead:
one request per tag instead of three, for bulk data such as the benchmark. The config's own
`created` is then --created-base for every tag.
Only plain HTTP (lab registries) without auth is supported: it is a test-data tool.
"""

import argparse
import datetime as dt
import gzip
import hashlib
import http.client
import io
import json
import sys
import tarfile
import threading
import time
import urllib.parse
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor

MEDIA = {
    "oci": {
        "manifest": "application/vnd.oci.image.manifest.v1+json",
        "index": "application/vnd.oci.image.index.v1+json",
        "config": "application/vnd.oci.image.config.v1+json",
        "layer": "application/vnd.oci.image.layer.v1.tar+gzip",
    },
    "docker": {
        "manifest": "application/vnd.docker.distribution.manifest.v2+json",
        "index": "application/vnd.docker.distribution.manifest.list.v2+json",
        "config": "application/vnd.docker.container.image.v1+json",
        "layer": "application/vnd.docker.image.rootfs.diff.tar.gzip",
    },
}


class PushError(Exception):
    pass


def sha256(data):
    return "sha256:" + hashlib.sha256(data).hexdigest()


def canonical_json(obj):
    return json.dumps(obj, separators=(",", ":"), sort_keys=True).encode()


def make_layer():
    """A deterministic gzipped tar with one small file, and its uncompressed digest (diff_id)."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        body = b"synthetic image pushed by tagpilot's scripts/push-images.py\n"
        info = tarfile.TarInfo("etc/tagpilot-synthetic")
        info.size = len(body)
        info.mtime = 0
        tar.addfile(info, io.BytesIO(body))
    tar_bytes = raw.getvalue()
    gz = io.BytesIO()
    with gzip.GzipFile(fileobj=gz, mode="wb", mtime=0) as f:
        f.write(tar_bytes)
    return gz.getvalue(), sha256(tar_bytes)


def parse_platform(text):
    parts = text.split("/")
    if len(parts) not in (2, 3) or not all(parts):
        raise PushError(f"platform '{text}' is not os/arch[/variant]")
    platform = {"os": parts[0], "architecture": parts[1]}
    if len(parts) == 3:
        platform["variant"] = parts[2]
    return platform


def parse_time(text):
    try:
        return dt.datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(dt.timezone.utc)
    except ValueError:
        raise PushError(f"created time '{text}' is not RFC 3339") from None


def rfc3339(moment):
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_spec(text, where):
    fields = text.split()
    ref, options = fields[0], fields[1:]
    repo, sep, tag = ref.rpartition(":")
    if not sep or not repo or not tag or "/" in tag:
        raise PushError(f"{where}: '{ref}' is not REPO:TAG")
    spec = {"repo": repo, "tag": tag, "created": None, "platforms": None}
    for option in options:
        key, sep, value = option.partition("=")
        if not sep:
            raise PushError(f"{where}: '{option}' is not KEY=VALUE")
        if key == "created":
            spec["created"] = parse_time(value)
        elif key == "platforms":
            spec["platforms"] = [parse_platform(p) for p in value.split(",") if p]
        else:
            raise PushError(f"{where}: unknown field '{key}' (known: created, platforms)")
    return spec


class Registry:
    """One keep-alive HTTP connection per thread to a plain-HTTP registry."""

    def __init__(self, host):
        self.host = host
        self.local = threading.local()
        self.requests = 0
        self.lock = threading.Lock()

    def _conn(self):
        conn = getattr(self.local, "conn", None)
        if conn is None:
            conn = http.client.HTTPConnection(self.host, timeout=30)
            self.local.conn = conn
        return conn

    def request(self, method, path, body=None, headers=None, expect=(200, 201, 202)):
        headers = dict(headers or {})
        if body is not None:
            headers["Content-Length"] = str(len(body))
        elif method in ("POST", "PUT"):
            headers["Content-Length"] = "0"
        for attempt in (1, 2):
            conn = self._conn()
            try:
                conn.request(method, path, body=body, headers=headers)
                resp = conn.getresponse()
                data = resp.read()
                break
            except (http.client.HTTPException, ConnectionError, OSError) as err:
                conn.close()
                self.local.conn = None
                if attempt == 2:
                    raise PushError(f"{method} http://{self.host}{path}: {err}") from None
        with self.lock:
            self.requests += 1
        if resp.status not in expect:
            snippet = data[:300].decode("utf-8", "replace")
            raise PushError(f"{method} http://{self.host}{path}: HTTP {resp.status}: {snippet}")
        return resp, data

    def _upload_path(self, location):
        parsed = urllib.parse.urlsplit(location)
        return parsed.path, parsed.query

    def put_blob(self, repo, data, digest, mount_from=None):
        """Upload a blob monolithically, or mount it from another repository of this registry."""
        path = f"/v2/{repo}/blobs/uploads/"
        if mount_from:
            query = urllib.parse.urlencode({"mount": digest, "from": mount_from})
            resp, _ = self.request("POST", f"{path}?{query}", expect=(201, 202))
            if resp.status == 201:
                return
            # 202: the registry declined the mount and opened a normal upload instead.
        else:
            resp, _ = self.request("POST", path, expect=(202,))
        upload_path, query = self._upload_path(resp.getheader("Location", ""))
        if not upload_path:
            raise PushError(f"POST {path}: no Location header in the answer")
        sep = "&" if query else ""
        query = f"{query}{sep}{urllib.parse.urlencode({'digest': digest})}"
        self.request(
            "PUT",
            f"{upload_path}?{query}",
            body=data,
            headers={"Content-Type": "application/octet-stream"},
            expect=(201,),
        )

    def put_manifest(self, repo, reference, body, media_type):
        self.request(
            "PUT",
            f"/v2/{repo}/manifests/{reference}",
            body=body,
            headers={"Content-Type": media_type},
            expect=(201,),
        )


def image_manifest(media, config_bytes, layer_bytes, annotations=None):
    manifest = {
            "schemaVersion": 2,
            "mediaType": media["manifest"],
            "config": {
                "mediaType": media["config"],
                "digest": sha256(config_bytes),
                "size": len(config_bytes),
            },
            "layers": [
                {
                    "mediaType": media["layer"],
                    "digest": sha256(layer_bytes),
                    "size": len(layer_bytes),
                }
            ],
        }
    if annotations:
        manifest["annotations"] = annotations
    return canonical_json(manifest)


def image_config(spec, platform, diff_id):
    created = rfc3339(spec["created"])
    config = {
        "architecture": platform["architecture"],
        "os": platform["os"],
        "created": created,
        "config": {"Labels": {"org.opencontainers.image.version": spec["tag"]}}
        if spec["tag"]
        else {},
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
        "history": [{"created": created, "created_by": "tagpilot scripts/push-images.py"}],
    }
    if "variant" in platform:
        config["variant"] = platform["variant"]
    return canonical_json(config)


def shared_config(platform, base, diff_id):
    return image_config({"tag": None, "created": base}, platform, diff_id)


def push_tag(registry, media, spec, layer, diff_id, shared_base=None):
    """Push one tag: its config blob(s), image manifest(s) and, for several platforms, an index."""
    entries = []
    for platform in spec["platforms"]:
        if shared_base is None:
            config = image_config(spec, platform, diff_id)
            registry.put_blob(spec["repo"], config, sha256(config))
            manifest = image_manifest(media, config, layer)
        else:
            # Uploaded beforehand, once per repository.
            config = shared_config(platform, shared_base, diff_id)
            annotations = {
                "org.opencontainers.image.version": spec["tag"],
                "org.opencontainers.image.created": rfc3339(spec["created"]),
            }
            manifest = image_manifest(media, config, layer, annotations)
        if len(spec["platforms"]) == 1:
            registry.put_manifest(spec["repo"], spec["tag"], manifest, media["manifest"])
            return sha256(manifest)
        digest = sha256(manifest)
        registry.put_manifest(spec["repo"], digest, manifest, media["manifest"])
        entries.append(
            {
                "mediaType": media["manifest"],
                "digest": digest,
                "size": len(manifest),
                "platform": platform,
            }
        )
    index = canonical_json(
        {"schemaVersion": 2, "mediaType": media["index"], "manifests": entries}
    )
    registry.put_manifest(spec["repo"], spec["tag"], index, media["index"])
    return sha256(index)


def read_specs(args):
    lines = [(text, f"argument {i + 1}") for i, text in enumerate(args.images)]
    for path in args.from_file or []:
        with open(path, encoding="utf-8") if path != "-" else sys.stdin as f:
            for n, line in enumerate(f, 1):
                line = line.strip()
                if line and not line.startswith("#"):
                    lines.append((line, f"{path}:{n}"))
    if not lines:
        raise PushError("no images given (arguments or --from-file)")
    default_platform = [parse_platform(args.platform)]
    base = parse_time(args.created_base)
    seen = {}
    specs = []
    for text, where in lines:
        spec = parse_spec(text, where)
        index = seen.get(spec["repo"], 0)
        seen[spec["repo"]] = index + 1
        if spec["created"] is None:
            spec["created"] = base + dt.timedelta(days=index)
        if spec["platforms"] is None:
            spec["platforms"] = default_platform
        specs.append(spec)
    return specs


def main():
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n")[0],
        epilog=__doc__.split("\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("images", nargs="*", help="REPO:TAG [created=...] [platforms=...]")
    parser.add_argument("--registry", required=True, help="HOST:PORT of a plain-HTTP registry")
    parser.add_argument("--from-file", action="append", metavar="FILE", help="specs, one a line")
    parser.add_argument("--platform", default="linux/amd64", help="default platform")
    parser.add_argument("--created-base", default="2024-01-01T00:00:00Z")
    parser.add_argument("--media", choices=sorted(MEDIA), default="oci", help="manifest format")
    parser.add_argument("--jobs", type=int, default=4, help="parallel connections")
    parser.add_argument("--shared-config", action="store_true", help="one config blob (OCI)")
    parser.add_argument("--print-digests", action="store_true")
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args()

    started = time.monotonic()
    try:
        specs = read_specs(args)
        if args.shared_config and args.media != "oci":
            raise PushError("--shared-config needs --media oci (annotations are OCI-only)")
        media = MEDIA[args.media]
        registry = Registry(args.registry)
        layer, diff_id = make_layer()
        layer_digest = sha256(layer)

        by_repo = OrderedDict()
        for spec in specs:
            by_repo.setdefault(spec["repo"], []).append(spec)
        repos = list(by_repo)

        # Shared blobs go up once; every other repository mounts them from the first one.
        shared = [(layer, layer_digest)]
        shared_base = None
        if args.shared_config:
            shared_base = parse_time(args.created_base)
            platforms = {json.dumps(p, sort_keys=True) for s in specs for p in s["platforms"]}
            for platform in sorted(platforms):
                config = shared_config(json.loads(platform), shared_base, diff_id)
                shared.append((config, sha256(config)))
        for data, digest in shared:
            registry.put_blob(repos[0], data, digest)
        with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            mounts = [
                pool.submit(registry.put_blob, repo, data, digest, repos[0])
                for repo in repos[1:]
                for data, digest in shared
            ]
            for f in mounts:
                f.result()
            futures = [
                pool.submit(push_tag, registry, media, spec, layer, diff_id, shared_base)
                for spec in specs
            ]
            digests = [f.result() for f in futures]
    except PushError as err:
        print(f"push-images: {err}", file=sys.stderr)
        return 1
    except OSError as err:
        print(f"push-images: {err}", file=sys.stderr)
        return 1

    if args.print_digests:
        for spec, digest in zip(specs, digests):
            print(f"{spec['repo']}:{spec['tag']} {digest}")
    if not args.quiet:
        elapsed = time.monotonic() - started
        print(
            f"push-images: pushed {len(specs)} tags to {len(repos)} repositories on "
            f"{args.registry} in {elapsed:.1f}s ({registry.requests} requests)",
            file=sys.stderr,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
