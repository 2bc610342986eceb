"""Real LXC containers (Debian's lxc, liblxc 5) inside a simulated Proxmox node, configured as pve-container does.

The container's processes live in nested namespaces of the node, so the node's /proc, its /dev/nvidia* (passed by
bind mount, as `lxc.mount.entry` lines for GPU passthrough do) and its simulated driver are theirs, exactly as with
gpusim's own containers (fleet.create_container), but everything else is liblxc's: the monitor
`[lxc monitor] /var/lib/lxc VMID`, the cgroups `lxc/VMID/ns` and `lxc.monitor/VMID` (pve-container's keys
`lxc.cgroup.dir.*`, src/PVE/LXC.pm update_lxc_config), ID mapping for unprivileged containers (Proxmox's default
`u 0 100000 65536`), autodev, and `lxc-attach`, which is what `pct exec` runs (pve-container src/PVE/CLI/pct.pm:
`lxc-attach -n VMID --keep-env -- CMD`; the node's `pct` double does the same for these containers).

liblxc finds the cgroup hierarchies through the mounts under /sys/fs/cgroup. A node has a cgroup namespace of its
own, but those mounts are the machine's, rooted at the machine's root cgroup, so liblxc would put the container at
/lxc/VMID of the whole machine, outside the node. Every lxc-* command therefore runs through `tool`: in a mount
namespace of its own where the node's hierarchies (unified, systemd, pids: the ones a node's processes are in) are
mounted again from inside the node's cgroup namespace, which roots them at the node's cgroup, and where the other
v1 controllers are not mounted at all. The container then lands in gpusim/<node>/lxc/VMID/ns, seen from the node
as /lxc/VMID/ns, and is removed with the node.
"""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import subprocess
import sys
import time
import typing as t

from gpusim import fleet, namespaces, paths

LXC_PATH = "/var/lib/lxc"
# Proxmox's default ID map for unprivileged containers (pct create --unprivileged 1).
IDMAP_BASE = 100000
IDMAP_SIZE = 65536
BUSYBOX = "/bin/busybox"
_APPLETS = ("sh", "init", "sleep", "ps", "cat", "ls", "rm", "mv", "ln", "mkdir", "umount", "mount", "chmod", "touch",
            "echo", "id", "kill", "grep", "true", "false", "env", "stat", "readlink", "mknod")
# The hierarchies a node's processes are in (gpusim/<node>), mounted again rooted at the node's cgroup.
_OWN_HIERARCHIES = {"unified": ("cgroup2", ""), "systemd": ("cgroup", "none,name=systemd"), "pids": ("cgroup", "pids")}
_MS_REC, _MS_PRIVATE = 0x4000, 1 << 18
_MNT_DETACH = 2
_PROC_DRIVER = "/proc/driver"


class LxcError(Exception):
    pass


def _libc() -> t.Any:
    return ctypes.CDLL(None, use_errno=True)


def _mount(source: str, target: str, fstype: str | None, flags: int, data: str | None) -> None:
    if _libc().mount(source.encode(), target.encode(), fstype.encode() if fstype else None, ctypes.c_ulong(flags),
                     data.encode() if data else None) != 0:
        error = ctypes.get_errno()
        raise OSError(error, f"mount {target}: {os.strerror(error)}")


def _cgroup_mounts() -> list[str]:
    with open("/proc/self/mountinfo", encoding="utf-8") as handle:
        points = [line.split()[4] for line in handle]
    return [point for point in points if point.startswith(paths.CGROUP_BASE + "/")]


def tool(argv: list[str]) -> t.NoReturn:
    """Inside a node: exec an lxc-* command with the node's cgroup hierarchies rooted at the node (see above)."""
    namespaces.unshare(namespaces.CLONE_NEWNS)
    _mount("none", "/", None, _MS_REC | _MS_PRIVATE, None)
    for point in sorted(_cgroup_mounts(), key=len, reverse=True):
        if _libc().umount2(point.encode(), _MNT_DETACH) != 0:
            raise OSError(ctypes.get_errno(), f"umount {point}")
    for name, (fstype, options) in _OWN_HIERARCHIES.items():
        _mount("cgroup", f"{paths.CGROUP_BASE}/{name}", fstype, 0, options or None)
    # The node's /proc/driver is a tmpfs over procfs (gpusim.init): the kernel lets a user namespace (an
    # unprivileged container) mount a proc only where no mount hides a part of proc, so it goes in this namespace.
    if os.path.ismount(_PROC_DRIVER):
        _libc().umount2(_PROC_DRIVER.encode(), _MNT_DETACH)
    os.execvp(argv[0], argv)


def tool_argv(argv: t.Sequence[str]) -> list[str]:
    return [fleet.PYTHON, "-m", "gpusim.lxc", "tool", "--", *argv]


def config_text(vmid: str, gpu_minors: t.Sequence[int], privileged: bool) -> str:
    """The container's config: pve-container's cgroup and ID-map keys, a busybox rootfs, the node's GPUs bound in."""
    rootfs = f"{LXC_PATH}/{vmid}/rootfs"
    lines = [
        # pve-container (src/PVE/LXC.pm, update_lxc_config) for LXC >= 4.
        "lxc.cgroup.relative = 0",
        f"lxc.cgroup.dir.monitor = lxc.monitor/{vmid}",
        f"lxc.cgroup.dir.container = lxc/{vmid}",
        "lxc.cgroup.dir.container.inner = ns",
        "lxc.arch = amd64",
        f"lxc.uts.name = ct{vmid}",
        f"lxc.rootfs.path = dir:{rootfs}",
        # liblxc mounts the rootfs at /usr/lib/<arch>/lxc/rootfs by default: a mount below /usr, which would make the
        # bind of /usr below (non-recursive) fail in a user namespace, as the kernel hides locked submounts.
        f"lxc.rootfs.mount = {LXC_PATH}/{vmid}/mnt",
        # What this machine needs: no network device, no AppArmor, no ttys (a minimal rootfs has no /dev/lxc).
        "lxc.net.0.type = empty",
        "lxc.apparmor.profile = unconfined",
        "lxc.tty.max = 0",
        "lxc.pty.max = 16",
        "lxc.autodev = 1",
        "lxc.init.cmd = /sbin/init",
        "lxc.mount.auto = proc:mixed sys:mixed",
        # The node's interpreter and libraries, read-only: a fake server runs /usr/bin/python3 with an exact argv.
        # Recursive: the node's /usr/local/sbin is a mount of its own, and a user namespace may bind a tree only with
        # its submounts. The container's tools (nvidia-smi, systemctl; no pct) go over it, as in gpusim's containers.
        "lxc.mount.entry = /usr usr none ro,rbind 0 0",
        f"lxc.mount.entry = {paths.INSIDE}/bin-container usr/local/sbin none ro,bind 0 0",
        "lxc.mount.entry = /lib lib none ro,bind 0 0",
        "lxc.mount.entry = /lib64 lib64 none ro,bind,optional 0 0",
        # The simulator's state: the driver's socket, the simulator's library, the worlds' records.
        f"lxc.mount.entry = {paths.INSIDE} run/gpusim none rbind,create=dir 0 0",
        "lxc.mount.entry = tmpfs dev/shm tmpfs rw,nosuid,nodev,mode=1777,create=dir 0 0",
        "lxc.mount.entry = tmpfs tmp tmpfs rw,nosuid,nodev,mode=1777 0 0",
    ]
    # GPU passthrough as the Proxmox documentation writes it: the node's device files, bound in by name.
    for name in ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset", *(f"nvidia{m}" for m in gpu_minors)):
        lines.append(f"lxc.mount.entry = /dev/{name} dev/{name} none bind,optional,create=file")
    if not privileged:
        lines += [f"lxc.idmap = u 0 {IDMAP_BASE} {IDMAP_SIZE}", f"lxc.idmap = g 0 {IDMAP_BASE} {IDMAP_SIZE}"]
    return "\n".join(lines) + "\n"


def _prepare(vmid: str, gpu_minors: list[int], privileged: bool) -> None:
    """Inside the node: /var/lib/lxc of the node's own (a tmpfs), the busybox rootfs, the config."""
    if not os.path.ismount(LXC_PATH):
        os.makedirs(LXC_PATH, exist_ok=True)
        subprocess.run(["mount", "-t", "tmpfs", "-o", "mode=755,size=64m", "tmpfs", LXC_PATH], check=True)
    directory = f"{LXC_PATH}/{vmid}"
    rootfs = f"{directory}/rootfs"
    os.makedirs(f"{directory}/mnt", exist_ok=True)
    for sub in ("bin", "sbin", "dev", "proc", "sys", "tmp", "usr", "lib", "lib64", "etc", "run", "root", "var"):
        os.makedirs(f"{rootfs}/{sub}", exist_ok=True)
    shutil.copy2(BUSYBOX, f"{rootfs}/bin/busybox")
    for applet in _APPLETS:
        os.symlink("busybox", f"{rootfs}/bin/{applet}")
    os.symlink("../bin/busybox", f"{rootfs}/sbin/init")
    # The driver's tools installed in the container itself, as Proxmox's guides for GPUs in a container do (the
    # NVIDIA installer run inside with --no-kernel-module): its root's files. The node's own, bound in below
    # /usr/local/sbin, belong to an unmapped root (nobody) in an unprivileged container, which root there never runs.
    tools = f"{paths.INSIDE}/bin-container"
    for tool in sorted(os.listdir(tools)):
        shutil.copy2(os.path.join(tools, tool), f"{rootfs}/sbin/{tool}")
    with open(f"{rootfs}/etc/passwd", "w", encoding="ascii") as handle:
        handle.write("root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n")
    with open(f"{rootfs}/etc/group", "w", encoding="ascii") as handle:
        handle.write("root:x:0:\nnogroup:x:65534:\n")
    if not privileged:
        for root, dirs, files in os.walk(rootfs):
            for name in [root, *(os.path.join(root, entry) for entry in dirs + files)]:
                os.lchown(name, IDMAP_BASE, IDMAP_BASE)
    with open(f"{directory}/config", "w", encoding="ascii") as handle:
        handle.write(config_text(vmid, gpu_minors, privileged))


def _start(vmid: str) -> int:
    """Inside the node: lxc-start, wait until it runs; the container init's PID as the node sees it."""
    log = f"{LXC_PATH}/{vmid}/start.log"
    started = subprocess.run(tool_argv(["lxc-start", "-n", vmid, "-l", "WARN", "-o", log]), capture_output=True,
                             text=True, check=False)
    if started.returncode != 0:
        with open(log, encoding="utf-8", errors="replace") as handle:
            raise LxcError(f"lxc-start {vmid} failed ({started.returncode}): {started.stderr}{handle.read()}")
    deadline = time.monotonic() + fleet.READY_TIMEOUT_S
    while time.monotonic() < deadline:
        info = subprocess.run(tool_argv(["lxc-info", "-n", vmid, "-s", "-p"]), capture_output=True, text=True,
                              check=False)
        fields = dict(line.split(":", 1) for line in info.stdout.splitlines() if ":" in line)
        if fields.get("State", "").strip() == "RUNNING" and fields.get("PID", "").strip().isdigit():
            return int(fields["PID"])
        time.sleep(0.05)
    raise LxcError(f"container {vmid} did not reach RUNNING within {fleet.READY_TIMEOUT_S:.0f} s")


def is_lxc(vmid: str) -> bool:
    """Inside a node: whether the container is a real LXC container (not gpusim's imitation)."""
    return os.path.exists(f"{LXC_PATH}/{vmid}/config")


def create_container(node: str, vmid: str, gpu_minors: t.Sequence[int] | None = None, privileged: bool = True) -> int:
    """A real LXC container on a simulated Proxmox node; returns its init's PID as the node sees it.

    It is registered like gpusim's containers (containers/VMID/ under the node's state), so `pct`, the inventory and
    fleet.run(..., container=VMID) reach it, through lxc-attach."""
    config = fleet.host_config(node)
    if not config["proxmox"]:
        raise fleet.SimulatorError(f"{node} is not a Proxmox node")
    minors = [gpu["minor"] for gpu in config["gpus"]] if gpu_minors is None else list(gpu_minors)
    directory = paths.container_dir(node, str(vmid))
    os.makedirs(directory)
    with open(os.path.join(directory, "container.json"), "w", encoding="utf-8") as handle:
        json.dump({"vmid": str(vmid), "gpu_minors": minors, "engine": "lxc", "privileged": privileged}, handle)
    result = fleet.run(node, [fleet.PYTHON, "-m", "gpusim.lxc", "create", str(vmid), json.dumps(minors),
                              "1" if privileged else "0"], timeout=60)
    pid = int(result.stdout.strip())
    with open(os.path.join(directory, "init.pid"), "w", encoding="ascii") as handle:
        handle.write(str(pid))
    return pid


def main(argv: list[str]) -> int:
    if argv[:1] == ["tool"]:
        tool(argv[2:] if argv[1:2] == ["--"] else argv[1:])
    if argv[:1] == ["create"] and len(argv) == 4:
        _prepare(argv[1], json.loads(argv[2]), argv[3] == "1")
        print(_start(argv[1]))
        return 0
    raise SystemExit("usage: python3 -m gpusim.lxc tool -- LXC-COMMAND... | create VMID MINORS-JSON PRIVILEGED")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
