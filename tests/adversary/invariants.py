"""The adversary's invariants: what must hold after the real modules ran against a hostile world, whatever it holds.

They are judged from ground truth, never from the module's own account: the signals each process recorded (or its
death without a record, or its stopped state), the simulated driver's charges, what each process reaches of the
node's GPU device files by descriptor or mapping (read from the node's /proc), which planted programs ran, which of
the node's files changed, and each run's wall time and result size. The world's description says what each process
is (a runtime shim, a protected monitor, a server) and what the operator asked.

1. signal    No signal reaches a process outside the selection and its trees, nor a protected one. The selection
             is judged generously (any textual match of a pattern, any preset shape, any GPU holder by ground
             truth), so a violation is never a matter of taste.
2. clean     Never clean while the driver charges memory on an in-scope GPU, or charges memory to a process that
             reaches an in-scope GPU by descriptor or mapping; nor (what gpu_memory_facts documents clean to
             mean) while any process but protected GPU infrastructure reaches an in-scope GPU at all. In scope:
             every GPU of a host; the GPUs the node gave a container (its configuration, not what the tenant
             left in its /dev).
3. bounded   Every run ends within its deadline with a result (no failure but a refusal of a run without root)
             of at most MAX_RESULT_BYTES, whatever the tenant does with its own resources.
4. planted   Root never executes a program that root does not own (or that others may write).
5. files     No file of the node outside the scope's /dev/shm is removed or changed (the sentinel).
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import typing as t

from gpusim.hostile import RESTART_WATCH_S, Outcome, Proc, World

from ansible_collections.gpuops.hygiene.plugins.module_utils import _policy, _presets, _procfs

MAX_RESULT_BYTES = 64 * 1024
# Allowance above each run's own documented bound: Python's start is not in it (only main() is timed), but a
# 2-core machine shared by parallel runs stretches everything, and what is caught here is a missing bound.
SLACK_S = 5.0
# A respawned holder counts once it allocated this long before the run returned (the run's last read came after).
RESPAWN_MARGIN_S = 1.0
RUNTIME_KINDS = frozenset({"runtime"})
# si_code of a signal some process sent (kill, tgkill, sigqueue, pidfd_send_signal); the kernel's own are > 0.
SENT_CODES = frozenset({0, -1, -6})
SIGCHLD = 17


@dataclasses.dataclass
class Violation:
    invariant: str
    detail: str
    open_class: str | None = None       # the open class it belongs to (see known.py)

    def __str__(self) -> str:
        where = f" [open class {self.open_class}]" if self.open_class else ""
        return f"{self.invariant}{where}: {self.detail}"


def shown_comm(proc: Proc) -> str:
    """The kernel's name of the process: what the title sets, else its comm, else argv[0]'s base name."""
    if proc.comm is not None:
        return proc.comm.encode()[:15].decode("utf-8", "ignore")
    first = (proc.title or proc.argv or [""])[0]
    return (first if proc.title else os.path.basename(first)).encode()[:15].decode("utf-8", "ignore")


def cmdline(proc: Proc) -> str:
    return " ".join(proc.shown_argv) if proc.shown_argv else f"[{shown_comm(proc)}]"


def descendants(world: World, roots: t.Iterable[int]) -> set[int]:
    found: set[int] = set()
    pending = list(roots)
    while pending:
        for child in world.children(pending.pop()):
            if child not in found:
                found.add(child)
                pending.append(child)
    return found


def holds_gpu(proc: Proc) -> bool:
    """Ground truth of a GPU holder: memory charged, or a real device file of the node reached."""
    devices = [path for path in proc.opens + proc.maps + proc.thread_opens if path.startswith("/dev/nvidia")]
    return bool(proc.alloc) or (bool(devices) and not proc.fakedev)


def protected(proc: Proc, names: frozenset[str]) -> str | None:
    """Why the world says this process must never be signalled (None: it may be, when selected)."""
    if proc.kind in RUNTIME_KINDS:
        return "a container runtime (monitor, shim, proxy or pause)"
    argv = proc.shown_argv
    program = os.path.basename(argv[0]) if argv else ""
    script = _presets.own_program(argv) if argv else ""
    if names & {program, script, shown_comm(proc)} or any(len(name) > 15 and shown_comm(proc) == name[:15]
                                                          for name in names):
        return "a protected name"
    if proc.pidns and (program in _policy.NAMESPACE_INITS or shown_comm(proc) in _policy.NAMESPACE_INITS):
        return "the init of a PID namespace"
    return None


def selected(world: World, index: int, args: dict) -> bool:
    """Generously: whether any rule of the request may select the process on its own."""
    proc = world.procs[index]
    texts = [cmdline(proc), " ".join(proc.argv), shown_comm(proc)]
    for pattern in list(args.get("patterns", [])) + list(args.get("clients", [])):
        if any(re.search(pattern, text[:_KILL_PREFIX]) for text in texts):
            return True
    presets = _presets.select(args.get("servers", []))
    if presets and any(_presets.match_any(presets, argv, shown_comm(proc)) for argv in (proc.shown_argv, proc.argv)):
        return True
    return bool(args.get("gpu_holders")) and holds_gpu(proc)


_KILL_PREFIX = 4096


def in_scope(world: World, index: int, args: dict) -> bool:
    where = world.where(index)
    if args.get("container"):
        return where == args["container"]
    return where is None or args.get("container_processes", True)


def allowed_targets(world: World, args: dict) -> set[int]:
    """The selection and its trees, minus what is protected: every process a stop may signal."""
    names = _policy.protected_names(args.get("protect", []))
    eligible = {index for index in range(len(world.procs))
                if in_scope(world, index, args) and not protected(world.procs[index], names)}
    roots = {index for index in eligible if selected(world, index, args)}
    return roots | (descendants(world, roots) & eligible)


def _tags(observed: dict, index: int) -> list[str]:
    return [tag for tag in observed["signals"] if tag.split(".")[0] == str(index)]


def signals_received(observed: dict, index: int) -> list[str]:
    """Signals some process sent to this one (any generation), as its records show."""
    found = []
    for tag in _tags(observed, index):
        for line in observed["signals"][tag]:
            fields = line.split()
            if fields[:1] == ["sig"] and int(fields[2]) in SENT_CODES and int(fields[1]) != SIGCHLD:
                found.append(f"signal {fields[1]} from pid {fields[3]} (uid {fields[4]})")
    return found


def harmed(world: World, observed: dict, index: int) -> list[str]:
    """What happened to the process: signals received, a death it did not choose (SIGKILL), a stop (SIGSTOP)."""
    proc = world.procs[index]
    found = signals_received(observed, index)
    for tag in _tags(observed, index):
        process = observed["processes"].get(tag)
        chose_to_leave = proc.exit_now or any(line.startswith("exit") for line in observed["signals"][tag])
        if (process is None or not process["live"]) and not chose_to_leave:
            found.append(f"gone without a signal it could record (SIGKILL), generation {tag.split('.')[1]}")
        elif process is not None and process["state"] in ("T", "t"):
            found.append("stopped (SIGSTOP)")
    return found


def check_signals(outcome: Outcome) -> list[Violation]:
    world = outcome.world
    acting = [run for run in world.runs if run.module in ("inference_server_kill", "gpu_host_reset")]
    allowed: set[int] = set()
    for run, record in zip(world.runs, outcome.runs):
        result = record["result"] or {}
        if run in acting and not result.get("failed") and not (run.args.get("verify_only")):
            allowed |= allowed_targets(world, run.args)
    names = _policy.protected_names([name for run in acting for name in run.args.get("protect", [])])
    violations = []
    for index, proc in enumerate(world.procs):
        if index in allowed:
            continue
        what = harmed(world, outcome.observed, index)
        if what:
            outside = not all(in_scope(world, index, run.args) for run in acting)
            why = protected(proc, names) or ("outside the scope" if outside else "neither selected nor in a selected tree")
            violations.append(Violation("signal", f"process {index} ({proc.kind}: {cmdline(proc)[:120]!r}), "
                                                  f"{why}: {'; '.join(what)}"))
    for vmid, alive in outcome.observed.get("container_inits", {}).items():
        if not alive:
            violations.append(Violation("signal", f"the init of container {vmid} is gone"))
    return violations


def _verdict(record: dict) -> str | None:
    result = record["result"] or {}
    facts = result.get("ansible_facts", {})
    if "gpu_reset_result" in facts:
        return facts["gpu_reset_result"]["verdict"]
    if "gpu_memory" in facts:
        return facts["gpu_memory"]["verdict"]
    return None


def _scope_minors(world: World, args: dict, observed: dict) -> set[int]:
    vmid = args.get("container")
    if vmid:
        return set(next(container.gpus for container in world.containers if container.vmid == vmid))
    return set(observed.get("devices", []))


def _allocated_at(observed: dict) -> dict[str, int]:
    """index.generation -> CLOCK_MONOTONIC ns of its allocation (from ready.log)."""
    found = {}
    for line in observed["ready"]:
        fields = line.split()
        if fields[:1] == ["ready"] and len(fields) >= 5:
            found[f"{fields[1]}.{fields[2]}"] = int(fields[4])
    return found


def _how(process: dict | None, minors: set[int]) -> str:
    """How a process reaches these GPUs: by descriptor (any task's table), by mapping only, or not at all."""
    if process is None:
        return "no process of the world"
    if set(process["reaches"]["fd"]) & minors:
        return "descriptor"
    return "mapping only" if set(process["reaches"]["map"]) & minors else "neither descriptor nor mapping"


def check_clean(outcome: Outcome) -> list[Violation]:
    violations = []
    for run, record in zip(outcome.world.runs, outcome.runs):
        if _verdict(record) == "clean":
            violations += _clean_but_held(outcome.world, run, record)
    last = outcome.runs[-1] if outcome.runs else None
    if last is not None and _verdict(last) == "clean" and outcome.later is not None:
        violations += _clean_but_restarted(outcome, last)
    return violations


def _clean_but_restarted(outcome: Outcome, last: dict) -> list[Violation]:
    """A container runtime that the run left running brings back what it stopped: the host was not clean.

    (A plain restart loop of the user's, `while :; do vllm serve; done`, is documented as reported, not stopped.)"""
    world = outcome.world
    violations = []
    for tag, process in outcome.later["processes"].items():
        index, generation = (int(part) for part in tag.split("."))
        parent = world.procs[index].parent
        if not generation or parent is None or world.procs[parent].kind not in RUNTIME_KINDS or not process["live"]:
            continue
        if process["pid"] in {holder["pid"] for holder in outcome.later["driver"].get("processes", [])}:
            violations.append(Violation(
                "clean", f"{last['module']} said clean, and {RESTART_WATCH_S:g} s later the runtime (process "
                         f"{parent}: {cmdline(world.procs[parent])[:60]!r}) had started process {index} again, which "
                         f"holds GPU memory (generation {generation}, pid {process['pid']})"))
    return violations


def _clean_but_held(world: World, run: t.Any, record: dict) -> list[Violation]:
    """What the driver and /proc hold against one run's clean verdict (GPU indexes are minors in gpusim)."""
    observed = record["observed"]
    scope = _scope_minors(world, run.args, observed)
    live = {process["pid"]: (tag, process) for tag, process in observed["processes"].items() if process["live"]}
    allocated = _allocated_at(observed)
    counted_until = record["ended_ns"] - int(RESPAWN_MARGIN_S * 1e9)
    threshold = run.args.get("idle_threshold_mib", 100)
    holders = observed["driver"].get("processes", [])
    violations = []
    used: dict[int, int] = {}
    users: dict[int, list[str]] = {}
    for holder in holders:
        tag, process = live.get(holder["pid"], (None, None))
        if tag is not None and not tag.endswith(".0") and allocated.get(tag, 0) > counted_until:
            continue  # a respawn that allocated after the run's last chance to see it
        used[holder["gpu"]] = used.get(holder["gpu"], 0) + holder["mib"]
        users.setdefault(holder["gpu"], []).append(f"pid {holder['pid']} ({_how(process, {holder['gpu']})})")
        if tag is not None and _how(process, scope) in ("descriptor", "mapping only"):
            index = int(tag.split(".")[0])
            violations.append(Violation(
                "clean", f"{run.module} said clean while the driver charges {holder['mib']} MiB on GPU "
                         f"{holder['gpu']} to pid {holder['pid']} (process {index}: "
                         f"{cmdline(world.procs[index])[:100]!r}), which reaches in-scope GPU(s) "
                         f"{sorted((set(process['reaches']['fd']) | set(process['reaches']['map'])) & scope)} "
                         f"by {_how(process, scope)}"))
    charged = {holder["pid"] for holder in holders}
    names = _policy.protected_names(run.args.get("protect", []))
    for pid, (tag, process) in live.items():
        index = int(tag.split(".")[0])
        how = _how(process, scope)
        if pid in charged or how not in ("descriptor", "mapping only") or \
                protected(world.procs[index], names) == "a protected name":
            continue
        violations.append(Violation(
            "clean", f"{run.module} said clean while pid {pid} (process {index}: "
                     f"{cmdline(world.procs[index])[:100]!r}) has in-scope GPU(s) open by {how}, holding no memory"))
    for gpu, mib in sorted(observed["driver"].get("used_mib", {}).items()):
        leaked = mib - sum(holder["mib"] for holder in holders if holder["gpu"] == int(gpu))
        total = used.get(int(gpu), 0) + max(leaked, 0)
        if int(gpu) in scope and total > threshold:
            charged_to = ", ".join(users.get(int(gpu), [])) or "no process"
            violations.append(Violation("clean", f"{run.module} said clean while in-scope GPU {gpu} has {total} MiB "
                                                 f"used (> {threshold}), charged to {charged_to}"))
    return violations


def deadline_s(run_module: str, args: dict) -> float:
    """The bound each run documents, plus SLACK_S."""
    scan = _procfs.SCAN_TIMEOUT_S
    facts = args.get("facts_timeout", 10.0) + scan
    kill = args.get("kill_timeout", 0) or (args.get("grace_period", 10.0) + 30.0)
    if run_module == "gpu_memory_facts":
        bound = args.get("wait_for", 0.0) + facts
    elif run_module == "inference_server_kill":
        bound = kill
    elif run_module == "server_leftovers":
        bound = 2 * scan
    else:
        bound = facts + kill + args.get("wait_for", 60.0) + facts + 2 * scan
    return bound + SLACK_S


def largest_fields(result: dict, top: int = 3) -> list[tuple[str, int]]:
    """The result's biggest parts (a dotted path to each list or value, with its JSON size): what made it grow."""
    sizes: list[tuple[str, int]] = []

    def walk(value: t.Any, path: str) -> None:
        if isinstance(value, dict) and len(json.dumps(value)) > MAX_RESULT_BYTES // 8:
            for key, item in value.items():
                walk(item, f"{path}.{key}" if path else key)
        else:
            sizes.append((path, len(json.dumps(value))))
    walk(result, "")
    return sorted(sizes, key=lambda entry: -entry[1])[:top]


def hard_limits(world: World) -> list[float]:
    """When the harness kills each run: well past its deadline, so that an overrun is measured, not cut short."""
    return [deadline_s(run.module, run.args) + 10.0 for run in world.runs]


def check_bounded(outcome: Outcome) -> list[Violation]:
    violations = []
    for run, record in zip(outcome.world.runs, outcome.runs):
        limit = deadline_s(run.module, run.args)
        result = record["result"]
        if record["timed_out"] or record["elapsed_s"] > limit:
            killed = " and was killed" if record["timed_out"] else ""
            violations.append(Violation("bounded", f"{run.module} took {record['elapsed_s']:.1f} s "
                                                   f"(deadline {limit:.1f} s){killed}"))
        if result is None:
            violations.append(Violation("bounded", f"{run.module} gave no result: {record['raw_tail'][-500:]!r}"))
            continue
        if record["bytes"] > MAX_RESULT_BYTES:
            largest = ", ".join(f"{path} ({size} bytes)" for path, size in largest_fields(result))
            violations.append(Violation("bounded", f"{run.module} returned {record['bytes']} bytes "
                                                   f"(> {MAX_RESULT_BYTES}); largest: {largest}"))
        if result.get("failed") and run.run_as == 0:
            violations.append(Violation("bounded", f"{run.module} failed: {str(result.get('msg'))[:300]}"))
    return violations


def check_planted(outcome: Outcome) -> list[Violation]:
    return [Violation("planted", f"root ran the planted {line.split(' ', 1)[1]}")
            for line in outcome.observed["planted"] if line.split(" ", 1)[0] == "0"]


def check_files(outcome: Outcome) -> list[Violation]:
    return [Violation("files", f"the node's file {path} was removed or changed")
            for path, intact in outcome.observed["sentinels"].items() if not intact]


def check_all(outcome: Outcome) -> list[Violation]:
    from known import classify  # pylint: disable=import-outside-toplevel
    violations = (check_signals(outcome) + check_clean(outcome) + check_bounded(outcome) + check_planted(outcome)
                  + check_files(outcome))
    for violation in violations:
        violation.open_class = classify(outcome, violation)
    return violations
