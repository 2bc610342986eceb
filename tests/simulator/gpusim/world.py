"""The world a fake nvidia-smi reports on: GPUs, faults, and what the driver says is allocated."""

from __future__ import annotations

import json
import os
import socket

from gpusim import paths
from gpusim.profiles import PROFILES, Profile


class DriverUnavailable(Exception):
    """The simulated driver did not answer (the host is being torn down)."""


def driver_request(request: dict, socket_path: str = paths.DRIVER_SOCKET, timeout: float = 5.0) -> dict:
    """One request to a host's simulated driver, one JSON answer."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(timeout)
            conn.connect(socket_path)
            conn.sendall(json.dumps(request).encode() + b"\n")
            data = b""
            while not data.endswith(b"\n"):
                chunk = conn.recv(65536)
                if not chunk:
                    break
                data += chunk
    except OSError as error:
        raise DriverUnavailable(f"{socket_path}: {error}") from error
    if not data:
        raise DriverUnavailable(f"{socket_path}: no answer")
    return json.loads(data)


def _load_json(path: str, default: dict) -> dict:
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except FileNotFoundError:
        return default


class World:
    """What the driver knows now. A plain class: the fake nvidia-smi builds one per call (no dataclasses import)."""

    def __init__(self, profile: Profile, gpus: list[dict], faults: dict, processes: list[dict],
                 used_mib: dict[int, int], persistence_mode: str = "Enabled") -> None:
        self.profile = profile
        self.gpus = gpus              # identity of every GPU the driver knows: index, minor, uuid, serial, bus_id
        self.faults = faults
        self.processes = processes    # live holders: gpu, pid, mib, name
        self.used_mib = used_mib      # gpu index -> memory in use
        self.persistence_mode = persistence_mode

    def fault(self, name: str, default=None):
        return self.faults.get(name, default)

    def listed_gpus(self, check_devices: bool) -> list[dict]:
        """GPUs this nvidia-smi enumerates: not missing, and (inside a container) passed through.

        Enumeration numbers them from 0 in PCI order, as NVML does: a GPU that is
        missing (or not passed into a container) shifts the indexes after it.
        Each entry keeps the driver's own index as `physical`.
        """
        missing = set(self.fault("missing_gpus", []))
        listed = []
        for gpu in self.gpus:
            if gpu["index"] in missing:
                continue
            if check_devices and not os.path.exists(f"/dev/nvidia{gpu['minor']}"):
                continue
            listed.append(dict(gpu, index=len(listed), physical=gpu["index"]))
        return listed


def load() -> tuple[World, bool]:
    """The current world, and whether device files decide which GPUs are visible."""
    static = os.environ.get("GPUSIM_STATE")
    if static:
        state = _load_json(static, {})
        profile = PROFILES[state["profile"]]
        used = {gpu["index"]: profile.idle_used_mib for gpu in state["gpus"]}
        for gpu, mib in state.get("leaked", {}).items():
            used[int(gpu)] += mib
        for process in state.get("processes", []):
            used[process["gpu"]] += process["mib"]
        return World(profile, state["gpus"], state.get("faults", {}), state.get("processes", []), used,
                     state.get("persistence_mode", "Enabled")), False

    config = _load_json(paths.HOST_CONFIG, {})
    profile = PROFILES[config["profile"]]
    faults = _load_json(paths.FAULTS, {})
    answer = driver_request({"op": "state"})
    used = {gpu["index"]: profile.idle_used_mib for gpu in config["gpus"]}
    for gpu, mib in answer["used_mib"].items():
        used[int(gpu)] += mib
    return World(profile, config["gpus"], faults, answer["processes"], used,
                 config.get("persistence_mode", "Enabled")), True
