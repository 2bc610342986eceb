"""ansible-lint (the repository's profile) on every plugin's EXAMPLES block, each wrapped in a play.

Usage: python tests/tools/lint_examples.py ANSIBLE_LINT. The plays are written outside the repository (ansible-lint's exclude_paths
covers tests/output/), with a copy of .ansible-lint, and linted there.
"""

from __future__ import annotations

import ast
import glob
import os
import shutil
import subprocess
import sys
import tempfile

import yaml

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def examples() -> dict[str, str]:
    found = {}
    for path in sorted(glob.glob(os.path.join(REPO, "plugins", "modules", "*.py"))):
        with open(path, encoding="utf-8") as handle:
            tree = ast.parse(handle.read())
        for node in tree.body:
            if isinstance(node, ast.Assign) and any(getattr(target, "id", "") == "EXAMPLES" for target in node.targets):
                found[os.path.basename(path)] = ast.literal_eval(node.value)
    for path in sorted(glob.glob(os.path.join(REPO, "plugins", "filter", "*.yml"))):
        with open(path, encoding="utf-8") as handle:
            found[os.path.basename(path)] = yaml.safe_load(handle)["EXAMPLES"]
    return found


def main() -> int:
    lint = sys.argv[1]
    work = tempfile.mkdtemp(prefix="gpuops-examples-")
    try:
        shutil.copy(os.path.join(REPO, ".ansible-lint"), os.path.join(work, ".ansible-lint"))
        os.makedirs(os.path.join(work, "playbooks"))
        for name, text in examples().items():
            tasks = yaml.safe_load(text)
            assert isinstance(tasks, list) and tasks, f"{name}: EXAMPLES is not a list of tasks"
            # The block verbatim, indented under tasks:, so its own formatting is what is linted.
            body = "".join("    " + line if line.strip() else line for line in text.strip("\n").splitlines(True))
            with open(os.path.join(work, "playbooks", name.rsplit(".", 1)[0] + ".yml"), "w", encoding="utf-8") as out:
                out.write(f"---\n- name: Examples of {name}\n  hosts: all\n  gather_facts: false\n  tasks:\n{body}\n")
        subprocess.run(["git", "init", "-q", work], check=True)
        return subprocess.run([lint, "--nocolor", "--project-dir", work, os.path.join(work, "playbooks")], cwd=work,
                              check=False).returncode
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
