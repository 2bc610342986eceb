"""A fake libnvidia-ml.so.1 (tests/simulator/nvml/fake_nvml.c) and the real nvidia-ml-py binding, for simulated hosts.

build(os.path.join(paths.LIB, "nvml")) puts, where every simulated host sees them
(/run/gpusim/lib/nvml inside):

    libnvidia-ml.so.1    compiled from fake_nvml.c: answers NVML calls by running the host's nvidia-smi
    python/pynvml.py     the nvidia-ml-py binding installed in the running interpreter (pure Python)

A module run with LD_LIBRARY_PATH=/run/gpusim/lib/nvml and PYTHONPATH=/run/gpusim/lib/nvml/python
then reads the simulated GPUs through the real binding.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import tempfile
import typing as t

from gpusim import paths

SOURCE = os.path.join(os.path.dirname(paths.PACKAGE_DIR), "nvml", "fake_nvml.c")
LIBRARY = "libnvidia-ml.so.1"
BINDING = "pynvml"
CFLAGS = ("-shared", "-fPIC", "-O2", "-Wall", "-Wextra", "-fvisibility=hidden", "-Wl,-soname," + LIBRARY)


class BuildError(Exception):
    """The fake library or the binding could not be put in place."""


def binding_source() -> str:
    """Where the running interpreter imports pynvml (nvidia-ml-py) from."""
    spec = importlib.util.find_spec(BINDING)
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        raise BuildError("the nvidia-ml-py binding (pynvml) is not installed in this interpreter "
                         "(pip install nvidia-ml-py)")
    return spec.origin


def _outdated(target: str, source: str) -> bool:
    try:
        return os.path.getmtime(target) < os.path.getmtime(source)
    except OSError:
        return True


def _replace(target: str, write: t.Callable[[str], object], mode: int) -> None:
    """Write through a temporary file beside the target, then rename: a host never sees half a file."""
    folder = os.path.dirname(target)
    handle, temporary = tempfile.mkstemp(dir=folder, prefix=".building-")
    os.close(handle)
    try:
        write(temporary)
        os.chmod(temporary, mode)
        os.replace(temporary, target)
    finally:
        if os.path.exists(temporary):
            os.unlink(temporary)


def _compile(target: str) -> None:
    def write(temporary: str) -> None:
        compiler = shutil.which("gcc") or shutil.which("cc")
        if compiler is None:
            raise BuildError("no C compiler (gcc) to build the fake libnvidia-ml")
        completed = subprocess.run([compiler, *CFLAGS, "-o", temporary, SOURCE, "-lpthread"],
                                   capture_output=True, text=True, check=False)
        if completed.returncode != 0:
            raise BuildError(f"compiling {SOURCE} failed:\n{completed.stdout}{completed.stderr}")
    _replace(target, write, 0o755)


def build(output_dir: str) -> str:
    """Compile the fake library into output_dir and copy the binding beside it (each only if outdated)."""
    python_dir = os.path.join(output_dir, "python")
    os.makedirs(python_dir, exist_ok=True)
    library = os.path.join(output_dir, LIBRARY)
    if _outdated(library, SOURCE):
        _compile(library)
    binding = binding_source()
    copy = os.path.join(python_dir, BINDING + ".py")
    if _outdated(copy, binding) or os.path.getsize(copy) != os.path.getsize(binding):
        _replace(copy, lambda temporary: shutil.copyfile(binding, temporary), 0o644)
    return output_dir
