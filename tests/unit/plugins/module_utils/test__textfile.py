"""node_exporter's textfile directory: the file is replaced through a rename, the collector never reads a partial
or temporary *.prom file, and what cannot be written is said in one line."""

from __future__ import annotations

import os
import stat

import pytest

from ansible_collections.gpuops.hygiene.plugins.module_utils import _textfile
from ansible_collections.gpuops.hygiene.plugins.module_utils._errors import GpuOpsError


def test_the_file_is_replaced_whole_and_no_temporary_file_ends_in_prom(tmp_path, monkeypatch):
    seen = []
    rename = os.rename

    def watching(source, target):
        # At the moment of the rename, what would the collector read (every *.prom of the directory)?
        seen.append((os.path.basename(source), sorted(name for name in os.listdir(tmp_path) if name.endswith(".prom"))))
        rename(source, target)

    monkeypatch.setattr(os, "rename", watching)
    assert _textfile.write(str(tmp_path), "gpuops_hygiene_gpu-1.prom", "a 1\n") is True
    assert _textfile.write(str(tmp_path), "gpuops_hygiene_gpu-1.prom", "a 2\n") is True
    assert (tmp_path / "gpuops_hygiene_gpu-1.prom").read_text() == "a 2\n"
    assert stat.S_IMODE((tmp_path / "gpuops_hygiene_gpu-1.prom").stat().st_mode) == 0o644
    assert [temporary for temporary, _listed in seen if temporary.endswith(".prom")] == []
    assert seen[1][1] == ["gpuops_hygiene_gpu-1.prom"], "the old file stays whole until the new one replaces it"
    assert sorted(os.listdir(tmp_path)) == ["gpuops_hygiene_gpu-1.prom"]
    assert _textfile.write(str(tmp_path), "gpuops_hygiene_gpu-1.prom", "a 2\n") is False


def test_a_failed_write_leaves_no_temporary_file(tmp_path, monkeypatch):
    def failing(_source, _target):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "rename", failing)
    with pytest.raises(GpuOpsError, match="No space left on device"):
        _textfile.write(str(tmp_path), "gpuops_hygiene_h.prom", "a 1\n")
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("name", ["../x.prom", "x.txt", ".hidden.prom", "a/b.prom"])
def test_only_a_plain_prom_name_is_written(tmp_path, name):
    with pytest.raises(GpuOpsError, match="plain name ending in .prom"):
        _textfile.write(str(tmp_path), name, "a 1\n")


def test_a_missing_directory_is_one_line(tmp_path):
    with pytest.raises(GpuOpsError) as error:
        _textfile.write(str(tmp_path / "missing"), "x.prom", "a 1\n")
    assert str(error.value) == f"textfile directory {tmp_path / 'missing'} cannot be used: No such file or directory"


def test_a_host_name_becomes_a_safe_file_name():
    assert _textfile.file_name("gpu-b01.example") == "gpuops_hygiene_gpu-b01.example.prom"
    assert _textfile.file_name("../../etc/x y") == "gpuops_hygiene_.._.._etc_x_y.prom"
