"""An outsider for the exec guard's tests and benchmark: a process of the host, in no unit,
that opens files in a loop until its stdin closes, then prints one JSON line: opens,
refusals (EPERM/EACCES, with the first few paths), paths gone, and open latency percentiles in
microseconds.

    python3 tests/exec_outsider.py FILE...     (paths to open in turn; stdin: close to stop)
"""

from __future__ import annotations

import json
import os
import select
import sys
import time


def main(paths: list[str]) -> None:
    samples: list[int] = []
    refused: list[str] = []
    opens = missing = 0
    poller = select.poll()
    poller.register(0, select.POLLIN | select.POLLHUP)
    while True:
        for path in paths:
            start = time.perf_counter_ns()
            try:
                fd = os.open(path, os.O_RDONLY)
            except PermissionError:
                refused.append(path)
                continue
            except OSError:  # a path into a unit that has ended: gone, not refused
                missing += 1
                continue
            took = time.perf_counter_ns() - start
            os.read(fd, 1)
            os.close(fd)
            opens += 1
            if len(samples) < 2_000_000:
                samples.append(took)
        if poller.poll(0):
            break
    samples.sort()

    def pct(p: float) -> float:
        return round(samples[int(p * (len(samples) - 1))] / 1000, 2) if samples else 0.0

    print(json.dumps({"opens": opens, "refusals": len(refused), "refused": refused[:5],
                      "missing": missing,
                      "open_p50_us": pct(0.5), "open_p99_us": pct(0.99)}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
