"""The README's sample tables are what `make demo` prints today (tests/tools/demo, run for real).

Only the seconds to clean and the PIDs may differ; hosts, verdicts, GPU counts, MiB freed, processes stopped and
reasons must match. On a mismatch, paste the demo's blocks (in the failure message) into the README.
"""

from __future__ import annotations

import os
import re
import subprocess

from gpusim.testing import REPO

README = os.path.join(REPO, "README.md")
DEMO = os.path.join(REPO, "tests", "tools", "demo")
# README marker -> the demo's section header that prints the same table.
SAMPLES = {
    "<!-- readme-sample: gpu_status before the reset -->": "== ansible-playbook gpuops.hygiene.gpu_status -i inventory.yml -l blackwell   (read-only)",
    "<!-- readme-sample: reset_gpus -->": "== ansible-playbook gpuops.hygiene.reset_gpus -i inventory.yml -l blackwell",
}
TABLE_TASK = "TASK [Show the summary table]"
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def table_after(text: str, anchor: str) -> list[str]:
    """The lines of the summary table task printed after `anchor`: from the task banner to the blank line."""
    start = text.index(TABLE_TASK, text.index(anchor))
    end = text.find("\n\n", start)
    return text[start:end if end >= 0 else None].splitlines()


def readme_block(text: str, marker: str) -> list[str]:
    start = text.index("```\n", text.index(marker)) + 4
    return text[start:text.index("```", start)].rstrip("\n").splitlines()


def normalised(lines: list[str]) -> list[list[str]]:
    """Each line as its fields; a host's seconds and the PIDs in its reasons replaced by placeholders."""
    rows = []
    for line in lines[1:]:  # the task banner's width of stars is the terminal's
        fields = re.split(r"\s{2,}", line.strip())
        if len(fields) >= 6 and fields[1] in ("clean", "busy", "unknown", "unreachable"):
            fields[5] = re.sub(r"^\d+(\.\d+)?$", "<seconds>", fields[5])
            fields[6:] = [re.sub(r"\b(pids?) \d+(-\d+)?(, \d+)*", r"\1 <pid>", field) for field in fields[6:]]
        rows.append(fields)
    return rows


def test_readme_sample_tables_are_the_demo_output():
    environment = dict(os.environ, DEMO_PREFIX=f"rd{os.getpid() % 1000}-", ANSIBLE_FORCE_COLOR="0",
                       ANSIBLE_NOCOLOR="1")
    demo = subprocess.run([DEMO], capture_output=True, text=True, timeout=600, env=environment, check=False)
    assert demo.returncode == 0, demo.stdout[-3000:] + demo.stderr[-3000:]
    output = ANSI.sub("", demo.stdout)
    with open(README, encoding="utf-8") as handle:
        readme = handle.read()
    for marker, section in SAMPLES.items():
        printed = table_after(output, section)
        assert printed[1].split()[:2] == ["HOST", "VERDICT"], printed  # the callback's table, not a JSON list
        assert normalised(readme_block(readme, marker)) == normalised(printed), (
            f"README block {marker} is stale; the demo printed:\n" + "\n".join(printed))
