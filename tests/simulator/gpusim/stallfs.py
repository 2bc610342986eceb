"""A FUSE filesystem that can stall: a network filesystem whose server stops answering.

`python3 -m gpusim.stallfs MOUNTPOINT` mounts it with plain mount(2) on /dev/fuse (no
libfuse) and answers the kernel: every name in the root is the same empty regular
file, attributes are never cached (every stat() asks the daemon). SIGSTOP the daemon
and every stat() of a file there, also through /proc/PID/fd/N, waits in the kernel
until the daemon runs again (SIGCONT) or dies; readlink() of /proc/PID/fd/N does not.
It prints "ready" once mounted.
"""

from __future__ import annotations

import ctypes
import errno
import os
import struct
import sys

IN_HEADER = struct.Struct("<IIQQIIII")
OUT_HEADER = struct.Struct("<IiQ")
LOOKUP, FORGET, GETATTR, OPEN, READ, RELEASE, FLUSH, INIT, OPENDIR, READDIR, RELEASEDIR, BATCH_FORGET = (
    1, 2, 3, 14, 15, 18, 25, 26, 27, 28, 29, 42)
NO_REPLY = (FORGET, BATCH_FORGET, 36)  # 36: INTERRUPT
ROOT, FILE = 1, 2


def attr(node: int) -> bytes:
    mode = 0o40755 if node == ROOT else 0o100644
    # ino, size, blocks, atime, mtime, ctime, 3 x nsec, mode, nlink, uid, gid, rdev, blksize, flags
    return struct.pack("<QQQQQQIIIIIIIIII", node, 0, 0, 0, 0, 0, 0, 0, 0, mode, 1, 0, 0, 0, 4096, 0)


def answer(opcode: int, node: int, body: bytes) -> tuple[int, bytes]:
    if opcode == INIT:
        major, minor = struct.unpack_from("<II", body)
        return 0, struct.pack("<IIIIHHIIHHI7I", 7, min(minor, 31), 0, 0, 16, 12, 65536, 1, 0, 0, 0, *[0] * 7)
    if opcode == LOOKUP:
        return 0, struct.pack("<QQQQII", FILE, 0, 0, 0, 0, 0) + attr(FILE)
    if opcode == GETATTR:
        return 0, struct.pack("<QII", 0, 0, 0) + attr(node)
    if opcode in (OPEN, OPENDIR):
        return 0, struct.pack("<QII", 0, 0, 0)
    if opcode in (READ, READDIR, RELEASE, RELEASEDIR, FLUSH):
        return 0, b""
    return -errno.ENOSYS, b""


def mount(target: str) -> int:
    fd = os.open("/dev/fuse", os.O_RDWR)
    libc = ctypes.CDLL(None, use_errno=True)
    options = f"fd={fd},rootmode=40000,user_id=0,group_id=0".encode()
    if libc.mount(b"stallfs", target.encode(), b"fuse", ctypes.c_ulong(0x2 | 0x4), options) != 0:  # nosuid, nodev
        raise OSError(ctypes.get_errno(), "mount of the FUSE filesystem failed", target)
    return fd


def serve(fd: int) -> None:
    while True:
        try:
            request = os.read(fd, 1 << 20)
        except OSError as error:
            if error.errno == errno.ENODEV:  # unmounted
                return
            if error.errno in (errno.EINTR, errno.ENOENT):
                continue
            raise
        _length, opcode, unique, node, _uid, _gid, _pid, _pad = IN_HEADER.unpack_from(request)
        if opcode in NO_REPLY:
            continue
        error, body = answer(opcode, node, request[IN_HEADER.size:])
        try:
            os.write(fd, OUT_HEADER.pack(OUT_HEADER.size + len(body), error, unique) + body)
        except OSError:
            continue  # the request was interrupted meanwhile


def main() -> None:
    fd = mount(sys.argv[1])
    print("ready", flush=True)
    serve(fd)


if __name__ == "__main__":
    main()
