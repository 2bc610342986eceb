"""Freeze one process of a simulated host in uninterruptible sleep and write its pid (as the host sees it) to a file.

Usage (as root, with tests/simulator on PYTHONPATH): python3 freeze_worker.py HOST TITLE OUTPUT.json
TITLE is the whole command line of the process (e.g. sglang::scheduler_TP0); it must hold its GPU memory first.
The process stays frozen (state D, SIGKILL pending) until gpusim's destroy (or fleet.thaw) thaws the host.
"""

from __future__ import annotations

import json
import sys

from gpusim import fleet
from gpusim.testing import alive, wait_until


def main(argv: list[str]) -> int:
    host, title, output = argv
    pid = wait_until(lambda: next((proc.pid for proc in alive(host, title) if proc.args == title), None),
                     timeout=30, message=f"{title} in {host}")
    wait_until(lambda: any(holder["pid"] == pid for holder in fleet.gpu_state(host)["processes"]),
               timeout=30, message=f"pid {pid} of {host} holding its GPU")
    fleet.freeze(host, [pid])
    state = wait_until(lambda: next((proc.stat for proc in alive(host, title) if proc.pid == pid and
                                     proc.stat.startswith("D")), None), timeout=30, message=f"pid {pid} in state D")
    with open(output, "w", encoding="utf-8") as handle:
        json.dump({"host": host, "pid": pid, "title": title, "stat": state}, handle)
        handle.write("\n")
    print(json.dumps({"pid": pid, "stat": state}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
