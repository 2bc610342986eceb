"""Test setup shared by every suite: import paths for the collection and the simulator.

Tests run against the collection installed in tests/output/collections (what
`make build` puts there, so CI tests the built artifact); without an install, a
link to this checkout stands in for it.
"""

from __future__ import annotations

import json
import os
import sys

import pytest

TESTS = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(TESTS)
COLLECTIONS = os.path.join(TESTS, "output", "collections")
COLLECTION = os.path.join(COLLECTIONS, "ansible_collections", "gpuops", "hygiene")
SOURCES = ("plugins", "roles", "playbooks", "meta")


def _newest_source() -> float:
    newest = 0.0
    for top in SOURCES:
        for root, dirs, files in os.walk(os.path.join(REPO, top)):
            dirs[:] = [name for name in dirs if name != "__pycache__"]  # bytecode a run wrote is no source
            newest = max([newest] + [os.path.getmtime(os.path.join(root, name)) for name in files])
    return newest


def pytest_configure(config):
    if not os.path.lexists(COLLECTION):
        os.makedirs(os.path.dirname(COLLECTION), exist_ok=True)
        os.symlink(REPO, COLLECTION)
    elif not os.path.islink(COLLECTION):
        installed = os.path.getmtime(os.path.join(COLLECTION, "MANIFEST.json"))
        if _newest_source() > installed:
            pytest.exit("the collection installed in tests/output/collections is older than the sources: "
                        "run `make build` (or remove that directory to test the checkout directly)", returncode=4)


sys.path.insert(0, COLLECTIONS)
sys.path.insert(0, os.path.join(TESTS, "simulator"))


@pytest.fixture
def run_module(capsys):
    """Run a module's main() in-process with real arguments (patch_module_args) and return its JSON result."""
    from ansible.module_utils.testing import patch_module_args  # pylint: disable=import-outside-toplevel

    def run(main, args: dict) -> dict:
        with patch_module_args(args):
            with pytest.raises(SystemExit):
                main()
        return json.loads(capsys.readouterr().out)
    return run
