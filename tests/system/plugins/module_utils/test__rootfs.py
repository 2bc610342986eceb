"""Paths under a root someone else controls: confined, never through a link, tmpfs only (needs root for mounts)."""

from __future__ import annotations

import os
import socket
import subprocess

import pytest

from ansible_collections.gpuops.hygiene.plugins.module_utils import _rootfs
from ansible_collections.gpuops.hygiene.plugins.module_utils._errors import GpuOpsError


@pytest.fixture
def root(tmp_path):
    """A fake container root with a tmpfs /dev/shm, and a file of 'the node' outside it."""
    (tmp_path / "root" / "dev" / "shm").mkdir(parents=True)
    (tmp_path / "node").mkdir()
    (tmp_path / "node" / "nccl-node").write_text("keep")
    shm = tmp_path / "root" / "dev" / "shm"
    subprocess.run(["mount", "-t", "tmpfs", "tmpfs", str(shm)], check=True)
    yield tmp_path
    subprocess.run(["umount", "-l", str(shm)], check=False)


def test_a_tmpfs_is_opened_and_its_entries_are_read_without_following_links(root):
    shm = root / "root" / "dev" / "shm"
    (shm / "nccl-a").write_text("x")
    (shm / "nccl-link").symlink_to(root / "node" / "nccl-node")
    (shm / "nccl-dir").mkdir()
    socket.socket(socket.AF_UNIX).bind(str(shm / "nccl-sock"))
    with _rootfs.TmpfsDir(str(root / "root"), "/dev/shm") as directory:
        kinds = {name: directory.entry(name).kind for name in directory.names()}
        assert kinds == {"nccl-a": "file", "nccl-link": "symlink", "nccl-dir": "directory", "nccl-sock": "socket"}
        entry = directory.entry("nccl-a")
        assert entry.links == 1 and entry.identity == (os.stat(shm / "nccl-a").st_dev, os.stat(shm / "nccl-a").st_ino)
        directory.unlink("nccl-link")
        assert directory.entry("nccl-link") is None
    assert (root / "node" / "nccl-node").read_text() == "keep"


def test_an_absolute_symlink_in_place_of_the_directory_is_refused(root):
    subprocess.run(["umount", str(root / "root" / "dev" / "shm")], check=True)
    (root / "root" / "dev" / "shm").rmdir()
    (root / "root" / "dev" / "shm").symlink_to(root / "node")
    with pytest.raises(GpuOpsError, match="symbolic link: refused"):
        _rootfs.TmpfsDir(str(root / "root"), "/dev/shm")


def test_a_symlinked_component_and_dotdot_stay_inside_the_root(root):
    (root / "root" / "lnk").symlink_to("dev")
    with pytest.raises(GpuOpsError, match="symbolic link: refused"):
        _rootfs.open_confined(str(root / "root"), "/lnk/shm")
    # '..' above the root lands on the root itself (RESOLVE_IN_ROOT), never on the node's directories.
    fd = _rootfs.open_confined(str(root / "root"), "/../../../dev/shm")
    try:
        assert os.fstat(fd).st_ino == os.stat(root / "root" / "dev" / "shm").st_ino
    finally:
        os.close(fd)
    with pytest.raises(GpuOpsError, match="cannot open"):
        _rootfs.open_confined(str(root / "root"), "/../node")


def test_a_directory_that_is_not_a_tmpfs_is_refused(root):
    (root / "root" / "data").mkdir()
    with pytest.raises(GpuOpsError, match="is not a tmpfs: refused"):
        _rootfs.TmpfsDir(str(root / "root"), "/data")


def test_without_a_known_openat2_the_read_is_refused_not_done_unsafely(root, monkeypatch):
    monkeypatch.setattr(_rootfs.platform, "machine", lambda: "mips")
    with pytest.raises(GpuOpsError, match="refusing to follow the container's paths"):
        _rootfs.TmpfsDir(str(root / "root"), "/dev/shm")


def test_a_missing_openat2_syscall_is_refused(root, monkeypatch):
    monkeypatch.setattr(_rootfs, "OPENAT2_SYSCALL", {_rootfs.platform.machine(): 100_000})  # answers ENOSYS
    with pytest.raises(GpuOpsError, match="no openat2"):
        _rootfs.TmpfsDir(str(root / "root"), "/dev/shm")
