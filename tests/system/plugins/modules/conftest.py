"""Run a module's main() in-process with real arguments and return its JSON result."""

from __future__ import annotations

import json

import pytest
from ansible.module_utils.testing import patch_module_args


@pytest.fixture
def run_module(capsys):
    def run(main, args: dict) -> dict:
        with patch_module_args(args):
            with pytest.raises(SystemExit):
                main()
        return json.loads(capsys.readouterr().out)
    return run
