#!/usr/bin/env python3
"""bench/fsync-probe.py: how long this disk takes to make one small write durable.

Every audited call waits for one SQLite commit with synchronous=FULL, and a commit ends with an
fsync of the WAL file. A batch of calls shares one commit, but no call can be answered sooner
than the fsync that covers it, so the device's fsync latency is a floor under the gateway's
latency, and its tail (p99) shows up in the gateway's p99.

The probe does what the WAL does after a checkpoint: overwrite 4 KiB pages at increasing
offsets of a preallocated file, each followed by fdatasync() (the same syscall family SQLite
uses), and prints the latency percentiles.

Usage: bench/fsync-probe.py [DIR] [COUNT]   (default: the current directory, 300 writes)
Prints one line: "fsync 4KiB: p50 <us> p90 <us> p99 <us> max <us> (n=<count>, dir=<DIR>)".
"""

import os
import sys
import tempfile
import time


def main() -> int:
    directory = sys.argv[1] if len(sys.argv) > 1 else "."
    try:
        count = int(sys.argv[2]) if len(sys.argv) > 2 else 300
    except ValueError:
        count = 0
    if count < 10:
        print("error: COUNT must be a number, at least 10", file=sys.stderr)
        return 2
    size = 16 << 20
    page = b"\xa5" * 4096
    try:
        fd, path = tempfile.mkstemp(prefix="fsync-probe.", dir=directory)
    except OSError as e:
        print(f"error: cannot create a probe file in {directory}: {e.strerror}", file=sys.stderr)
        return 2
    try:
        os.posix_fallocate(fd, 0, size)
        os.fsync(fd)
        samples = []
        for i in range(count):
            os.pwrite(fd, page, (i * 4096) % size)
            start = time.perf_counter()
            os.fdatasync(fd)
            samples.append((time.perf_counter() - start) * 1e6)
    finally:
        os.close(fd)
        os.unlink(path)
    samples.sort()

    def pct(p: float) -> int:
        return round(samples[min(len(samples) - 1, int(p * len(samples)))])

    print(
        f"fsync 4KiB: p50 {pct(0.50)} us p90 {pct(0.90)} us p99 {pct(0.99)} us "
        f"max {round(samples[-1])} us (n={count}, dir={directory})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
