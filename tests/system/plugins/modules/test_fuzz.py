"""Hostile input: the modules' arguments fuzzed with hypothesis, each module run in-process through its main().

Properties: a module either fails with a clear message (failed, a non-empty msg, no exception escaping main) or
returns a well-formed, correct result; bad input never sends a signal; nothing ever runs through a shell.

SAFETY: this runs on the real machine. inference_server_kill runs in check mode whenever its input may be valid;
only inputs that are invalid by construction run outside check mode. server_leftovers always runs in check mode.
Every run has tripwires: signal.pidfd_send_signal, os.kill and os.killpg record and refuse (only a signal to one of
the test process's own children - the module's pattern matcher or a timed-out nvidia-smi - goes through), os.unlink
and os.remove refuse, and every subprocess must be an argv list or tuple, without a shell, of an expected program.
A refusal raises Tripwire, a BaseException that no module code can swallow.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import json
import math
import os
import re
import signal
import subprocess
import sys
import time
import uuid

import pytest
from ansible.module_utils.testing import patch_module_args
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from gpusim.profiles import gpu_identities

from ansible_collections.gpuops.hygiene.plugins.module_utils import _kill, _presets
from ansible_collections.gpuops.hygiene.plugins.modules import (
    gpu_host_reset, gpu_memory_facts, inference_server_kill, server_leftovers, server_ready)

VALID, INVALID, UNSURE = "valid", "invalid", "unsure"
MODULE_NAMES = sorted(name[:-3] for name in os.listdir(os.path.join(os.path.dirname(_kill.__file__), "..", "modules"))
                      if name.endswith(".py") and not name.startswith("_"))
NOWHERE = "/nonexistent-gpuops-fuzz"  # every fuzzed nvidia_smi_path lives under this directory, which does not exist
CANARY = f"/tmp/gpuops-fuzz-canary-{uuid.uuid4().hex}"
FUZZ = settings(max_examples=60, deadline=None, database=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                                       HealthCheck.filter_too_much])

# Strings a shell would act on: if any were ever interpreted, the canary file would appear.
SHELLISH = [f"; touch {CANARY}", f"$(touch {CANARY})", f"`touch {CANARY}`", f"| touch {CANARY}", f"&& touch {CANARY}",
            f"x'; touch {CANARY}; '", f'x"; touch {CANARY}; "', "${IFS}", "\n", "*", "?", "~root", "$HOME", "../../etc/passwd"]
UNICODE = ["sglang\u200b", "\u0455glang", "vllm\u00a0serve", "\U0001f525", "\u202eevil", "\u0661\u0662", "ｓｇｌａｎｇ"]
WITH_NUL = ["a\x00b", "\x00", "sglang\x00"]
BAD_REGEXES = ["(", "[", "(?P<x>", "*a", "a{2,1}", "(?<=a+)b", "\\", "(?z)", ")"]
CATASTROPHIC = ["(a+)+$", "(a|aa)+$", "(a*)*b", "(x+x+)+y", "^(([a-z])+.)+[A-Z]([a-z])+$"]
LONG = ["x" * 1001, "sglang" * 500]

texts = st.one_of(st.text(max_size=24), st.sampled_from(SHELLISH + UNICODE + WITH_NUL + BAD_REGEXES + CATASTROPHIC + LONG))
a_dict = st.dictionaries(st.text(max_size=4), st.integers(), min_size=1, max_size=2)
wrong_types = st.one_of(a_dict, st.lists(a_dict, min_size=1, max_size=2))


@st.composite
def arguments(draw, options: dict, at_most: int = 6, min_size: int = 1):
    """Some options, each from its valid strategy, except (half of the time) one or two from their invalid one.

    options: name -> (valid strategy, invalid strategy). Returns (arguments, names given an invalid value).
    """
    chosen = sorted(draw(st.sets(st.sampled_from(sorted(options)), min_size=min_size, max_size=at_most)))
    broken = set(draw(st.sets(st.sampled_from(chosen), min_size=1, max_size=2))) if chosen and draw(st.booleans()) \
        else set()
    args = {name: draw(options[name][1] if name in broken else options[name][0]) for name in chosen}
    if draw(st.integers(0, 19)) == 0:
        args["no_such_option"] = draw(texts)
        broken.add("no_such_option")
    return args, broken


class Tripwire(BaseException):
    """A signal or a program the module must not send or start here."""


def _parent_of(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            return int(handle.read().rpartition(b")")[2].split()[1])
    except (OSError, ValueError, IndexError):
        return None


class Guard:
    """The tripwires of one module run, and what they saw."""

    def __init__(self, programs: tuple[str, ...] = ()) -> None:
        self.programs = programs
        self.refused: list[tuple] = []
        self.own_children: list[tuple] = []
        self.spawned: list[tuple] = []

    def _refuse(self, *what) -> None:
        self.refused.append(what)
        raise Tripwire(f"refused: {what!r}")

    def _pidfd_send_signal(self, pidfd, sig, *args):
        self._refuse("pidfd_send_signal", pidfd, sig, args)

    def _signal_own_child(self, real, how, pid, sig):
        # The module may kill only its own child: the pattern matcher or nvidia-smi at their deadlines.
        if pid > 0 and _parent_of(pid) == os.getpid():
            self.own_children.append((how, pid, sig))
            return real(pid, sig)
        return self._refuse(how, pid, sig)

    def _allowed(self, program: str) -> bool:
        return program in self.programs or program.startswith(NOWHERE + "/") or os.path.basename(program) == "nvidia-smi"

    @contextlib.contextmanager
    def installed(self):
        guard = self
        real_popen, real_kill, real_killpg = subprocess.Popen, os.kill, os.killpg

        class GuardedPopen(real_popen):  # pylint: disable=too-few-public-methods
            def __init__(self, args, *rest, **kwargs):
                shell = kwargs.get("shell", rest[7] if len(rest) > 7 else False)
                guard.spawned.append((args, shell))
                if shell or not isinstance(args, (list, tuple)) or not all(isinstance(arg, str) for arg in args):
                    guard._refuse("shell or command string", args, shell)
                if not guard._allowed(args[0]):
                    guard._refuse("unexpected program", args)
                super().__init__(args, *rest, **kwargs)

        def refuse(name):
            return lambda *args, **kwargs: guard._refuse(name, args)

        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(signal, "pidfd_send_signal", self._pidfd_send_signal)
            patch.setattr(os, "kill", lambda pid, sig: self._signal_own_child(real_kill, "kill", pid, sig))
            patch.setattr(os, "killpg", lambda pgid, sig: self._signal_own_child(real_killpg, "killpg", pgid, sig))
            patch.setattr(subprocess, "Popen", GuardedPopen)
            for name in ("system", "popen", "execv", "execve", "execvp", "execvpe", "execl", "execlp", "spawnv",
                         "spawnvp", "unlink", "remove", "rmdir"):
                patch.setattr(os, name, refuse(name))
            yield self


def call(main, args: dict, guard: Guard) -> dict:
    """main() with these arguments; its JSON result. Anything but SystemExit escaping main fails the test."""
    out = io.StringIO()
    with guard.installed(), patch_module_args(args), contextlib.redirect_stdout(out):
        try:
            main()
        except SystemExit:
            pass
    return json.loads(out.getvalue())


def assert_clear_failure(result: dict) -> None:
    assert result.get("failed") is True, result
    assert isinstance(result.get("msg"), str) and result["msg"].strip(), result
    assert "exception" not in result and "Traceback" not in result["msg"], result


@pytest.fixture(autouse=True)
def no_shell_ever_ran():
    yield
    assert not os.path.exists(CANARY), "a fuzzed argument was interpreted by a shell"


# --- inference_server_kill ----------------------------------------------------------------------------------

def _valid_pattern(pattern: str) -> bool:
    try:
        _kill.compile_pattern("patterns", 0, pattern)
    except _kill.GpuOpsError:
        return False
    return True


def _valid_name(name: str) -> bool:
    return bool(name) and "/" not in name and "\x00" not in name and len(name) <= 255


# Process names and file-name globs: any text without '/' and NUL, and the hostile samples that qualify.
plain_names = st.one_of(st.text(st.characters(blacklist_characters="/\x00"), min_size=1, max_size=24),
                        st.sampled_from([text for text in SHELLISH + UNICODE + BAD_REGEXES + CATASTROPHIC
                                         if _valid_name(text)]))


presets = st.lists(st.sampled_from(_presets.NAMES), max_size=3)
unknown_preset = texts.filter(lambda text: text not in _presets.NAMES and "," not in text)
valid_patterns = st.lists(texts.filter(_valid_pattern), max_size=3)
bad_pattern = st.one_of(st.sampled_from(BAD_REGEXES + LONG + [""]), texts.filter(lambda text: not _valid_pattern(text)))
vmids = st.integers(1, 999999999).map(str)
bad_vmid = st.one_of(st.sampled_from(["0", "-1", "0200", "1234567890", "ct200", "200 ", " 200", "2OO", "", "200/..",
                                      "\u0662\u0660\u0660"] + SHELLISH),
                     texts.filter(lambda text: not re.fullmatch(r"[1-9][0-9]{0,8}\n?", text)))
valid_bool = st.one_of(st.booleans(), st.sampled_from(["yes", "no", "true", "off"]))
bad_bool = st.one_of(st.sampled_from(["maybe", 2, -1, "", "s\u00ed"]), wrong_types)
seconds = st.one_of(st.floats(min_value=0, max_value=86400, allow_nan=False, allow_infinity=False), st.integers(0, 86400))
bad_seconds = st.one_of(st.sampled_from([-1, -0.001, -1e300, 86400.5, 1e300, math.nan, math.inf, -math.inf, "nan", "inf",
                                         "-inf", "1e400", "soon", "", "5s", "1,5", "0x10"]), wrong_types)
smi_paths = st.one_of(st.text(max_size=20).filter(lambda text: "\x00" not in text).map(lambda text: f"{NOWHERE}/{text}"),
                      st.sampled_from(SHELLISH + UNICODE).map(lambda text: f"{NOWHERE}/nvidia-smi{text}"))

KILL_OPTIONS = {
    "servers": (presets, st.one_of(st.tuples(presets, unknown_preset).map(lambda pair: pair[0] + [pair[1]]), a_dict,
                                   st.integers(-5, 5))),
    "patterns": (valid_patterns, st.one_of(st.tuples(valid_patterns, bad_pattern).map(lambda pair: pair[0] + [pair[1]]),
                                           a_dict)),
    "clients": (valid_patterns, st.tuples(valid_patterns, bad_pattern).map(lambda pair: [pair[1]] + pair[0])),
    "gpu_holders": (valid_bool, bad_bool),
    "container": (vmids, bad_vmid),
    "protect": (st.lists(plain_names, max_size=3),
                st.tuples(st.lists(texts, max_size=2), st.sampled_from(["", "a/b", "/usr/bin/x", "a\x00", "x" * 256]))
                .map(lambda pair: pair[0] + [pair[1]])),
    "signal": (st.sampled_from(_kill.SIGNALS), st.sampled_from(["SIGSTOP", "SIGCONT", "9", "sigterm", "", "SIGTERM; reboot",
                                                                "TERM"])),
    "grace_period": (seconds, bad_seconds),
    "timeout": (seconds, bad_seconds),
    "stop_units": (valid_bool, bad_bool),
    "nvidia_smi_path": (smi_paths, st.sampled_from([f"{NOWHERE}/nvidia-smi\x00", "\x00"])),
}


def _kill_status(args: dict, broken: set) -> str:
    """Whether the arguments are valid, by the rules the module documents (a selection is needed; 0 <= grace_period <
    timeout <= 86400, both defaulting from the presets)."""
    if broken:
        return INVALID
    servers, patterns, clients = args.get("servers", []), args.get("patterns", []), args.get("clients", [])
    holders = args.get("gpu_holders", False) in (True, "yes", "true")
    if not (servers or patterns or clients or holders):
        return INVALID
    grace, timeout = args.get("grace_period"), args.get("timeout")
    if grace is None:
        graces = [preset.grace_period_s for preset in _presets.select(servers)]
        grace = max(graces + ([_kill.DEFAULT_GRACE_S] if patterns or clients or holders else []))
    if timeout is None:
        timeout = float(grace) + _kill.KILL_WAIT_S
    return VALID if 0 < float(timeout) and float(grace) < float(timeout) else INVALID


kill_arguments = arguments(KILL_OPTIONS).map(lambda case: (case[0], _kill_status(*case)))


@settings(FUZZ, max_examples=300)
@given(kill_arguments)
def test_inference_server_kill_fuzzed_in_check_mode(case):
    args, status = case
    guard = Guard()
    result = call(inference_server_kill.main, dict(args, _ansible_check_mode=True), guard)
    event(f"{status} input, {'failed' if result.get('failed') else 'accepted'}")
    assert guard.refused == []
    if result.get("failed"):
        assert_clear_failure(result)
        assert status != VALID or "catastrophic backtracking" in result["msg"], (args, result["msg"])
        if status == INVALID:
            assert guard.spawned == [] and guard.own_children == [], "bad input started something"
        return
    assert status != INVALID, f"accepted invalid arguments {args!r}: {result}"
    assert isinstance(result["changed"], bool) and result["changed"] == bool(result["planned"])
    assert result["killed"] == result["survivors"] == result["respawned"] == []
    assert math.isfinite(result["grace_period"]) and math.isfinite(result["timeout"])
    assert 0 <= result["grace_period"] < result["timeout"] <= 86400
    first = args.get("signal", "SIGTERM")
    assert all(entry["signals"][0] == first for entry in result["planned"])
    assert os.getpid() not in {entry["pid"] for entry in result["planned"]}


invalid_kill_arguments = kill_arguments.filter(lambda case: case[1] == INVALID).map(lambda case: case[0])


@settings(FUZZ, max_examples=150)
@given(invalid_kill_arguments)
def test_inference_server_kill_refuses_bad_input_before_anything_even_outside_check_mode(args):
    """Invalid by construction, so run for real: the refusal must come before any scan, signal or program."""
    guard = Guard()
    result = call(inference_server_kill.main, args, guard)
    assert_clear_failure(result)
    assert guard.refused == [] and guard.own_children == [] and guard.spawned == []


@pytest.fixture
def catastrophic_victims(request):
    """Processes whose command lines make (a+)+$ backtrack for far longer than the matcher's budget per line."""
    children = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "a" * 40 + "!"])
                for _index in range(getattr(request, "param", 1))]
    for child in children:
        deadline = time.monotonic() + 5
        while True:
            with open(f"/proc/{child.pid}/cmdline", "rb") as handle:
                if b"aaaa" in handle.read():
                    break
            assert time.monotonic() < deadline
            time.sleep(0.01)
    yield children
    for child in children:
        child.kill()
        child.wait()


def test_catastrophic_pattern_costs_one_command_line_its_budget(catastrophic_victims):
    """One pathological command line is left unmatched with a note; the call goes on (point 17 of issue 9)."""
    guard = Guard()
    started = time.monotonic()
    result = call(inference_server_kill.main, {"patterns": ["(a+)+$"], "_ansible_check_mode": True}, guard)
    elapsed = time.monotonic() - started
    assert not result.get("failed"), result
    victim = catastrophic_victims[0]
    assert any(note.startswith(f"pid {victim.pid} not matched: the patterns took longer than") for note in
               result["notes"]), result["notes"]
    assert _kill.MATCH_BUDGET_PER_PROCESS_S <= elapsed < _kill.MATCH_TIMEOUT_S + 2.5
    assert [(how, sig) for how, _pid, sig in guard.own_children] == [("kill", signal.SIGKILL)]
    assert guard.refused == [] and victim.poll() is None
    matcher = guard.own_children[0][1]
    assert _parent_of(matcher) != os.getpid(), "the killed matcher was left behind as a zombie"


@pytest.mark.parametrize("catastrophic_victims", [10], indirect=True)
def test_catastrophic_pattern_on_many_command_lines_is_cut_off_at_the_matcher_deadline(catastrophic_victims):
    guard = Guard()
    started = time.monotonic()
    result = call(inference_server_kill.main, {"patterns": ["(a+)+$"], "_ansible_check_mode": True}, guard)
    elapsed = time.monotonic() - started
    assert_clear_failure(result)
    assert "took longer than 2 s: a pattern with catastrophic backtracking?" in result["msg"]
    assert elapsed < _kill.MATCH_TIMEOUT_S + 9 * _kill.MATCH_BUDGET_PER_PROCESS_S + 2.5
    assert {(how, sig) for how, _pid, sig in guard.own_children} == {("kill", signal.SIGKILL)}
    assert guard.refused == [] and all(victim.poll() is None for victim in catastrophic_victims)
    assert all(_parent_of(pid) != os.getpid() for _how, pid, _sig in guard.own_children)


# Every float option of every module, by its name and by its alias: ansible-core's own float check lets OverflowError
# escape for an integer no float holds (float(10**400)); the modules fail in one line naming the option instead.
_FLOAT_CASES = [
    (module, base, name)
    for module, base in ((gpu_host_reset, {"servers": ["sglang"], "nvidia_smi_path": NOWHERE + "/nvidia-smi",
                                           "_ansible_check_mode": True}),
                         (gpu_memory_facts, {"nvidia_smi_path": NOWHERE + "/nvidia-smi"}),
                         (inference_server_kill, {"servers": ["sglang"], "_ansible_check_mode": True}),
                         (server_ready, {"port": 1}))
    for option, spec in module.argument_spec().items() if spec.get("type") == "float"
    for name in (option, *spec.get("aliases", ()))
]


@pytest.mark.parametrize("module, base, name", _FLOAT_CASES,
                         ids=[f"{module.__name__.rsplit('.', 1)[1]}-{name}" for module, _base, name in _FLOAT_CASES])
def test_an_integer_too_large_for_a_float_fails_clearly(module, base, name):
    guard = Guard()
    result = call(module.main, {**base, name: 10 ** 400}, guard)
    assert_clear_failure(result)
    option = next(option for option, spec in module.argument_spec().items()
                  if name == option or name in spec.get("aliases", ()))
    assert result["msg"].startswith(f"{option} must be a number of at most 1.798e+308, not an integer of 1329 bits"), \
        result["msg"]
    assert guard.refused == [] and guard.spawned == []


def test_every_module_with_a_float_option_is_covered():
    """The cases above are every module whose argument spec has a float option (a new one must be added there)."""
    assert "gpu_memory_facts" in MODULE_NAMES
    modules = {name: importlib.import_module(f"ansible_collections.gpuops.hygiene.plugins.modules.{name}")
               for name in MODULE_NAMES}
    with_floats = {name for name, module in modules.items() if hasattr(module, "argument_spec")  # not the actions' docs
                   and any(spec.get("type") == "float" for spec in module.argument_spec().values())}
    assert with_floats == {module.__name__.rsplit(".", 1)[1] for module, _base, _name in _FLOAT_CASES}


@pytest.mark.parametrize("main, args", [
    (inference_server_kill.main, {"servers": ["sglang"], "container": "200\n", "_ansible_check_mode": True}),
    (gpu_memory_facts.main, {"container": "200\n", "nvidia_smi_path": NOWHERE + "/nvidia-smi"}),
    (server_leftovers.main, {"container": "200\n", "_ansible_check_mode": True}),
], ids=["kill", "facts", "leftovers"])
def test_a_vmid_with_a_trailing_newline_is_refused(main, args):
    result = call(main, args, Guard())
    assert_clear_failure(result)
    assert result["msg"].startswith("container must be a Proxmox vmid"), result["msg"]


# --- gpu_memory_facts --------------------------------------------------------------------------------------


def labelled(strategy, label):
    return strategy.map(lambda value: (value, label))


# Valid values carry what they mean for the verdict of an idle 8-GPU host: VALID (clean, or busy only through other
# processes of this machine), too_many / no_container / no_nvml / no_smi (unknown), UNSURE (a timeout this short may
# expire).
FACTS_OPTIONS = {
    "expected_gpu_count": (st.one_of(labelled(st.integers(1, 8), VALID), labelled(st.integers(9, 1024), "too_many")),
                           st.one_of(st.sampled_from([0, -1, 1025, 10 ** 30, -(10 ** 30), "eight", "8.5", 8.5, "", "0x8"]),
                                     wrong_types)),
    "idle_threshold_mib": (labelled(st.integers(0, 1024 * 1024), VALID),
                           st.one_of(st.sampled_from([-1, 1024 * 1024 + 1, 10 ** 30, 0.5, "lots", "nan"]), wrong_types)),
    "timeout": (st.one_of(labelled(st.floats(5, 3600), VALID), labelled(st.floats(0.000001, 0.5), UNSURE)),
                st.one_of(st.sampled_from([0, -1, 3600.5, math.nan, math.inf, -math.inf, "nan", "soon"]), wrong_types)),
    "backend": (st.one_of(labelled(st.sampled_from(["auto", "nvidia_smi"]), VALID), st.just(("nvml", "no_nvml"))),
                texts.filter(lambda text: text not in ("auto", "nvidia_smi", "nvml"))),
    "container": (labelled(vmids, "no_container"), bad_vmid),
    "protect": (labelled(st.lists(plain_names, max_size=3), VALID), KILL_OPTIONS["protect"][1]),
    "wait_for": (labelled(st.floats(0, 0.3), VALID),
                 st.sampled_from([-0.1, 3600.5, 1e300, math.nan, math.inf, "forever"])),
    "poll_interval": (labelled(st.floats(0.05, 60), VALID), st.sampled_from([0, 0.01, 60.5, -1, math.nan, math.inf, 1e-300])),
    "nvidia_smi_path": (labelled(smi_paths, "no_smi"), st.just("")),
}


def _labels(case):
    args, broken = case
    labels = {INVALID} if broken else set()
    for name in list(args):
        if name not in broken and isinstance(args[name], tuple):
            args[name], label = args[name]
            labels.add(label)
    return args, labels


facts_arguments = arguments(FACTS_OPTIONS, at_most=5, min_size=0).map(_labels)


@pytest.fixture
def idle_smi(static_smi):
    """nvidia-smi of an idle host with 8 GPUs."""
    return static_smi({"profile": "h200", "gpus": gpu_identities("fuzz", 8)})


@settings(FUZZ, max_examples=100)
@given(facts_arguments)
def test_gpu_memory_facts_fuzzed(idle_smi, case):
    args, statuses = case
    args.setdefault("nvidia_smi_path", idle_smi)
    guard = Guard((idle_smi,))
    result = call(gpu_memory_facts.main, args, guard)
    event(f"{'failed' if result.get('failed') else result['ansible_facts']['gpu_memory']['verdict']}")
    assert guard.refused == []  # at most its own NVML child or nvidia-smi, killed at their deadline
    if INVALID in statuses:
        assert_clear_failure(result)
        assert guard.spawned == [] and guard.own_children == []
        return
    assert not result.get("failed"), (args, result)
    assert result["changed"] is False
    facts = result["ansible_facts"]["gpu_memory"]
    assert facts["verdict"] in ("clean", "busy", "unknown")
    assert isinstance(facts["reasons"], list) and all(isinstance(reason, str) for reason in facts["reasons"])
    assert (facts["verdict"] == "clean") == (facts["reasons"] == [])
    if statuses & {"too_many", "no_container", "no_nvml", "no_smi"}:
        assert facts["verdict"] == "unknown", (args, facts["reasons"])
    elif UNSURE not in statuses:
        # The idle world: clean, or busy only because of processes of this machine that hold /dev/nvidia* files (the
        # simulated hosts of concurrent test runs are visible from here); never because of GPU memory.
        assert facts["verdict"] in ("clean", "busy"), (args, facts["reasons"])
        assert facts["gpu_count"] == 8 and all(gpu["memory_used_mib"] == 0 for gpu in facts["gpus"])
        assert all(reason.startswith("pid ") for reason in facts["reasons"]), facts["reasons"]


# --- server_leftovers --------------------------------------------------------------------------------------

def _valid_glob(glob: str) -> bool:
    """At least three literal characters first, then anything but '/' and NUL."""
    literal_prefix = len(glob) >= 3 and not any(char in "*?[]/\x00" for char in glob[:3])
    return literal_prefix and "/" not in glob and "\x00" not in glob


LEFTOVERS_OPTIONS = {
    "ports": (labelled(st.lists(st.integers(1, 65535), max_size=4), VALID),
              st.one_of(st.lists(st.sampled_from([0, -1, 65536, 10 ** 30, "http", "80a", 1.5, ""]), min_size=1, max_size=2),
                        a_dict)),
    "servers": (labelled(presets, VALID), KILL_OPTIONS["servers"][1]),
    "shm_patterns": (labelled(st.lists(plain_names.filter(_valid_glob), max_size=3), VALID),
                     st.tuples(st.lists(texts, max_size=2), st.sampled_from(["*", ".*", "", "a/b", "../x", "x\x00"]))
                     .map(lambda pair: pair[0] + [pair[1]])),
    "remove_stale_shm": (labelled(valid_bool, VALID), bad_bool),
    "container": (labelled(vmids, "no_container"), bad_vmid),
}
leftovers_arguments = arguments(LEFTOVERS_OPTIONS, at_most=4, min_size=0).map(_labels)


@settings(FUZZ, max_examples=150)
@given(leftovers_arguments)
def test_server_leftovers_fuzzed_in_check_mode(case):
    args, statuses = case
    guard = Guard()
    result = call(server_leftovers.main, dict(args, _ansible_check_mode=True), guard)
    event("failed" if result.get("failed") else "accepted")
    assert guard.refused == [] and guard.spawned == [] and guard.own_children == []
    if statuses & {INVALID, "no_container"}:
        assert_clear_failure(result)
        return
    assert not result.get("failed"), (args, result)
    assert [entry["port"] for entry in result["ports"]] == list(args.get("ports", []))
    assert result["ports_free"] == all(entry["free"] for entry in result["ports"])
    assert result["shm_removed"] == [] and not any(entry["removed"] for entry in result["shm"])


@pytest.mark.parametrize("glob", ["?*", "**", "*?", "[!.]*"])
def test_globs_that_match_every_shm_file_are_refused_like_star(glob):
    path = f"/dev/shm/gpuops-fuzz-{uuid.uuid4().hex}"
    with open(path, "w", encoding="ascii") as handle:
        handle.write("not a server's")
    try:
        result = call(server_leftovers.main, {"shm_patterns": [glob], "_ansible_check_mode": True}, Guard())
    finally:
        os.unlink(path)
    assert result.get("failed") is True, f"{glob!r} accepted; would remove: {[entry['path'] for entry in result['shm']]}"
    assert result["msg"] == ("shm_patterns are file-name globs under /dev/shm that start with at least 3 literal "
                             f"characters (such as 'nccl-*'), got {glob!r}")
