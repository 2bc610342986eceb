"""The managed-host requirements: one sentence for an old Python or kernel, nothing for a supported host."""

from __future__ import annotations

import os
import subprocess

import pytest

from ansible_collections.gpuops.hygiene.plugins.module_utils._errors import GpuOpsError
from ansible_collections.gpuops.hygiene.plugins.module_utils._platform import REQUIREMENTS, check_host


@pytest.mark.parametrize("python, system, release, found", [
    ((3, 8), "Linux", "6.1.0-18-amd64", "Python 3.8 on Linux 6.1.0-18-amd64"),
    ((3, 6, 15), "Linux", "6.1.0", "Python 3.6 on Linux 6.1.0"),
    ((3, 11), "Linux", "5.2.21", "Python 3.11 on Linux 5.2.21"),
    ((3, 11), "Linux", "4.18.0-553.el8_10.x86_64", "Python 3.11 on Linux 4.18.0-553.el8_10.x86_64"),
    ((3, 11), "FreeBSD", "14.1-RELEASE", "Python 3.11 on FreeBSD 14.1-RELEASE"),
    ((3, 11), "Linux", "unparsable", "Python 3.11 on Linux unparsable"),
])
def test_an_unsupported_host_gets_the_requirements_sentence(python, system, release, found):
    with pytest.raises(GpuOpsError) as raised:
        check_host(python, system, release)
    assert str(raised.value) == f"{REQUIREMENTS}; found {found}"


@pytest.mark.parametrize("python, release", [((3, 9), "5.3.0"), ((3, 13), "6.12.9+bpo-amd64"), ((3, 11), "5.10.0-35")])
def test_a_supported_host_passes(python, release):
    check_host(python, "Linux", release)


def test_this_host_passes_as_it_is():
    check_host()


def test_a_real_python_3_8_gets_the_sentence():
    """The check itself imports and runs on Python 3.8, which ansible-core 2.17 to 2.19 still manage."""
    python38 = subprocess.run(["sh", "-c", "PYENV_VERSION=3.8.18 pyenv which python3.8"], capture_output=True,
                              text=True, check=False).stdout.strip()
    if not python38:
        pytest.skip("no Python 3.8 here")
    collections = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", "output", "collections"))
    code = ("from ansible_collections.gpuops.hygiene.plugins.module_utils._platform import check_host\n"
            "from ansible_collections.gpuops.hygiene.plugins.module_utils._errors import GpuOpsError\n"
            "try:\n    check_host()\nexcept GpuOpsError as error:\n    print(error)\n")
    ran = subprocess.run([python38, "-c", code], capture_output=True, text=True, check=False, timeout=60,
                         env={"PYTHONPATH": collections, "PATH": os.environ.get("PATH", "")})
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.startswith(REQUIREMENTS + "; found Python 3.8 on Linux ")
