"""Worlds that broke an invariant, kept as they were shrunk: each must break none once its class is closed.

A world of an open class (known.py) is marked xfail(strict=True): it fails with the violation of that class today,
and turns into a pass, failing its strict marker, once the fix lands (then the marker and the class in known.py go).
Any violation outside the world's own class is never excused: it raises UnexpectedViolation, which no xfail takes.
"""

from __future__ import annotations

from gpusim.hostile import Action, Container, Plant, Proc, Run, World, realize

from invariants import check_all, hard_limits

FACTS = Run("gpu_memory_facts", {"backend": "nvidia_smi", "facts_timeout": 5.0})
CONMON = ["/usr/bin/conmon", "--api-version", "1", "-c", "3ea752c1cce6", "-u", "3ea752c1cce6", "-r", "/usr/bin/crun",
          "-b", "/var/lib/containers/storage/overlay-containers/3ea752c1cce6/userdata", "-n", "vllm-server",
          "--exit-dir", "/run/libpod/exits"]
SHIM = ["/usr/bin/containerd-shim-runc-v2", "-namespace", "moby", "-id", "3ea752c1cce6a65b39af7f68c971186e",
        "-address", "/run/containerd/containerd.sock"]
VLLM = ["/usr/bin/python3", "/usr/local/bin/vllm", "serve", "meta-llama/Llama-3.1-8B", "--port", "8000"]
GPU0 = {"opens": ["/dev/nvidiactl", "/dev/nvidia0"], "alloc": [[0, 8192]]}


class UnexpectedViolation(Exception):
    """A violation the world was not kept for."""


def assert_holds(world: World, open_class: str | None) -> None:
    with realize(world, hard_limits(world)) as outcome:
        violations = check_all(outcome)
    others = [violation for violation in violations if violation.open_class != open_class]
    if others:
        raise UnexpectedViolation("\n".join(map(str, others)))
    assert violations == [], "\n".join(map(str, violations))


def kill(**args) -> Run:
    return Run("inference_server_kill", dict({"grace_period": 0.5, "kill_timeout": 3.0}, **args))


def reset(**args) -> Run:
    return Run("gpu_host_reset", dict({"grace_period": 0.5, "kill_timeout": 3.0, "wait_for": 1.5, "poll_interval": 0.1,
                                       "facts_timeout": 5.0, "backend": "nvidia_smi", "settle_window": 1.0}, **args))


def test_a_container_job_that_only_maps_its_gpu_is_never_clean():
    world = World(gpus=2, proxmox=True, containers=[Container("200", [0, 1])], procs=[
        Proc(["python3", "train.py"], container="200", maps=["/dev/nvidiactl", "/dev/nvidia0"], alloc=[[0, 8192]])],
        actions=[Action("rm", "/dev/nvidia0", where="200", phase="after")],
        runs=[Run("gpu_memory_facts", {"backend": "nvidia_smi", "container": "200"})])
    assert_holds(world, "1")


def test_a_process_that_only_maps_a_gpu_is_never_clean():
    """As the generator found it: a renamed worker that mapped the devices and closed its descriptors."""
    world = World(gpus=2, procs=[Proc(["python3", "-c", "spawn"], title=["worker"],
                                      maps=["/dev/nvidiactl", "/dev/nvidia0"])], runs=[FACTS])
    assert_holds(world, "1")


def test_a_read_without_root_is_never_clean_when_it_cannot_see_everything():
    world = World(gpus=2, procs=[Proc(["python3", "notebook.py"], uid=1000, opens=["/dev/nvidiactl", "/dev/nvidia0"])],
                  runs=[Run("gpu_memory_facts", {"backend": "nvidia_smi"}, run_as=65534)])
    assert_holds(world, "2")


def test_a_pattern_never_selects_a_container_runtime():
    world = World(gpus=2, procs=[Proc(CONMON, kind="runtime"), Proc(VLLM, parent=0, kind="server", pidns=True, **GPU0)],
                  runs=[FACTS, kill(patterns=["vllm"])])
    assert_holds(world, "3")


def test_a_reset_is_never_clean_while_a_runtime_restarts_what_it_stopped():
    world = World(gpus=2, procs=[Proc(SHIM, kind="runtime", restart_ms=1500),
                                 Proc(VLLM, parent=0, kind="server", pidns=True, **GPU0)],
                  runs=[reset(servers=["vllm"])])
    assert_holds(world, "3")


def test_root_never_runs_a_program_planted_on_path():
    """As the generator found it: an unsafe directory ahead of /usr/local/sbin on PATH, and an empty entry."""
    world = World(gpus=2, plants=[Plant("/tmp/work/bin", "nvidia-smi", directory_mode=0o777)],
                  path=["", "/usr/bin", "/bin", "/usr/sbin", "/usr/local/bin", "/tmp/work/bin", "/usr/local/sbin"],
                  cwd="/tmp/evil", runs=[FACTS])
    assert_holds(world, "5")


def test_threads_with_their_own_tables_never_make_a_read_fail():
    """The issue's shape; the generator found it with 1500 (a deadline that load decides: too close to keep)."""
    world = World(gpus=2, procs=[Proc(["python3", "worker.py"], uid=1000, own_tables=4000)], runs=[FACTS])
    assert_holds(world, "6")


def test_a_thousand_targets_still_give_a_result():
    procs = [Proc(["sh", "-c", "spawner"], uid=1000)] + [Proc(["vllm", "serve", "tiny"], parent=0, uid=1000)
                                                         for _index in range(1100)]
    world = World(gpus=2, procs=procs, runs=[kill(patterns=["vllm serve"])])
    assert_holds(world, "6")


def test_a_flood_of_stale_shared_memory_files_gives_a_bounded_result():
    world = World(gpus=2, actions=[Action("flood", "/dev/shm/nccl-u", owner=1000, count=2000, age_s=60)],
                  runs=[Run("server_leftovers", {"shm_patterns": ["nccl-*"]})])
    assert_holds(world, "7")


def test_many_matching_processes_give_a_bounded_result():
    procs = [Proc(["sh", "-c", "spawner"], uid=1000)] + [Proc(["vllm", "serve", "tiny"], parent=0, uid=1000)
                                                         for _index in range(150)]
    world = World(gpus=2, procs=procs, runs=[kill(patterns=["vllm serve"])])
    assert_holds(world, "A1")
