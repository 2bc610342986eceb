# Copyright (c) 2026, gpuops.hygiene contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""How each inference engine really launches, and which processes are therefore its own.

A preset matches launch shapes, never substrings: the interpreter running an
engine module (python -m sglang.launch_server), an engine's console script or
binary (vllm serve, text-generation-launcher, tritonserver), the title an
engine gives its workers (sglang::scheduler_TP3, VLLM::EngineCore), or an
orchestrator that runs the engine in its own process (NVIDIA Dynamo's
python -m dynamo.vllm). A log tail, an editor or a grep that mentions the
engine never has such a shape.
"""

from __future__ import annotations

import os
import re
import shlex
import typing as t
from dataclasses import dataclass

_PYTHON = re.compile(r"^(?:python|pypy)(?:\d+(?:\.\d+)?)?[a-z]?$")
# Python's one-letter flags that take no value; -X and -W take one, attached or next.
_PYTHON_FLAGS = frozenset("bBdEhiIOPqRsSuvVx")
_PYTHON_FLAGS_WITH_VALUE = frozenset("XW")
_PYTHON_LONG_OPTIONS_WITH_VALUE = frozenset({"--check-hash-based-pycs"})
# More options than any real launch has: a longer run of them names no program (and costs no time to read).
_MAX_OPTIONS = 256
_SHELL_OPTIONS_WITH_VALUE = frozenset({"-o", "+o", "-O", "+O", "--rcfile", "--init-file"})
# MPI launchers: the program they start comes after their own options (mpirun -n 1 tritonserver ... : -n 1 ...).
_MPI_LAUNCHERS = frozenset({"mpirun", "mpiexec", "orterun", "prterun", "mpiexec.hydra"})
_MPI_OPTIONS_WITH_VALUE = frozenset({
    "-n", "-np", "--np", "-c", "-N", "--n", "-npernode", "--npernode", "-ppn", "--ppn", "-x", "-H", "-host", "--host",
    "-hostfile", "--hostfile", "-machinefile", "--machinefile", "--map-by", "-map-by", "--rank-by", "--bind-to",
    "-bind-to", "-wdir", "--wdir", "-wd", "--prefix", "--output-filename", "--timeout", "-env", "-genv", "--mca",
    "-mca", "--gmca", "-gmca", "--rankfile", "-rf",
})
_MPI_OPTIONS_WITH_TWO_VALUES = frozenset({"--mca", "-mca", "--gmca", "-gmca", "-env", "-genv"})
_MPI_FLAGS = frozenset({
    "--allow-run-as-root", "--oversubscribe", "-oversubscribe", "--tag-output", "-tag-output", "--report-bindings",
    "-report-bindings", "--display-map", "-display-map", "--timestamp-output", "-v", "--verbose", "-q", "--quiet",
    "--noprefix", "--bind-to-core", "--bind-to-socket", "--merge-stderr-to-stdout", "--use-hwthread-cpus",
    "--enable-recovery", "--disable-recovery",
})


# Programs that only look at servers (or hold them in a terminal): a user pattern that
# matches their command line must not make them targets, and what runs below them is no
# member of a server's tree. Matched against what the program is (its script when an
# interpreter runs one, and the kernel's comm, cut to 15 characters), not argv[0] alone.
BYSTANDERS = frozenset({
    "tail", "less", "more", "most", "cat", "head", "vi", "vim", "nvim", "view", "nano", "emacs", "code",
    "grep", "egrep", "fgrep", "rg", "ag", "ack", "pgrep", "pkill", "ps", "top", "htop", "btop", "watch",
    "tmux", "tmux: server", "tmux: client", "screen", "SCREEN", "journalctl", "man", "ssh", "scp", "rsync",
    "ansible", "ansible-playbook", "ansible-pull", "ansible-console", "ansible-inventory", "ansible-doc",
    "nvtop", "nvitop", "gpustat", "nvidia-smi", "dcgmi", "lsof", "fuser", "pstree", "strace", "ltrace", "gdb",
    "tee", "awk", "sed", "multitail", "lnav", "glances",
})
# Programs that run another command (or a shell string) and wait for it: never a server
# themselves. Their own options: those that take a separate value, and how many operands
# come before the command (timeout DURATION, taskset MASK, flock FILE, chrt PRIORITY).
# Sources: the synopsis in each program's man page (sudo(8), su(1), runuser(1), timeout(1),
# nice(1), ionice(1), chrt(1), taskset(1), env(1), stdbuf(1), setsid(1), watch(1), flock(1),
# nohup(1), numactl(8), time(1), xargs(1)).
_WRAPPERS: dict[str, tuple[str, int]] = {
    "sudo": ("ugpCDrtUTRh", 0), "doas": ("uC", 0), "su": ("cgGsw", 0), "runuser": ("ucgGsw", 0),
    "timeout": ("sk", 1), "nice": ("n", 0), "ionice": ("cnpu", 0), "chrt": ("", 1), "taskset": ("", 1),
    "env": ("uCS", 0), "stdbuf": ("ioe", 0), "setsid": ("", 0), "watch": ("ndq", 0), "flock": ("wE", 1),
    "nohup": ("", 0), "numactl": ("CNmpilP", 0), "time": ("fo", 0), "xargs": ("IdEeLlnPsa", 0),
    "script": ("cEBIOTt", 0), "unbuffer": ("", 0), "caffeinate": ("", 0), "systemd-inhibit": ("", 0),
}
# Shells run scripts the way interpreters do (/bin/bash /usr/local/bin/trtllm-llmapi-launch trtllm-serve ...).
_SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh", "mksh", "ash", "fish", "-sh", "-bash", "-zsh", "-dash"})
_SCRIPT_INTERPRETERS = re.compile(r"^(?:perl|ruby|node|nodejs|lua|php|Rscript)(?:[\d.]*)$")
# Shell words that prefix a command, and commands that start no program worth judging.
_SHELL_PREFIXES = frozenset({"if", "then", "else", "elif", "while", "until", "do", "{", "!", "exec", "command",
                             "builtin", "time", "nohup"})
_SHELL_HARMLESS = frozenset({"fi", "done", "}", "true", "false", ":", "sleep", "echo", "printf", "cd", "export", "set",
                             "read", "clear", "date", "exit", "wait", "test", "["})
_SHELL_OPERATOR = re.compile(r"^[;&|()<>]+$")
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_MAX_DEPTH = 8


@dataclass(frozen=True)
class Launch:
    """The parts of a command line that identify what it runs."""

    program: str                 # basename of argv[0]
    python_module: str | None    # X in `python -m X`
    script: str | None           # basename of the script a Python interpreter runs (console scripts)
    args: tuple[str, ...]        # arguments after the program, module or script

    @property
    def command(self) -> str | None:
        """The engine-level command: a console script's name, or a native program's name."""
        return self.script or (None if self.python_module or _PYTHON.match(self.program) else self.program)

    @property
    def subcommand(self) -> str | None:
        return next((arg for arg in self.args if not arg.startswith("-")), None)


def parse_launch(argv: t.Sequence[str]) -> Launch:
    if not argv:
        return Launch("", None, None, ())
    program = os.path.basename(argv[0])
    if _PYTHON.match(program):
        return _python_launch(program, argv)
    if program in _SHELLS:
        return _shell_launch(program, argv)
    return Launch(program, None, None, tuple(argv[1:]))


def _python_launch(program: str, argv: t.Sequence[str]) -> Launch:
    """python3 [flags] (-m module | -c command | script) args; flags may be combined (-um, -Bm, -Xdev)."""
    index = 1
    while index < min(len(argv), _MAX_OPTIONS):
        arg = argv[index]
        if arg in _PYTHON_LONG_OPTIONS_WITH_VALUE:
            index += 2
            continue
        if arg == "--":
            index += 1
            break
        if arg == "-":
            return Launch(program, None, None, ())
        if arg.startswith("--"):
            index += 1
            continue
        if not arg.startswith("-"):
            break
        action, value, used = _python_flags(arg[1:], argv[index + 1] if index + 1 < len(argv) else None)
        if action == "m" and value:
            return Launch(program, value, None, tuple(argv[index + 1 + used:]))
        if action in ("c", "m"):
            return Launch(program, None, None, ())
        index += 1 + used
    if index >= min(len(argv), _MAX_OPTIONS):
        return Launch(program, None, None, ())
    return Launch(program, None, os.path.basename(argv[index]), tuple(argv[index + 1:]))


def _python_flags(cluster: str, following: str | None) -> tuple[str | None, str | None, int]:
    """One cluster of short flags: ('m'/'c', its value, next-args used), or (None, None, next-args used)."""
    for position, letter in enumerate(cluster):
        rest = cluster[position + 1:]
        if letter in ("m", "c"):
            return (letter, rest, 0) if rest else (letter, following, 1)
        if letter in _PYTHON_FLAGS_WITH_VALUE:
            return None, None, 0 if rest else 1
        if letter not in _PYTHON_FLAGS:
            return None, None, 0
    return None, None, 0


def _shell_launch(program: str, argv: t.Sequence[str]) -> Launch:
    """bash [options] script args; `bash -c ...` runs a command string, which names no script."""
    index = 1
    while index < min(len(argv), _MAX_OPTIONS):
        arg = argv[index]
        if arg in _SHELL_OPTIONS_WITH_VALUE:
            index += 2
            continue
        if arg == "--":
            index += 1
            break
        if not arg.startswith(("-", "+")):
            break
        if not arg.startswith("--") and "c" in arg[1:]:
            return Launch(program, None, None, ())
        index += 1
    if index >= min(len(argv), _MAX_OPTIONS):
        return Launch(program, None, None, ())
    return Launch(program, None, os.path.basename(argv[index]), tuple(argv[index + 1:]))


def mpi_apps(argv: t.Sequence[str]) -> list[tuple[str, ...]]:
    """The command lines an MPI launcher starts, one per app context (`:` separates them); [] for other programs."""
    if not argv or os.path.basename(argv[0]) not in _MPI_LAUNCHERS:
        return []
    apps: list[tuple[str, ...]] = []
    context: list[str] = []
    for arg in list(argv[1:]) + [":"]:
        if arg != ":":
            context.append(arg)
            continue
        program = _mpi_program(context)
        if program is not None:
            apps.append(tuple(context[program:]))
        context = []
    return apps


def _mpi_program(context: list[str]) -> int | None:
    """Where the program starts in one app context; None after an option not known to take no value or one."""
    index = 0
    while index < min(len(context), _MAX_OPTIONS) and context[index].startswith("-"):
        option = context[index]
        if option in _MPI_OPTIONS_WITH_TWO_VALUES:
            index += 3
        elif option in _MPI_OPTIONS_WITH_VALUE:
            index += 2
        elif option in _MPI_FLAGS or (option.startswith("--") and option.partition("=")[0] in _MPI_OPTIONS_WITH_VALUE):
            index += 1
        else:
            return None
    return index if index < min(len(context), _MAX_OPTIONS) else None


@dataclass(frozen=True)
class Preset:
    name: str
    description: str
    grace_period_s: float
    ports: tuple[int, ...]
    shm_patterns: tuple[str, ...]
    modules: frozenset[str] = frozenset()
    commands: frozenset[str] = frozenset()                  # console scripts / binaries that always serve
    # A console script, binary or Python module (python -m X) and the subcommands that serve ("serve api_server").
    commands_with_subcommand: tuple[tuple[str, frozenset[str]], ...] = ()
    title_prefixes: tuple[str, ...] = ()                     # renamed workers (setproctitle)
    comm_names: frozenset[str] = frozenset()                 # workers renamed with prctl(PR_SET_NAME): comm only
    command_pattern: t.Pattern[str] | None = None            # binaries whose released names vary
    dynamo_engines: frozenset[str] = frozenset()             # NVIDIA Dynamo running this engine in its own process
    extra: t.Callable[[Launch, str], str | None] | None = None

    def match(self, argv: t.Sequence[str], comm: str) -> str | None:
        """Why this process is one of the engine's, or None."""
        launch = parse_launch(argv)
        first = argv[0] if argv else ""
        for prefix in self.title_prefixes:
            if first.startswith(prefix) or (not first and comm.startswith(prefix[:15])):
                return f"worker title {prefix}*"
        if comm in self.comm_names:
            return f"worker named {comm} (its comm)"
        if launch.python_module in self.modules:
            return f"python -m {launch.python_module}"
        command = launch.command
        if command in self.commands or (command and self.command_pattern and self.command_pattern.match(command)):
            return f"program {command}"
        for name, subcommands in self.commands_with_subcommand:
            if name in (command, launch.python_module):
                subcommand = _subcommand_of(launch, subcommands)
                if subcommand:
                    return f"{'program' if name == command else 'python -m'} {name} {subcommand}"
        engine = _dynamo_engine(launch)
        if engine is not None and engine[1] in self.dynamo_engines:
            return f"NVIDIA Dynamo running {engine[1]} in its own process ({engine[0]})"
        if self.extra is not None:
            return self.extra(launch, comm)
        return None


def _subcommand_of(launch: Launch, subcommands: t.AbstractSet[str]) -> str | None:
    """The subcommand (one word or several: `serve api_server`) the launch starts, if it is one of these."""
    operands = [arg for arg in launch.args[:_MAX_OPTIONS] if not arg.startswith("-")]
    return next((sub for sub in subcommands if operands[:len(sub.split(" "))] == sub.split(" ")), None)


# NVIDIA Dynamo: `python -m dynamo.<engine>` workers, and `dynamo-run ... out=<engine>` (or `dynamo run`).
# https://github.com/ai-dynamo/dynamo (components/src/dynamo/<engine>/__main__.py, docs/guides/dynamo_run.md)
_DYNAMO_MODULE = re.compile(r"^dynamo\.(vllm|sglang|trtllm)(?:\.(?:worker|decode_worker))?$")


def _dynamo_engine(launch: Launch) -> tuple[str, str] | None:
    """(how, engine) when NVIDIA Dynamo runs an engine in this process; None for its frontend, router and tools."""
    module = _DYNAMO_MODULE.match(launch.python_module or "")
    if module:
        return f"python -m {launch.python_module}", module.group(1)
    if launch.command == "dynamo-run" or (launch.command == "dynamo" and launch.subcommand == "run"):
        out = next((arg[4:] for arg in launch.args[:_MAX_OPTIONS] if arg.startswith("out=")), None)
        if out:
            return f"{launch.command} out={out}", out
    return None


def _triton_with_trtllm(launch: Launch, comm: str) -> str | None:
    """Triton serving TensorRT-LLM: the launch script, or tritonserver configured for the backend."""
    if launch.script == "launch_triton_server.py":
        return "script launch_triton_server.py"
    if launch.command == "tritonserver" and any("tensorrtllm" in arg or "tensorrt_llm" in arg for arg in launch.args):
        return "program tritonserver with the tensorrtllm backend"
    if launch.command == "trtllmExecutorWorker" or comm == "trtllmExecutorW":
        return "program trtllmExecutorWorker"
    if launch.program in _MPI_LAUNCHERS:
        return _mpi_launch_of_trtllm([launch.program, *launch.args])
    return None


def _mpi_launch_of_trtllm(argv: list[str]) -> str | None:
    """mpirun starting TensorRT-LLM ranks: it leads them all, rank 0 included, whatever rank 0's own argv says.

    launch_triton_server.py starts `mpirun -n 1 tritonserver ... : -n 1 tritonserver ... --load-model=tensorrt_llm`
    and exits; rank 0's tritonserver names no backend, so the mpirun, whose argv holds every rank, is the root.
    With one rank, only the launcher's own shape tells: every app ends with
    --backend-config=python,shm-region-prefix-name=prefix<rank>_ and a trailing `:`.
    """
    apps = mpi_apps(argv)
    trtllm = PRESETS["trtllm"]
    # A launcher starting a launcher is never followed: one level, whatever a command line nests.
    for app in apps:
        why = None if os.path.basename(app[0]) in _MPI_LAUNCHERS else trtllm.match(app, os.path.basename(app[0])[:15])
        if why:
            return f"{argv[0]} starting {why}"
    signature = [f"--backend-config=python,shm-region-prefix-name=prefix{rank}_" for rank in range(len(apps))]
    if apps and argv[-1] == ":" and all(os.path.basename(app[0]) == "tritonserver" and app[-1] == expected
                                        for app, expected in zip(apps, signature)):
        return f"{argv[0]} starting tritonserver ranks the way launch_triton_server.py does"
    return None


_NCCL_TORCH_SHM = ("nccl-*", "torch_*", "psm_*", "sem.mp-*")
# Ray names an actor's worker after the actor's class: vLLM, TensorRT-LLM, LMDeploy and Aphrodite all call theirs
# RayWorkerWrapper, so the title tells the engines apart no more than its class name does.
_RAY_WORKER_WRAPPER = "ray::RayWorkerWrapper"

PRESETS: dict[str, Preset] = {preset.name: preset for preset in (
    Preset(
        name="sglang",
        description="SGLang: python -m sglang.launch_server, sglang serve, sglang::* and sgl_diffusion::* workers, "
                    "the SGLang router, NVIDIA Dynamo's SGLang workers",
        grace_period_s=10,
        ports=(30000,),
        shm_patterns=_NCCL_TORCH_SHM,
        modules=frozenset({"sglang.launch_server", "sglang.srt.server", "sglang_router.launch_server",
                           "sglang_router.launch_router"}),
        commands_with_subcommand=(("sglang", frozenset({"serve", "launch_server"})),
                                  ("sglang.multimodal_gen.runtime.entrypoints.cli.main", frozenset({"serve"}))),
        # sgl_diffusion::scheduler_TP0, _U0, :1 (multimodal_gen/runtime/managers/gpu_worker.py); 15 characters, all comm.
        title_prefixes=("sglang::", "sgl_diffusion::"),
        dynamo_engines=frozenset({"sglang"}),
    ),
    Preset(
        name="vllm",
        description="vLLM: vllm serve, the OpenAI API server module, VLLM::* processes, vLLM Ray workers, "
                    "NVIDIA Dynamo's vLLM workers",
        grace_period_s=15,
        ports=(8000,),
        shm_patterns=_NCCL_TORCH_SHM,
        modules=frozenset({"vllm.entrypoints.openai.api_server", "vllm.entrypoints.api_server"}),
        commands_with_subcommand=(("vllm", frozenset({"serve"})),),
        title_prefixes=("VLLM::", "VllmWorkerProcess", _RAY_WORKER_WRAPPER, "ray::RayWorkerVllm"),
        dynamo_engines=frozenset({"vllm", "vllm0_7", "vllm0_8"}),
    ),
    Preset(
        name="tgi",
        description="Text Generation Inference: text-generation-launcher, -router, and the -server shards",
        grace_period_s=90,
        ports=(8080,),
        shm_patterns=("nccl-*", "torch_*"),
        commands=frozenset({"text-generation-launcher", "text-generation-router"}),
        commands_with_subcommand=(("text-generation-server", frozenset({"serve"})),),
    ),
    Preset(
        name="trtllm",
        description="TensorRT-LLM: trtllm-serve, trtllm-llmapi-launch and its MGMN nodes, mpirun starting them, "
                    "Triton serving the TensorRT-LLM backend, its Ray workers, NVIDIA Dynamo's TensorRT-LLM workers",
        grace_period_s=30,
        ports=(8000,),
        shm_patterns=_NCCL_TORCH_SHM,
        commands=frozenset({"trtllm-serve", "trtllm-llmapi-launch"}),
        modules=frozenset({"tensorrt_llm.commands.serve", "tensorrt_llm.llmapi.mgmn_leader_node",
                           "tensorrt_llm.llmapi.mgmn_worker_node"}),
        title_prefixes=(_RAY_WORKER_WRAPPER,),
        dynamo_engines=frozenset({"trtllm"}),
        extra=_triton_with_trtllm,
    ),
    Preset(
        name="triton",
        description="Triton Inference Server: tritonserver (trtserver before 2020) and its Python backend stubs",
        grace_period_s=30,
        ports=(8000, 8001, 8002),
        shm_patterns=("nccl-*", "triton_*"),
        commands=frozenset({"tritonserver", "trtserver", "triton_python_backend_stub"}),
    ),
    Preset(
        name="llamacpp",
        description="llama.cpp: llama-server, python -m llama_cpp.server, NVIDIA Dynamo running llama.cpp",
        grace_period_s=10,
        ports=(8080,),
        shm_patterns=(),
        commands=frozenset({"llama-server"}),
        modules=frozenset({"llama_cpp.server"}),
        dynamo_engines=frozenset({"llamacpp"}),
    ),
    Preset(
        name="ollama",
        description="Ollama: ollama serve and its model runners",
        grace_period_s=10,
        ports=(11434,),
        shm_patterns=(),
        commands=frozenset({"ollama_llama_server"}),
        commands_with_subcommand=(("ollama", frozenset({"serve", "runner"})),),
    ),
    Preset(
        name="lmdeploy",
        description="LMDeploy: lmdeploy serve api_server and proxy, the OpenAI API server module, its engine process "
                    "(ZMQMPEngine) and Ray workers",
        # launch_server.py gives each data-parallel server 15 s after SIGTERM before SIGKILL.
        grace_period_s=15,
        ports=(23333,),
        shm_patterns=_NCCL_TORCH_SHM,
        modules=frozenset({"lmdeploy.serve.openai.api_server", "lmdeploy.serve.proxy.proxy"}),
        commands_with_subcommand=(("lmdeploy", frozenset({"serve api_server", "serve proxy"})),),
        title_prefixes=(_RAY_WORKER_WRAPPER,),
        comm_names=frozenset({"ZMQMPEngine"}),
    ),
    Preset(
        name="aphrodite",
        description="Aphrodite Engine: aphrodite run (or serve), the OpenAI API server module, APHRODITE::* processes "
                    "and Ray workers",
        grace_period_s=15,  # a vLLM fork: the same shutdown
        ports=(2242,),
        shm_patterns=_NCCL_TORCH_SHM,
        modules=frozenset({"aphrodite.endpoints.openai.api_server", "aphrodite.entrypoints.openai.api_server"}),
        commands_with_subcommand=(("aphrodite", frozenset({"run", "serve"})),),
        title_prefixes=("APHRODITE::", _RAY_WORKER_WRAPPER),
    ),
    Preset(
        name="koboldcpp",
        description="KoboldCpp: koboldcpp.py and the released koboldcpp binaries (koboldcpp-linux-x64-cuda1150, ...)",
        grace_period_s=10,
        ports=(5001,),
        shm_patterns=(),
        commands=frozenset({"koboldcpp.py"}),
        command_pattern=re.compile(r"^koboldcpp(?:-linux-(?:x64|arm64)(?:-[a-z0-9]+)*)?$"),
    ),
    Preset(
        name="mlcllm",
        description="MLC LLM: mlc_llm serve and router, python -m mlc_llm.serve.server, its disco workers",
        grace_period_s=10,
        ports=(8000,),
        shm_patterns=("nccl-*",),
        modules=frozenset({"mlc_llm.serve.server", "mlc_llm.cli.worker"}),
        commands_with_subcommand=(("mlc_llm", frozenset({"serve", "router"})),),
    ),
)}
ALL = "all"
NAMES = tuple(sorted(PRESETS)) + (ALL,)


def select(names: t.Iterable[str]) -> list[Preset]:
    """The presets behind a list of names (`all` for every one); unknown names are the caller's check."""
    chosen: list[Preset] = []
    for name in names:
        for preset in PRESETS.values() if name == ALL else [PRESETS[name]]:
            if preset not in chosen:
                chosen.append(preset)
    return chosen


def unknown(names: t.Iterable[str]) -> list[str]:
    return [name for name in names if name not in PRESETS and name != ALL]


def match_any(presets: t.Iterable[Preset], argv: t.Sequence[str], comm: str) -> str | None:
    for preset in presets:
        why = preset.match(argv, comm)
        if why:
            return f"preset {preset.name}: {why}"
    return None


def claimants(presets: t.Iterable[Preset], argv: t.Sequence[str], comm: str) -> list[Preset]:
    """Every one of these presets that claims the process (a title several engines share has several)."""
    return [preset for preset in presets if preset.match(argv, comm)]


def _comm_in(comm: str, names: t.AbstractSet[str]) -> bool:
    """The kernel keeps 15 characters of a program name (ansible-playbook shows as ansible-playboo)."""
    return comm in names or (len(comm) == 15 and any(len(name) > 15 and name.startswith(comm) for name in names))


def own_program(argv: t.Sequence[str]) -> str:
    """What a command line runs: an interpreter's script (or Python module), else argv[0]'s basename."""
    if not argv:
        return ""
    launch = parse_launch(argv)
    if _PYTHON.match(launch.program) or launch.program in _SHELLS:
        return launch.script or launch.python_module or launch.program
    if _SCRIPT_INTERPRETERS.match(launch.program) and not {"-e", "-E"} & set(argv[1:]):
        script = next((arg for arg in argv[1:] if not arg.startswith(("-", "+"))), None)
        if script is not None:
            return os.path.basename(script)
    return launch.program


def runs_program(argv: t.Sequence[str], comm: str, names: t.AbstractSet[str]) -> bool:
    """Whether the process is one of these programs, by its command line or by the kernel's comm."""
    return own_program(argv) in names or _comm_in(comm, names)


def is_wrapper(argv: t.Sequence[str], comm: str) -> bool:
    """A program that runs another command and waits for it (sudo, timeout, sh -c, watch, ...)."""
    program = os.path.basename(argv[0]) if argv else ""
    return program in _WRAPPERS or _comm_in(comm, frozenset(_WRAPPERS)) or \
        (program in _SHELLS and _shell_string(argv) is not None)


def untitled_worker(argv: t.Sequence[str], comm: str) -> str | None:
    """What a GPU-holding worker is that names no engine, so that no preset can safely claim it.

    vLLM's multiprocessing workers (comm pt_main_thread, argv `python -c "from multiprocessing.spawn import
    spawn_main; ..." --multiprocessing-fork`) and TensorRT-LLM's mpi4py workers look like any PyTorch or mpi4py
    program's; orphaned after their server died, only the GPU they hold ties them to it.
    """
    if match_any(PRESETS.values(), argv, comm):
        return None
    launch = parse_launch(argv)
    if launch.python_module == "mpi4py.futures.server":
        return "an mpi4py worker (python -m mpi4py.futures.server)"
    if comm == "pt_main_thread" or (_PYTHON.match(launch.program) and "--multiprocessing-fork" in argv):
        return f"a Python multiprocessing worker ({comm})"
    return None


def orphan_advice(argv: t.Sequence[str], comm: str) -> str | None:
    """What a GPU holder left behind by its engine is, and which option of inference_server_kill stops it."""
    owner = next((preset.name for preset in PRESETS.values() if preset.match(argv, comm)), None)
    if owner:
        return f"the {owner} preset names it; inference_server_kill with servers=[{owner}] stops it"
    untitled = untitled_worker(argv, comm)
    if untitled:
        return f"{untitled}, which no server preset names; inference_server_kill with gpu_holders=true stops it"
    return None


def is_bystander(argv: t.Sequence[str], comm: str) -> bool:
    """A program that only looks at servers, an interactive shell, or a wrapper that runs only such programs."""
    if _comm_in(comm, BYSTANDERS):
        return True
    return _viewer_only(argv, 0)


def _viewer_only(argv: t.Sequence[str], depth: int) -> bool:
    if depth > _MAX_DEPTH or not argv:
        return False
    program = os.path.basename(argv[0])
    if own_program(argv) in BYSTANDERS:
        return True
    if program in _SHELLS:
        text = _shell_string(argv)
        if text is None:
            return own_program(argv) == program  # no script and no -c: a terminal's shell
        commands = _shell_commands(text)
        return commands is not None and bool(commands) and all(_viewer_only(command, depth + 1) for command in commands)
    if program == "watch":
        inner = _wrapped_command(argv)
        commands = _shell_commands(" ".join(inner)) if inner else None
        return bool(commands) and all(_viewer_only(command, depth + 1) for command in commands or ())
    if program in _WRAPPERS:
        string = _option_value(argv, "-c") if program in ("su", "runuser", "script", "flock") else None
        inner = _wrapped_command(argv)
        if program in ("su", "runuser") and string is None and "-u" not in argv[1:]:
            return True  # su - user: a terminal's shell
        if not inner and string is None:
            return program in ("sudo", "doas")  # sudo -i, sudo -s: a terminal's shell
        commands = _shell_commands(string) if string is not None else [inner]
        return bool(commands) and all(_viewer_only(command, depth + 1) for command in commands or ())
    return False


def _shell_string(argv: t.Sequence[str]) -> str | None:
    """The command string of `sh -c STRING` (also with options before -c, such as bash -lc)."""
    for index, arg in enumerate(argv[1:], 1):
        if not arg.startswith("-"):
            return None
        if arg.startswith("-") and not arg.startswith("--") and "c" in arg[1:] and index + 1 < len(argv):
            return argv[index + 1]
    return None


def _option_value(argv: t.Sequence[str], option: str) -> str | None:
    for index, arg in enumerate(argv[1:], 1):
        if arg == option and index + 1 < len(argv):
            return argv[index + 1]
        if arg.startswith("--command="):
            return arg.partition("=")[2]
    return None


def _wrapped_command(argv: t.Sequence[str]) -> list[str]:
    """The command a wrapper runs: after its options, their values and its leading operands."""
    with_value, operands = _WRAPPERS.get(os.path.basename(argv[0]), ("", 0))
    index = 1
    while index < len(argv):
        arg = argv[index]
        if arg == "--":
            index += 1
            break
        if arg.startswith("--") or (arg.startswith("-") and len(arg) > 1):
            short = arg[1:] if not arg.startswith("--") else ""
            # -u root, -uroot, -nu root: the value is the rest of the word or the next word.
            takes = next((position for position, letter in enumerate(short) if letter in with_value), None)
            index += 2 if takes is not None and takes == len(short) - 1 else 1
            continue
        if _ASSIGNMENT.match(arg):
            index += 1
            continue
        break
    return list(argv[index + operands:])


def _shell_commands(text: str) -> list[list[str]] | None:
    """The simple commands of a shell string that start a program, or None if the string is not plainly readable."""
    lexer = shlex.shlex(text, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    try:
        words = list(lexer)
    except ValueError:
        return None
    commands: list[list[str]] = [[]]
    redirect_target = False
    for word in words:
        if redirect_target:  # the file or descriptor of a redirection (> log, 2>&1), not a command
            redirect_target = False
        elif _SHELL_OPERATOR.match(word) and ("<" in word or ">" in word):
            redirect_target = True
        elif _SHELL_OPERATOR.match(word):
            commands.append([])
        elif commands[-1] or not (word in _SHELL_PREFIXES or _ASSIGNMENT.match(word)):
            commands[-1].append(word)
    found = [command for command in commands if command and command[0] not in _SHELL_HARMLESS]
    if any(command[0] in ("for", "case", "select", "function") or "$" in command[0] or "`" in command[0]
           for command in found):
        return None
    return found


# Where each engine says it is ready: HTTP GET answers 200 only once it can serve (server_ready's default health_path).
# SGLang: /health answers 503 while the server starts (python/sglang/srt/entrypoints/http_server.py health_generate);
# vLLM: /health (vllm/entrypoints/openai/api_server.py); TGI: the router's /health (router/src/server.rs);
# TensorRT-LLM: trtllm-serve's /health (tensorrt_llm/serve/openai_server.py); Triton: the readiness endpoint of the
# KServe v2 protocol it speaks, /v2/health/ready (kserve docs/predict-api/v2/required_api.md);
# llama.cpp: llama-server's /health answers 503 while the model loads (tools/server/README.md);
# Ollama: GET / answers "Ollama is running" (server/routes.go);
# LMDeploy: /health (lmdeploy/serve/openai/api_server.py, the router's health()); Aphrodite: /health, as the vLLM
# server it is derived from (aphrodite/endpoints/openai/api_server.py); KoboldCpp has no health endpoint (its
# maintainer in LostRuins/koboldcpp issue 1114 points to /api/extra/*), /api/extra/version answers once the model is
# loaded, as the HTTP server starts only then; MLC LLM has none either, /v1/models answers once its engines are up
# (python/mlc_llm/serve/entrypoints/openai_entrypoints.py).
HEALTH_PATHS = {"sglang": "/health", "vllm": "/health", "tgi": "/health", "trtllm": "/health",
                "triton": "/v2/health/ready", "llamacpp": "/health", "ollama": "/", "lmdeploy": "/health",
                "aphrodite": "/health", "koboldcpp": "/api/extra/version", "mlcllm": "/v1/models"}


def health_path(preset: str, argv: t.Sequence[str]) -> str:
    """The health path of the engine this process belongs to; Triton's when a TensorRT-LLM launch is tritonserver."""
    if preset == "trtllm" and argv and os.path.basename(argv[0]) in ("tritonserver", *_MPI_LAUNCHERS):
        return HEALTH_PATHS["triton"]
    return HEALTH_PATHS[preset]
