"""A process becomes a dict in one place: the same keys and forms from the facts and from the kill module."""

from __future__ import annotations

import datetime
import os

from ansible_collections.gpuops.hygiene.plugins.module_utils import _procfs, _snapshot


def process(pid=4242, cgroups=("/lxc/200/ns",), nspid=(4242, 17), start_ticks=0):
    return _procfs.Process(pid=pid, ppid=1, pgid=pid, sid=pid, state="S", comm="python3",
                           argv=("python3", "-m", "vllm.entrypoints.openai.api_server"), start_ticks=start_ticks,
                           flags=0, threads=1, uid=0, nspid=nspid, cgroups=cgroups)


def test_start_time_is_utc_to_the_second_with_z():
    booted_at = 1796084040.0  # 2026-12-01T00:14:00Z
    record = _procfs.process_record(process(start_ticks=61 * _procfs.CLOCK_TICKS), booted_at)
    assert record["start_time"] == "2026-12-01T00:15:01Z"
    parsed = datetime.datetime.strptime(record["start_time"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.timezone.utc)
    assert parsed.timestamp() == booted_at + 61


def test_record_keys_and_container_scope():
    record = _procfs.process_record(process(), 0.0)
    assert tuple(record) == _procfs.RECORD_KEYS
    assert record["container"] == {"runtime": "lxc", "id": "200"} and record["vmid"] == "200"
    assert record["namespace_pid"] == 17 and record["name"] == "python3"


def test_a_docker_container_has_no_vmid():
    record = _procfs.process_record(process(cgroups=("/system.slice/docker-" + "a" * 64 + ".scope",)), 0.0)
    assert record["container"] is not None and record["container"]["runtime"] != "lxc"
    assert record["vmid"] is None


def test_the_facts_holder_carries_the_same_record():
    seen = process()
    holder = _snapshot.Holder(pid=seen.pid, process=seen, listed_by_driver=True, used_mib={0: 512})
    facts = holder.to_dict(1796084040.0, _procfs.PROC)
    assert {key: facts[key] for key in _procfs.RECORD_KEYS} == _procfs.process_record(seen, 1796084040.0)
    assert facts["state"] == "S" and facts["wchan"] is None


def test_a_holder_in_another_pid_namespace_has_every_key_empty():
    holder = _snapshot.Holder(pid=os.getpid(), process=None, reported_name="python3", listed_by_driver=True)
    facts = holder.to_dict(0.0, _procfs.PROC)
    assert facts["pid"] == os.getpid() and facts["name"] == "python3" and facts["visible"] is False
    assert all(facts[key] is None for key in _procfs.RECORD_KEYS if key not in ("pid", "name"))


def test_a_huge_command_line_is_shortened_in_the_record_saying_how_much_was_left_out():
    """A tenant's process with 200,000 characters of argv (the kernel allows megabytes): the record keeps its leading
    whole words and says how many more there were; the process itself is read whole."""
    import subprocess  # pylint: disable=import-outside-toplevel
    import sys  # pylint: disable=import-outside-toplevel
    padding = [f"--flag-{index:05d}=" + "x" * 90 for index in range(2000)]
    # It says when it runs: right after exec its command line may not be set up yet.
    child = subprocess.Popen([sys.executable, "-c", "import time; print('ready', flush=True); time.sleep(60)", *padding],
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline() == "ready\n"
        seen = _procfs.read_process(child.pid, "/proc")
        assert seen is not None and len(seen.cmdline) > 200_000 and seen.argv[-1] == padding[-1]
        record = _procfs.process_record(seen, 0.0)
        kept = record["cmdline"].rpartition(" ... (+")[0]
        assert len(record["cmdline"]) <= _procfs.RECORD_CMDLINE_CHARS + 30 and seen.cmdline.startswith(kept)
        left_out = len(seen.cmdline.split()) - len(kept.split())
        assert record["cmdline"].endswith(f" ... (+{left_out} words)")
    finally:
        child.kill()
        child.wait()
