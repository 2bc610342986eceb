"""A fake nvidia-smi: the query interface of the real one, printed the way the real one prints it.

Supported: --query-gpu and --query-compute-apps with --format=csv[,noheader][,nounits],
-i/--id (index, UUID or PCI bus id, comma-separated), -L/--list-gpus, -r/--gpu-reset,
--version. Field names, aliases, header units and the values of fields the
simulator does not model come from real captures (captures/README.md).
"""

from __future__ import annotations

import datetime
import os
import sys
import time

from gpusim import catalog as catalogs
from gpusim.world import DriverUnavailable, World, driver_request, load

DRIVER_NOT_LOADED = ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
                     "Make sure that the latest NVIDIA driver is installed and running.\n\n")
RESET_IN_USE_TAIL = ("currently being used by one or more other processes (e.g., Fabric Manager, CUDA "
                     "application, graphics application such as an X server, or a monitoring application such "
                     "as another instance of nvidia-smi). Please first kill all processes using this device and "
                     "all compute applications running in the system.\n")
REQUIRES_RESET = "[GPU requires reset]"
# Fields whose value stays readable on a GPU that requires a reset.
IDENTITY_FIELDS = frozenset({"timestamp", "driver_version", "count", "name", "serial", "uuid", "pci.bus_id",
                             "pci.domain", "pci.bus", "pci.device", "index", "gpu_recovery_action"})

EXIT_INVALID_ARGUMENT = 2
EXIT_NOT_FOUND = 6
EXIT_DRIVER_NOT_LOADED = 9
EXIT_GPU_LOST = 15
EXIT_VERSION_MISMATCH = 18
EXIT_OTHER = 255
# The longest a held --query-compute-apps call waits for its release (hold_until_released): a bound, never a hang.
HOLD_LIMIT_S = 4.0
# The files next to the fault's path that say the call is held, and that a helper has released it.
HELD, RELEASED = ".held", ".released"


def hold_until_released(marker: str) -> None:
    """The fault hold_process_query: announce that the call runs (MARKER.held), then wait until a helper inside the
    host releases it (MARKER.released) or HOLD_LIMIT_S passes. A helper acting in the window between a module's
    /proc snapshot and its signals gets the window for as long as it needs (up to the bound), however busy the
    machine: a fixed hang_s is a race the helper can lose under load."""
    with open(marker + HELD, "w", encoding="utf-8"):
        pass
    deadline = time.monotonic() + HOLD_LIMIT_S
    while not os.path.exists(marker + RELEASED) and time.monotonic() < deadline:
        time.sleep(0.005)


class Usage(Exception):
    """A command line the real nvidia-smi would refuse."""


def _timestamp() -> str:
    now = datetime.datetime.now()
    return now.strftime("%Y/%m/%d %H:%M:%S.") + f"{now.microsecond // 1000:03d}"


def nvml_version(driver_version: str) -> str:
    """NVML's version is the driver's first two components: 590.48.01 -> 590.48, 595.80 -> 595.80."""
    return ".".join(driver_version.split(".")[:2])


def _handle_text(gpu: dict) -> str:
    """How the driver names a GPU whose handle it cannot get: GPU0000:3A:00.0."""
    return "GPU" + gpu["bus_id"][4:]


def parse_args(argv: list[str]) -> dict:
    options: dict = {"ids": None, "format": None}
    args = list(argv)
    while args:
        arg = args.pop(0)
        name, eq, value = arg.partition("=")
        takes_value = name in ("--query-gpu", "--query-compute-apps", "--format", "-i", "--id")
        if takes_value and not eq:
            if not args:
                raise Usage(f"ERROR: Option {name} requires a value. Please run 'nvidia-smi -h'.")
            value = args.pop(0)
        if name in ("-L", "--list-gpus"):
            options["mode"] = "list"
        elif name in ("-r", "--gpu-reset"):
            options["mode"] = "reset"
        elif name == "--version":
            options["mode"] = "version"
        elif name == "--query-gpu":
            options.update(mode="query-gpu", fields=value)
        elif name == "--query-compute-apps":
            options.update(mode="query-apps", fields=value)
        elif name == "--format":
            options["format"] = set(value.split(","))
        elif name in ("-i", "--id"):
            options["ids"] = value.split(",")
        else:
            raise Usage(f"ERROR: Option {arg} is not recognized. Please run 'nvidia-smi -h'.")
    if "mode" not in options:
        raise Usage("gpusim: only the query interface of nvidia-smi is simulated "
                    "(--query-gpu, --query-compute-apps, -L, -r, --version)")
    if options["mode"].startswith("query") and (not options["format"] or "csv" not in options["format"]):
        raise Usage("ERROR: --format=csv is mandatory with --query-gpu and --query-compute-apps. "
                    "Please run 'nvidia-smi -h'.")
    return options


def select(gpus: list[dict], ids: list[str] | None) -> list[dict]:
    if ids is None:
        return gpus
    chosen = []
    for wanted in ids:
        wanted = wanted.strip()
        for gpu in gpus:
            bus = gpu["bus_id"]
            if wanted in (str(gpu["index"]), gpu["uuid"], bus, bus[4:], bus[9:]) and gpu not in chosen:
                chosen.append(gpu)
    return chosen


def _strip_unit(value: str, unit: str | None) -> str:
    if unit and value.endswith(" " + unit):
        return value[: -len(unit) - 1]
    return value


def gpu_values(world: World, gpu: dict, count: int, catalog: catalogs.Catalog) -> dict[str, str]:
    index, physical = gpu["index"], gpu["physical"]
    busy = any(process["gpu"] == physical for process in world.processes)
    values = dict(catalog.load if busy else catalog.idle)
    profile = world.profile
    used = world.used_mib[physical]
    usable = profile.memory_total_mib - profile.memory_reserved_mib
    bus = gpu["bus_id"]
    values.update({
        "timestamp": _timestamp(),
        "driver_version": profile.driver_version,
        "count": str(count),
        "name": profile.product_name,
        "serial": gpu["serial"],
        "uuid": gpu["uuid"],
        "pci.bus_id": bus,
        "pci.domain": "0x" + bus[:8][-4:],
        "pci.bus": "0x" + bus[9:11],
        "pci.device": "0x" + bus[12:14],
        "index": str(index),
        "persistence_mode": world.persistence_mode,
        "memory.total": f"{profile.memory_total_mib} MiB",
        "memory.reserved": f"{profile.memory_reserved_mib} MiB",
        "memory.used": f"{used} MiB",
        # Every capture shows free = total - reserved - used + 1 (rounding in the driver).
        "memory.free": f"{usable - used + 1 if used < usable else 0} MiB",
    })
    if values.get("mig.mode.current") not in ("[N/A]", None):
        mode = "Enabled" if profile.mig else "Disabled"
        values["mig.mode.current"] = values["mig.mode.pending"] = mode
    if physical in world.fault("requires_reset", []):
        values.update({name: REQUIRES_RESET for name in values if name not in IDENTITY_FIELDS})
        values["gpu_recovery_action"] = "Reset"
    values.update(world.fault("tokens", {}))
    return values


def query_gpus(world: World, options: dict, check_devices: bool) -> tuple[str, int]:
    catalog = catalogs.gpu_catalog(world.profile.capture)
    requested = [name.strip() for name in options["fields"].split(",") if name.strip()]
    unsupported = set(world.fault("unsupported_fields", []))
    fields = []
    for name in requested:
        canonical = catalog.canonical(name)
        if canonical is None or canonical in unsupported:
            return f'Field "{name}" is not a valid field to query.\n\n', EXIT_INVALID_ARGUMENT
        fields.append(canonical)
    listed = world.listed_gpus(check_devices)
    gpus = select(listed, options["ids"])
    if not gpus:
        return "No devices were found\n", EXIT_NOT_FOUND
    lost = set(world.fault("lost_gpus", []))
    nounits = "nounits" in options["format"]
    lines = [] if "noheader" in options["format"] else [", ".join(catalog.header(name) for name in fields)]
    for gpu in gpus:
        if gpu["physical"] in lost:
            lines.append(f"Unable to determine the device handle for {_handle_text(gpu)}: Unknown Error")
            continue
        values = gpu_values(world, gpu, len(listed), catalog)
        row = [values.get(name, "[N/A]") for name in fields]
        if nounits:
            row = [_strip_unit(value, catalog.units.get(name)) for name, value in zip(fields, row)]
        lines.append(", ".join(row))
    code = EXIT_GPU_LOST if any(gpu["physical"] in lost for gpu in gpus) else 0
    return "".join(line + "\n" for line in lines), code


def query_processes(world: World, options: dict, check_devices: bool) -> tuple[str, int]:
    catalog = catalogs.process_catalog(world.profile.capture)
    fields = []
    for name in (name.strip() for name in options["fields"].split(",") if name.strip()):
        canonical = catalog.canonical(name)
        if canonical is None:
            return f'Field "{name}" is not a valid field to query.\n\n', EXIT_INVALID_ARGUMENT
        fields.append(canonical)
    gpus = select(world.listed_gpus(check_devices), options["ids"])
    if not gpus:
        return "No devices were found\n", EXIT_NOT_FOUND
    lost = set(world.fault("lost_gpus", []))
    by_physical = {gpu["physical"]: gpu for gpu in gpus}
    nounits = "nounits" in options["format"]
    tokens = world.fault("process_tokens", {})
    lines = [] if "noheader" in options["format"] else [", ".join(catalog.header(name) for name in fields)]
    stamp = _timestamp()
    for gpu in gpus:
        if gpu["physical"] in lost:
            lines.append(f"Unable to determine the device handle for {_handle_text(gpu)}: Unknown Error")
    for process in sorted(world.processes, key=lambda entry: (entry["gpu"], entry["pid"])):
        gpu = by_physical.get(process["gpu"])
        if gpu is None or gpu["physical"] in lost:
            continue
        values = {
            "timestamp": stamp,
            "gpu_name": world.profile.product_name,
            "gpu_bus_id": gpu["bus_id"],
            "gpu_serial": gpu["serial"],
            "gpu_uuid": gpu["uuid"],
            "pid": str(process["pid"]),
            "process_name": process["name"],
            "used_gpu_memory": f"{process['mib']} MiB",
        }
        values.update(tokens)
        row = [values[name] for name in fields]
        if nounits:
            row = [_strip_unit(value, catalog.units.get(name)) for name, value in zip(fields, row)]
        lines.append(", ".join(row))
    code = EXIT_GPU_LOST if any(gpu["physical"] in lost for gpu in gpus) else 0
    return "".join(line + "\n" for line in lines), code


def list_gpus(world: World, options: dict, check_devices: bool) -> tuple[str, int]:
    gpus = select(world.listed_gpus(check_devices), options["ids"])
    if not gpus:
        return "No devices were found\n", EXIT_NOT_FOUND
    lost = set(world.fault("lost_gpus", []))
    lines = []
    for gpu in gpus:
        if gpu["physical"] in lost:
            lines.append(f"Unable to determine the device handle for {_handle_text(gpu)}: Unknown Error")
            continue
        lines.append(f"GPU {gpu['index']}: {world.profile.product_name} (UUID: {gpu['uuid']})")
        for number, device in enumerate(world.profile.mig_devices):
            label = f"MIG {device}".ljust(16)
            lines.append(f"  {label}Device  {number}: (UUID: MIG-{gpu['uuid'][4:12]}-{number:04d}"
                         f"-0000-0000-{number:012d})")
    code = EXIT_GPU_LOST if any(gpu["physical"] in lost for gpu in gpus) else 0
    return "".join(line + "\n" for line in lines), code


def reset(world: World, options: dict, check_devices: bool) -> tuple[str, int]:
    gpus = select(world.listed_gpus(check_devices), options["ids"])
    if not gpus:
        return "No devices were found\n", EXIT_NOT_FOUND
    refused = []
    done = []
    for gpu in gpus:
        answer = driver_request({"op": "reset", "gpu": gpu["physical"]})
        (done if answer.get("ok") else refused).append(gpu)
    if refused:
        lines = ["The following GPUs could not be reset:"]
        lines += [f"  GPU {gpu['bus_id']}: In use by another client" for gpu in refused]
        noun = "device is" if len(refused) == 1 else "devices are"
        return ("\n".join(lines) + f"\n\n{len(refused)} {noun} " + RESET_IN_USE_TAIL), EXIT_OTHER
    return "".join(f"GPU {gpu['bus_id']} was successfully reset.\n" for gpu in done), 0


def _open_devices(world: World, check_devices: bool) -> list[int]:
    """The real tool keeps the control and GPU device files open while it runs."""
    fds = []
    if not check_devices:
        return fds
    for path in ["/dev/nvidiactl"] + [f"/dev/nvidia{gpu['minor']}" for gpu in world.gpus]:
        try:
            fds.append(os.open(path, os.O_RDONLY))
        except OSError:
            continue
    return fds


def main(argv: list[str]) -> int:
    try:
        options = parse_args(argv)
    except Usage as error:
        print(error)
        return EXIT_INVALID_ARGUMENT
    try:
        world, check_devices = load()
    except DriverUnavailable:
        sys.stdout.write(DRIVER_NOT_LOADED)
        return EXIT_DRIVER_NOT_LOADED
    hang = float(world.fault("hang_s", 0) or 0)
    if hang:
        time.sleep(hang)
    marker = world.fault("hold_process_query")
    if marker and options["mode"] == "query-apps":
        hold_until_released(marker)
    if world.fault("driver_not_loaded"):
        sys.stdout.write(DRIVER_NOT_LOADED)
        return EXIT_DRIVER_NOT_LOADED
    if world.fault("version_mismatch"):
        sys.stdout.write("Failed to initialize NVML: Driver/library version mismatch\n"
                         f"NVML library version: {nvml_version(world.profile.driver_version)}\n")
        return EXIT_VERSION_MISMATCH
    fds = _open_devices(world, check_devices)
    if options["mode"] == "version":
        driver = world.profile.driver_version
        output, code = (f"NVIDIA-SMI version  : {driver}\nNVML version        : {nvml_version(driver)}\n"
                        f"DRIVER version      : {driver}\nCUDA Version        : {world.profile.cuda_version}\n"), 0
    else:
        handler = {"query-gpu": query_gpus, "query-apps": query_processes, "list": list_gpus, "reset": reset}
        output, code = handler[options["mode"]](world, options, check_devices)
    sys.stdout.write(output)
    sys.stdout.flush()
    for fd in fds:
        os.close(fd)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
