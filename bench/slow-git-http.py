#!/usr/bin/env python3
"""Serve bare git repositories over smart HTTP (`git http-backend`) with added latency.

Usage: bench/slow-git-http.py --root DIR [--delay-ms 50] [--port 0] [--log FILE]

Every request waits DELAY ms before `git http-backend` answers it, as a remote git host over a
real network would (one round trip and its share of server time). Prints the port it listens
on, then serves until killed; with --log, one line per request (start time, seconds taken,
method and path). Stdlib only.
"""

import argparse
import http.server
import os
import subprocess
import sys
import threading
import time


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--root", required=True)
    parser.add_argument("--delay-ms", type=float, default=50)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--log")
    args = parser.parse_args()
    log_lock = threading.Lock()
    log = open(args.log, "a", buffering=1) if args.log else None

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self):
            self.backend()

        def do_POST(self):
            self.backend()

        def backend(self):
            started = time.time()
            time.sleep(args.delay_ms / 1000)
            path, _, query = self.path.partition("?")
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            env = {
                "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
                "GIT_PROJECT_ROOT": args.root,
                "GIT_HTTP_EXPORT_ALL": "1",
                "REQUEST_METHOD": self.command,
                "PATH_INFO": path,
                "QUERY_STRING": query,
                "CONTENT_TYPE": self.headers.get("Content-Type", ""),
                "CONTENT_LENGTH": str(len(body)),
                "REMOTE_ADDR": self.client_address[0],
            }
            if self.headers.get("Content-Encoding"):
                env["HTTP_CONTENT_ENCODING"] = self.headers["Content-Encoding"]
            if self.headers.get("Git-Protocol"):
                env["GIT_PROTOCOL"] = self.headers["Git-Protocol"]
            out = subprocess.run(
                ["git", "http-backend"], input=body, env=env, capture_output=True, check=False
            ).stdout
            head, _, payload = out.partition(b"\r\n\r\n")
            if not _:
                head, _, payload = out.partition(b"\n\n")
            status = 200
            headers = []
            for line in head.decode("latin-1").splitlines():
                name, _, value = line.partition(":")
                if name.lower() == "status":
                    status = int(value.strip().split()[0])
                elif name:
                    headers.append((name, value.strip()))
            self.send_response(status)
            for name, value in headers:
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)
            if log:
                with log_lock:
                    log.write(f"{started:.3f} {time.time() - started:.3f} {self.command} {path}\n")

        def log_message(self, *_):
            pass

    class Server(http.server.ThreadingHTTPServer):
        # socketserver's default backlog of 5 drops connections beyond it, and a dropped SYN
        # costs the client a one-second retransmit: the server, not the client, would be measured.
        request_queue_size = 1024
        daemon_threads = True

    server = Server(("127.0.0.1", args.port), Handler)
    print(server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    sys.exit(main())
