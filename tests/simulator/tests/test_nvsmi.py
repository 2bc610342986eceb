"""The fake nvidia-smi in static mode: byte for byte what the real captures show, and every failure shape."""

from __future__ import annotations

import datetime
import json
import os
import re
import shlex
import subprocess
import sys
import threading
import time

import pytest

from gpusim import nvsmi, paths
from gpusim.profiles import PROFILES, gpu_identities
from gpusim.testing import wait_until

SIMULATOR = os.path.dirname(paths.PACKAGE_DIR)
# The simulator runs inside hosts with the system interpreter; test it with that one.
PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
# Capture folders that back a profile of the same name.
CAPTURED = ["h100-80gb-hbm3", "h200", "h100-mig", "h200-mig", "l40s"]
APPS_FIELDS = "timestamp,gpu_name,gpu_bus_id,gpu_serial,gpu_uuid,pid,process_name,used_gpu_memory"
TIMESTAMP = re.compile(r"^\d{4}/\d{2}/\d{2} \d{2}:\d{2}:\d{2}\.\d{3}$")
DRIVER_NOT_LOADED = ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
                     "Make sure that the latest NVIDIA driver is installed and running.\n\n")
# PCI buses of gpu_identities(), in index order.
BUSES = ["18", "2A", "3A", "5D", "9A", "AB", "BA", "DB"]


# --- helpers -----------------------------------------------------------------------------------------


def capture_text(folder: str, name: str) -> str:
    with open(os.path.join(paths.CAPTURES, folder, name), encoding="utf-8") as handle:
        return handle.read()


def capture_rows(folder: str, name: str) -> tuple[str, list[str], list[list[str]]]:
    """Header line, column names (units dropped) and the value rows of a captured CSV section."""
    lines = capture_text(folder, name).splitlines()
    names = [column.split(" [")[0] for column in lines[0].split(", ")]
    return lines[0], names, [line.split(", ") for line in lines[1:] if line]


def capture_gpu(folder: str, phase: str) -> dict[str, str]:
    _header, names, rows = capture_rows(folder, f"query-gpu-{phase}.csv")
    assert len(rows) == 1 and len(rows[0]) == len(names)
    return dict(zip(names, rows[0]))


def mib(value: str) -> int:
    number, unit = value.split(" ")
    assert unit == "MiB", value
    return int(number)


def capture_world(folder: str, phase: str = "load") -> dict:
    """A one-GPU world with the capture's identity whose memory.used equals the capture's.

    The load world holds the capture's processes (pids, names, MiB) and leaks the
    part of memory.used that no process accounts for (the driver's own contexts).
    """
    row = capture_gpu(folder, phase)
    gpu = {"index": 0, "minor": 0, "uuid": row["uuid"], "serial": row["serial"], "bus_id": row["pci.bus_id"]}
    world = {"profile": folder, "gpus": [gpu], "processes": [], "persistence_mode": row["persistence_mode"]}
    if phase == "load":
        _header, _names, rows = capture_rows(folder, "query-compute-apps-load.csv")
        world["processes"] = [{"gpu": 0, "pid": int(values[5]), "name": values[6], "mib": mib(values[7])}
                              for values in rows]
        held = sum(process["mib"] for process in world["processes"])
        world["leaked"] = {"0": mib(row["memory.used"]) - PROFILES[folder].idle_used_mib - held}
    return world


def eight_gpu_world(profile: str = "h200", **extra) -> dict:
    return dict({"profile": profile, "gpus": gpu_identities("nvsmi-test", 8), "processes": []}, **extra)


@pytest.fixture
def smi(tmp_path):
    """Run the fake nvidia-smi (static mode) on a world; return the completed process."""
    def run(world: dict, *args: str, timeout: float = 30) -> subprocess.CompletedProcess:
        state = tmp_path / "world.json"
        state.write_text(json.dumps(world))
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": SIMULATOR, "GPUSIM_STATE": str(state)}
        return subprocess.run([PYTHON, "-m", "gpusim.nvsmi", *args], env=env, capture_output=True, text=True,
                              timeout=timeout, check=False)
    return run


def query_args(folder: str) -> list[str]:
    argv = shlex.split(capture_text(folder, "query-gpu.command"))
    assert argv[0] == "nvidia-smi"
    return argv[1:]


def ok(result: subprocess.CompletedProcess) -> list[str]:
    assert result.returncode == 0, (result.returncode, result.stdout, result.stderr)
    assert result.stderr == ""
    return result.stdout.splitlines()


def csv_rows(result: subprocess.CompletedProcess) -> list[list[str]]:
    return [line.split(", ") for line in ok(result)]


def with_timestamp(text: str, stamp: str) -> str:
    """A captured CSV section with every row's leading timestamp replaced."""
    lines = text.splitlines(keepends=True)
    return lines[0] + "".join(stamp + line[len(stamp):] if TIMESTAMP.match(line[:23]) else line for line in lines[1:])


# --- the captures themselves ----------------------------------------------------------------------------


def test_every_profile_named_after_a_capture_is_covered():
    folders = sorted(name for name in os.listdir(paths.CAPTURES) if os.path.isdir(os.path.join(paths.CAPTURES, name)))
    assert sorted(key for key in PROFILES if key in folders) == sorted(CAPTURED)
    for key in CAPTURED:
        assert PROFILES[key].capture == key


@pytest.mark.parametrize("folder", CAPTURED)
def test_profile_numbers_are_the_captures(folder):
    profile = PROFILES[folder]
    idle = capture_gpu(folder, "idle")
    assert idle["name"] == profile.product_name
    assert idle["driver_version"] == profile.driver_version
    assert mib(idle["memory.total"]) == profile.memory_total_mib
    assert mib(idle["memory.reserved"]) == profile.memory_reserved_mib
    assert mib(idle["memory.used"]) == profile.idle_used_mib
    assert (idle["mig.mode.current"] == "Enabled") == profile.mig
    assert profile.estimated == ()
    for phase in ("idle", "load"):
        row = capture_gpu(folder, phase)
        # The rule the simulator applies: free = total - reserved - used + 1.
        assert mib(row["memory.free"]) == (mib(row["memory.total"]) - mib(row["memory.reserved"])
                                           - mib(row["memory.used"]) + 1)


# --- --query-gpu, byte for byte --------------------------------------------------------------------------


@pytest.mark.parametrize("phase", ["idle", "load"])
@pytest.mark.parametrize("folder", CAPTURED)
def test_query_gpu_prints_the_capture_byte_for_byte(smi, folder, phase):
    result = smi(capture_world(folder, phase), *query_args(folder))
    lines = ok(result)
    expected = capture_text(folder, f"query-gpu-{phase}.csv")
    header, names, rows = capture_rows(folder, f"query-gpu-{phase}.csv")
    assert lines[0] == header
    assert len(lines) == 2
    fake = dict(zip(names, lines[1].split(", ")))
    assert len(lines[1].split(", ")) == len(names)
    differ = {name: (value, fake[name]) for name, value in zip(names, rows[0]) if fake[name] != value}
    assert set(differ) == {"timestamp"}, differ
    assert TIMESTAMP.match(fake["timestamp"])
    stamp = datetime.datetime.strptime(fake["timestamp"], "%Y/%m/%d %H:%M:%S.%f")
    assert abs((datetime.datetime.now() - stamp).total_seconds()) < 60
    assert result.stdout == with_timestamp(expected, fake["timestamp"])


@pytest.mark.parametrize("folder", CAPTURED)
def test_query_gpu_on_a_host_of_eight_keeps_every_value_but_the_identity(smi, folder):
    world = eight_gpu_world(folder, processes=[{"gpu": 3, "pid": 100, "name": "python3", "mib": 1000}],
                            persistence_mode=capture_gpu(folder, "idle")["persistence_mode"])
    lines = ok(smi(world, *query_args(folder)))
    header, names, _rows = capture_rows(folder, "query-gpu-idle.csv")
    assert lines[0] == header and len(lines) == 9
    identity = {"timestamp", "count", "serial", "uuid", "pci.bus_id", "pci.bus", "pci.device", "index", "memory.used",
                "memory.free"}
    profile = PROFILES[folder]
    for index, line in enumerate(lines[1:]):
        fake = dict(zip(names, line.split(", ")))
        captured = capture_gpu(folder, "load" if index == 3 else "idle")
        assert {name for name in names if fake[name] != captured[name]} <= identity
        gpu = world["gpus"][index]
        assert (fake["index"], fake["count"], fake["uuid"], fake["serial"]) == (str(index), "8", gpu["uuid"], gpu["serial"])
        assert (fake["pci.bus_id"], fake["pci.domain"], fake["pci.bus"], fake["pci.device"]) == \
            (f"00000000:{BUSES[index]}:00.0", "0x0000", f"0x{BUSES[index]}", "0x00")
        used = profile.idle_used_mib + (1000 if index == 3 else 0)
        assert fake["memory.used"] == f"{used} MiB"
        assert fake["memory.free"] == f"{profile.memory_total_mib - profile.memory_reserved_mib - used + 1} MiB"


# --- --query-compute-apps, -L, --version ---------------------------------------------------------------------


@pytest.mark.parametrize("folder", CAPTURED)
def test_query_compute_apps_prints_the_capture_byte_for_byte(smi, folder):
    world = capture_world(folder, "load")
    result = smi(world, f"--query-compute-apps={APPS_FIELDS}", "--format=csv")
    ok(result)
    stamp = result.stdout.splitlines()[1][:23]
    assert TIMESTAMP.match(stamp)
    assert result.stdout == with_timestamp(capture_text(folder, "query-compute-apps-load.csv"), stamp)
    # The same world reports the capture's memory.used and memory.free.
    rows = csv_rows(smi(world, "--query-gpu=memory.used,memory.free", "--format=csv,noheader"))
    gpu = dict(zip(["memory.used", "memory.free"], rows[0]))
    captured = capture_gpu(folder, "load")
    assert gpu == {"memory.used": captured["memory.used"], "memory.free": captured["memory.free"]}


@pytest.mark.parametrize("folder", CAPTURED)
def test_query_compute_apps_of_an_idle_gpu_is_the_header_alone(smi, folder):
    result = smi(capture_world(folder, "idle"), f"--query-compute-apps={APPS_FIELDS}", "--format=csv")
    ok(result)
    assert result.stdout == capture_text(folder, "query-compute-apps-idle.csv")


@pytest.mark.parametrize("folder", [folder for folder in CAPTURED if not PROFILES[folder].mig])
def test_list_gpus_is_the_capture(smi, folder):
    result = smi(capture_world(folder, "idle"), "-L")
    ok(result)
    assert result.stdout == capture_text(folder, "list.txt")


MIG_UUID = r"MIG-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"


@pytest.mark.parametrize("folder", [folder for folder in CAPTURED if PROFILES[folder].mig])
def test_list_gpus_with_mig_has_the_captures_shape(smi, folder):
    result = smi(capture_world(folder, "idle"), "--list-gpus")
    lines = ok(result)
    expected = capture_text(folder, "list.txt").splitlines()
    assert lines[0] == expected[0]
    assert len(lines) == len(expected) == 1 + len(PROFILES[folder].mig_devices)
    shape = re.compile(r"^  MIG (\S+) +Device +(\d+): \(UUID: (" + MIG_UUID + r")\)$")
    for number, (line, real) in enumerate(zip(lines[1:], expected[1:])):
        fake_match, real_match = shape.match(line), shape.match(real)
        assert real_match and fake_match, (line, real)
        assert fake_match.group(1, 2) == real_match.group(1, 2) == (PROFILES[folder].mig_devices[number], str(number))
        # Same columns: only the UUID differs (the capture's were masked).
        assert line.replace(fake_match.group(3), "MIG-UUID") == real.replace(real_match.group(3), "MIG-UUID")
    assert len({shape.match(line).group(3) for line in lines[1:]}) == len(lines) - 1


def test_list_gpus_on_eight_gpus_and_by_id(smi):
    world = eight_gpu_world("h100-80gb-hbm3")
    lines = ok(smi(world, "-L"))
    assert lines == [f"GPU {index}: NVIDIA H100 80GB HBM3 (UUID: {gpu['uuid']})" for index, gpu in enumerate(world["gpus"])]
    assert ok(smi(world, "-L", "-i", "6")) == [lines[6]]


@pytest.mark.parametrize("folder", CAPTURED)
def test_version_is_the_capture(smi, folder):
    result = smi(capture_world(folder, "idle"), "--version")
    ok(result)
    assert result.stdout == capture_text(folder, "version.txt")


# --- format options and field names ------------------------------------------------------------------------


@pytest.mark.parametrize("folder", CAPTURED)
def test_nounits_strips_units_and_keeps_bracketed_tokens(smi, folder):
    header, names, rows = capture_rows(folder, "query-gpu-load.csv")
    args = [arg.replace("--format=csv", "--format=csv,nounits") for arg in query_args(folder)]
    lines = ok(smi(capture_world(folder, "load"), *args))
    assert lines[0] == header, "nounits keeps the units in the header"
    fake = dict(zip(names, lines[1].split(", ")))
    units = dict(column.rstrip("]").split(" [") for column in header.split(", ") if " [" in column)
    stripped = 0
    for name, value in zip(names, rows[0]):
        if name == "timestamp":
            continue
        if name in units and value.endswith(" " + units[name]):
            assert fake[name] == value[: -len(units[name]) - 1]
            stripped += 1
        else:
            assert fake[name] == value, name
    assert stripped > 20
    assert fake["memory.used"] == str(mib(capture_gpu(folder, "load")["memory.used"]))
    assert "[Requested functionality has been deprecated]" in fake.values() and "[N/A]" in fake.values()


def test_noheader_nounits_on_both_queries(smi):
    world = capture_world("h200", "load")
    assert ok(smi(world, "--query-gpu=index,memory.used,memory.total,pcie.link.gen.hostmax",
                  "--format=csv,noheader,nounits")) == ["0, 32362, 143771, [N/A]"]
    assert ok(smi(world, "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits")) == \
        ["10291, 2566", "10293, 1542", "10309, 28234"]
    assert ok(smi(world, "--query-gpu=memory.used", "--format=csv,noheader")) == ["32362 MiB"]
    assert ok(smi(world, "--query-gpu=memory.used", "--format=csv")) == ["memory.used [MiB]", "32362 MiB"]


def test_field_aliases_print_the_canonical_header(smi):
    world = capture_world("h100-80gb-hbm3", "load")
    lines = ok(smi(world, "--query-gpu=gpu_name,gpu_uuid,gpu_bus_id,gpu_serial,inforom.image,"
                   "clocks_throttle_reasons.supported", "--format=csv"))
    assert lines[0] == "name, uuid, pci.bus_id, serial, inforom.img, clocks_event_reasons.supported"
    captured = capture_gpu("h100-80gb-hbm3", "load")
    names = ("name", "uuid", "pci.bus_id", "serial", "inforom.img", "clocks_event_reasons.supported")
    assert lines[1].split(", ") == [captured[name] for name in names]
    lines = ok(smi(world, "--query-compute-apps=pid,name,used_memory", "--format=csv"))
    assert lines == ["pid, process_name, used_gpu_memory [MiB]", "11327, /root/tools/memhog, 2566 MiB",
                     "11328, /root/tools/memhog, 1542 MiB", "11345, ./gpu_burn, 15690 MiB"]


@pytest.mark.parametrize("query", ["--query-gpu=index,bogus,memory.used", "--query-compute-apps=pid,bogus"])
def test_unknown_field_is_refused(smi, query):
    result = smi(eight_gpu_world(), query, "--format=csv")
    assert result.returncode == 2
    assert result.stdout == 'Field "bogus" is not a valid field to query.\n\n'


def test_a_field_of_another_driver_is_unknown(smi):
    # kmd_version exists in the L40S capture (595.80) but not in the H200 one (590.48.01).
    assert ok(smi(eight_gpu_world("l40s"), "--query-gpu=kmd_version", "--format=csv,noheader"))[0] != ""
    result = smi(eight_gpu_world("h200"), "--query-gpu=kmd_version", "--format=csv,noheader")
    assert (result.returncode, result.stdout) == (2, 'Field "kmd_version" is not a valid field to query.\n\n')


@pytest.mark.parametrize("args", [["--bogus"], ["-x", "--query-gpu=index", "--format=csv"]])
def test_unknown_option_exits_2(smi, args):
    result = smi(eight_gpu_world(), *args)
    assert result.returncode == 2
    assert result.stdout == f"ERROR: Option {args[0]} is not recognized. Please run 'nvidia-smi -h'.\n"


@pytest.mark.parametrize("args", [["--query-gpu=index"], ["--query-gpu=index", "--format=xml"], ["-i"]])
def test_incomplete_queries_exit_2(smi, args):
    result = smi(eight_gpu_world(), *args)
    assert result.returncode == 2 and result.stdout.startswith("ERROR: ")


# --- selecting GPUs ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("selector", ["3", "GPU-{uuid}", "00000000:5D:00.0", "0000:5D:00.0", "5D:00.0"])
def test_select_one_gpu(smi, selector):
    world = eight_gpu_world()
    wanted = world["gpus"][3]
    selector = selector.replace("GPU-{uuid}", wanted["uuid"])
    for args in (["-i", selector], [f"--id={selector}"], ["--id", selector]):
        assert csv_rows(smi(world, "--query-gpu=index,uuid,pci.bus_id", "--format=csv,noheader", *args)) == \
            [["3", wanted["uuid"], wanted["bus_id"]]]


def test_select_a_list_of_gpus(smi):
    world = eight_gpu_world(processes=[{"gpu": 1, "pid": 11, "name": "a", "mib": 10},
                                       {"gpu": 2, "pid": 12, "name": "b", "mib": 20},
                                       {"gpu": 5, "pid": 15, "name": "c", "mib": 50}])
    rows = csv_rows(smi(world, "--query-gpu=index,count", "--format=csv,noheader", "-i", "1,5"))
    assert rows == [["1", "8"], ["5", "8"]]
    rows = csv_rows(smi(world, "--query-gpu=index", "--format=csv,noheader", "-i", f"{world['gpus'][7]['uuid']},0"))
    assert sorted(rows) == [["0"], ["7"]]
    assert csv_rows(smi(world, "--query-compute-apps=pid,used_memory", "--format=csv,noheader", "-i", "1,5")) == \
        [["11", "10 MiB"], ["15", "50 MiB"]]


@pytest.mark.parametrize("selector", ["8", "GPU-00000000-0000-0000-0000-000000000000", "00000000:01:00.0"])
@pytest.mark.parametrize("query", [["--query-gpu=index", "--format=csv"], ["--query-compute-apps=pid", "--format=csv"],
                                   ["-L"]])
def test_no_such_gpu(smi, selector, query):
    result = smi(eight_gpu_world(), *query, "-i", selector)
    assert (result.returncode, result.stdout) == (6, "No devices were found\n")


# --- faults ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("args", [["--query-gpu=index", "--format=csv"], ["-L"], ["--version"]])
def test_driver_not_loaded(smi, args):
    result = smi(eight_gpu_world(faults={"driver_not_loaded": True}), *args)
    assert (result.returncode, result.stdout) == (9, DRIVER_NOT_LOADED)


@pytest.mark.parametrize("profile, nvml", [("h200", "590.48"), ("l40s", "595.80")])
def test_version_mismatch(smi, profile, nvml):
    result = smi(eight_gpu_world(profile, faults={"version_mismatch": True}), "--query-gpu=index", "--format=csv")
    assert result.returncode == 18
    assert result.stdout == f"Failed to initialize NVML: Driver/library version mismatch\nNVML library version: {nvml}\n"


def test_lost_gpu_prints_an_error_line_in_place_of_its_row(smi):
    world = eight_gpu_world(faults={"lost_gpus": [2]}, processes=[{"gpu": 2, "pid": 7, "name": "x", "mib": 5},
                                                                  {"gpu": 4, "pid": 9, "name": "y", "mib": 6}])
    result = smi(world, "--query-gpu=index,pci.bus_id", "--format=csv,noheader")
    assert result.returncode == 15
    lost = "Unable to determine the device handle for GPU0000:3A:00.0: Unknown Error"
    assert result.stdout.splitlines() == [f"{index}, 00000000:{BUSES[index]}:00.0" if index != 2 else lost
                                          for index in range(8)]
    result = smi(world, "-L")
    assert result.returncode == 15 and result.stdout.splitlines()[2] == lost and len(result.stdout.splitlines()) == 8
    result = smi(world, "--query-compute-apps=pid", "--format=csv,noheader")
    assert (result.returncode, result.stdout.splitlines()) == (15, [lost, "9"])
    assert ok(smi(world, "--query-gpu=index", "--format=csv,noheader", "-i", "3")) == ["3"]


def test_missing_gpu_shifts_the_indexes_after_it(smi):
    world = eight_gpu_world(faults={"missing_gpus": [5]}, processes=[{"gpu": 6, "pid": 3, "name": "z", "mib": 64}])
    rows = csv_rows(smi(world, "--query-gpu=index,count,pci.bus_id,memory.used", "--format=csv,noheader,nounits"))
    buses = [bus for number, bus in enumerate(BUSES) if number != 5]
    assert rows == [[str(index), "7", f"00000000:{bus}:00.0", "64" if bus == "BA" else "0"]
                    for index, bus in enumerate(buses)]
    assert len(ok(smi(world, "-L"))) == 7
    assert ok(smi(world, "--query-gpu=pci.bus_id", "--format=csv,noheader", "-i", "5")) == ["00000000:BA:00.0"]
    assert ok(smi(world, "--query-compute-apps=pid,gpu_bus_id", "--format=csv,noheader")) == ["3, 00000000:BA:00.0"]


def test_gpu_that_requires_reset(smi):
    world = eight_gpu_world(faults={"requires_reset": [6]})
    lines = ok(smi(world, "--query-gpu=index,uuid,pci.bus_id,name,memory.used,memory.total,temperature.gpu,"
                   "gpu_recovery_action", "--format=csv,noheader,nounits"))
    gpu = world["gpus"][6]
    assert lines[6] == (f"6, {gpu['uuid']}, {gpu['bus_id']}, NVIDIA H200, [GPU requires reset], "
                        "[GPU requires reset], [GPU requires reset], Reset")
    assert lines[5].split(", ")[4:6] == ["0", "143771"] and lines[5].endswith(", None")


def test_tokens_replace_values_and_survive_nounits(smi):
    world = eight_gpu_world(faults={"tokens": {"memory.used": "[Insufficient Permissions]"},
                                    "process_tokens": {"used_gpu_memory": "[N/A]"}},
                            processes=[{"gpu": 0, "pid": 10, "name": "a", "mib": 1}])
    rows = csv_rows(smi(world, "--query-gpu=index,memory.used,memory.total", "--format=csv,noheader,nounits"))
    assert rows == [[str(index), "[Insufficient Permissions]", "143771"] for index in range(8)]
    assert ok(smi(world, "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits")) == ["10, [N/A]"]


def test_unsupported_fields_are_not_valid(smi):
    world = eight_gpu_world(faults={"unsupported_fields": ["memory.reserved"]})
    result = smi(world, "--query-gpu=index,memory.reserved", "--format=csv")
    assert (result.returncode, result.stdout) == (2, 'Field "memory.reserved" is not a valid field to query.\n\n')
    assert ok(smi(world, "--query-gpu=index", "--format=csv,noheader"))[0] == "0"


def test_hang_blocks_until_killed(smi):
    started = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired):
        smi(eight_gpu_world(faults={"hang_s": 3600}), "--query-gpu=index", "--format=csv", timeout=1.5)
    assert time.monotonic() - started < 10


def test_short_hang_then_answers(smi):
    started = time.monotonic()
    lines = ok(smi(eight_gpu_world(faults={"hang_s": 0.6}), "--query-gpu=index", "--format=csv,noheader"))
    assert time.monotonic() - started >= 0.6
    assert lines == [str(index) for index in range(8)]


def test_held_process_query_waits_for_its_release(smi, tmp_path):
    marker = str(tmp_path / "held")
    released_at = []

    def release_once_held():
        wait_until(lambda: os.path.exists(marker + nvsmi.HELD), timeout=20, message="the held query")
        time.sleep(0.5)
        released_at.append(time.monotonic())
        open(marker + nvsmi.RELEASED, "w", encoding="utf-8").close()
    helper = threading.Thread(target=release_once_held)
    helper.start()
    result = smi(eight_gpu_world(faults={"hold_process_query": marker}), "--query-compute-apps=pid",
                 "--format=csv,noheader")
    answered_at = time.monotonic()  # before the join: an answer that did not wait comes before the release
    helper.join()
    assert ok(result) == [] and released_at and answered_at >= released_at[0]


def test_hold_spares_the_gpu_query_and_ends_at_its_bound(smi, tmp_path):
    marker = str(tmp_path / "held")
    world = eight_gpu_world(faults={"hold_process_query": marker})
    assert len(ok(smi(world, "--query-gpu=index", "--format=csv,noheader"))) == 8
    assert not os.path.exists(marker + nvsmi.HELD)
    started = time.monotonic()
    assert ok(smi(world, "--query-compute-apps=pid", "--format=csv,noheader")) == []
    assert nvsmi.HOLD_LIMIT_S <= time.monotonic() - started < nvsmi.HOLD_LIMIT_S + 10
    assert os.path.exists(marker + nvsmi.HELD)


def test_persistence_mode_follows_the_world(smi):
    assert set(ok(smi(eight_gpu_world(), "--query-gpu=persistence_mode", "--format=csv,noheader"))) == {"Enabled"}
    world = eight_gpu_world(persistence_mode="Disabled")
    assert set(ok(smi(world, "--query-gpu=persistence_mode", "--format=csv,noheader"))) == {"Disabled"}


def test_rtx_pro_6000_profile_uses_the_h200_catalog_with_its_own_identity(smi):
    profile = PROFILES["rtx-pro-6000-blackwell"]
    world = eight_gpu_world("rtx-pro-6000-blackwell")
    lines = ok(smi(world, *query_args("h200")))
    header, names, _rows = capture_rows("h200", "query-gpu-idle.csv")
    assert lines[0] == header
    row = dict(zip(names, lines[1].split(", ")))
    assert (row["name"], row["driver_version"], row["memory.total"], row["memory.used"], row["memory.free"]) == \
        ("NVIDIA RTX PRO 6000 Blackwell Server Edition", "580.105.06", "97887 MiB", "0 MiB", "97276 MiB")
    assert profile.estimated
    assert ok(smi(world, "--version")) == ["NVIDIA-SMI version  : 580.105.06", "NVML version        : 580.105",
                                           "DRIVER version      : 580.105.06", "CUDA Version        : 13.0"]
