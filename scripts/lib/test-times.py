#!/usr/bin/env python3
"""Passes `cargo test`'s output through unchanged and, at its end, prints the slowest tests.

Usage: cargo test ... 2>&1 | python3 scripts/lib/test-times.py THREADS [SHOWN]

Stable Rust's test harness does not report how long a test took (`--report-time` and
`--format json` are unstable), so the durations are worked out from when each result line
arrives. The harness starts tests in name order, THREADS at a time, and starts the next one as
soon as one ends; it prints `test NAME ... ok` when a test ends. So, in each test binary, the
k-th test (in name order) starts when the binary starts if k < THREADS, else when the
(k - THREADS)-th result line arrives, and its duration is from then to its own result line.
That holds for every harness since Rust 1.0 and needs nothing from the tests; what it cannot
see (a test that waits for a free thread) it does not count. Durations are to a few
milliseconds, which is all a "slowest tests" list needs.
"""

import re
import sys
import time

RESULT = re.compile(r"^test (.+?) \.\.\. (ok|FAILED|ignored.*)$")
RUNNING = re.compile(r"^running (\d+) tests?$")
BINARY = re.compile(r"^\s*(Running|Doc-tests)\s+(.*)$")


def durations(binary, started, results, threads):
    """(seconds, name) for each test of one binary that ran. An ignored test takes a thread
    too, for the moment it takes to say so, so it counts in the order, not in the list."""
    end_of = {name: at for at, name, _ in results}
    ignored = {name for _, name, outcome in results if outcome.startswith("ignored")}
    ends = [at for at, _, _ in results]
    out = []
    for k, name in enumerate(sorted(end_of)):
        start = started if k < threads else ends[k - threads]
        if name not in ignored:
            out.append((end_of[name] - start, f"{binary}: {name}"))
    return out


def main():
    threads = max(1, int(sys.argv[1]))
    shown = int(sys.argv[2]) if len(sys.argv) > 2 else 15
    binary, started, results, timed = "", None, [], []
    for line in sys.stdin:
        now = time.monotonic()
        sys.stdout.write(line)
        sys.stdout.flush()
        text = line.rstrip("\n")
        if m := BINARY.match(text):
            if started is not None:
                timed += durations(binary, started, results, threads)
            binary = m.group(2).removeprefix("unittests ").split(" ")[0]
            started, results = None, []
        elif RUNNING.match(text):
            started, results = now, []
        elif (m := RESULT.match(text)) and started is not None:
            results.append((now, m.group(1), m.group(2)))
    if started is not None:
        timed += durations(binary, started, results, threads)
    if not timed:
        return
    timed.sort(reverse=True)
    print(f"\nslowest tests ({threads} at a time):")
    for seconds, name in timed[:shown]:
        print(f"  {seconds:8.2f}s  {name}")


if __name__ == "__main__":
    main()
