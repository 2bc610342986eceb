# Copyright (c) 2026, gpuops.hygiene contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""How each inference engine really launches, and which processes are therefore its own.

A preset matches launch shapes, never substrings: the interpreter running an
engine module (python -m sglang.launch_server), an engine's console script or
binary (vllm serve, text-generation-launcher, tritonserver), or the title an
engine gives its workers (sglang::scheduler_TP3, VLLM::EngineCore). A log tail,
an editor or a grep that mentions the engine never has such a shape.
"""

from __future__ import annotations

import os
import re
import typing as t
from dataclasses import dataclass

_PYTHON = re.compile(r"^(?:python|pypy)(?:\d+(?:\.\d+)?)?[a-z]?$")
# Interpreter options that take a separate value (python3 -X dev -W ignore -m ...).
_PYTHON_OPTIONS_WITH_VALUE = frozenset({"-X", "-W", "--check-hash-based-pycs"})

# Programs that only look at servers (or hold them in a terminal): a user pattern that
# matches their command line must not make them targets.
BYSTANDERS = frozenset({
    "tail", "less", "more", "most", "cat", "head", "vi", "vim", "nvim", "view", "nano", "emacs", "code",
    "grep", "egrep", "fgrep", "rg", "ag", "ack", "pgrep", "pkill", "ps", "top", "htop", "btop", "watch",
    "tmux", "tmux: server", "tmux: client", "screen", "SCREEN", "journalctl", "man", "ssh", "scp", "rsync",
    "ansible", "ansible-playbook", "ansible-pull", "nvtop", "nvitop", "gpustat",
})


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
    if not _PYTHON.match(program):
        return Launch(program, None, None, tuple(argv[1:]))
    index = 1
    while index < len(argv):
        arg = argv[index]
        if arg == "-m" and index + 1 < len(argv):
            return Launch(program, argv[index + 1], None, tuple(argv[index + 2:]))
        if arg.startswith("-m") and len(arg) > 2:
            return Launch(program, arg[2:], None, tuple(argv[index + 1:]))
        if arg == "-c" or arg.startswith("-c"):
            return Launch(program, None, None, ())
        if arg in _PYTHON_OPTIONS_WITH_VALUE:
            index += 2
            continue
        if arg.startswith("-"):
            index += 1
            continue
        return Launch(program, None, os.path.basename(arg), tuple(argv[index + 1:]))
    return Launch(program, None, None, ())


@dataclass(frozen=True)
class Preset:
    name: str
    description: str
    grace_period_s: float
    ports: tuple[int, ...]
    shm_patterns: tuple[str, ...]
    modules: frozenset[str] = frozenset()
    commands: frozenset[str] = frozenset()                  # console scripts / binaries that always serve
    commands_with_subcommand: tuple[tuple[str, frozenset[str]], ...] = ()
    title_prefixes: tuple[str, ...] = ()                     # renamed workers (setproctitle)
    extra: t.Callable[[Launch, str], str | None] | None = None

    def match(self, argv: t.Sequence[str], comm: str) -> str | None:
        """Why this process is one of the engine's, or None."""
        launch = parse_launch(argv)
        first = argv[0] if argv else ""
        for prefix in self.title_prefixes:
            if first.startswith(prefix) or (not first and comm.startswith(prefix[:15])):
                return f"worker title {prefix}*"
        if launch.python_module in self.modules:
            return f"python -m {launch.python_module}"
        command = launch.command
        if command in self.commands:
            return f"program {command}"
        for name, subcommands in self.commands_with_subcommand:
            if command == name and launch.subcommand in subcommands:
                return f"program {name} {launch.subcommand}"
        if self.extra is not None:
            return self.extra(launch, comm)
        return None


def _triton_with_trtllm(launch: Launch, comm: str) -> str | None:
    """Triton serving TensorRT-LLM: the launch script, or tritonserver configured for the backend."""
    if launch.script == "launch_triton_server.py":
        return "script launch_triton_server.py"
    if launch.command == "tritonserver" and any("tensorrtllm" in arg or "tensorrt_llm" in arg for arg in launch.args):
        return "program tritonserver with the tensorrtllm backend"
    if launch.command == "trtllmExecutorWorker" or comm == "trtllmExecutorW":
        return "program trtllmExecutorWorker"
    return None


_NCCL_TORCH_SHM = ("nccl-*", "torch_*", "psm_*", "sem.mp-*")

PRESETS: dict[str, Preset] = {preset.name: preset for preset in (
    Preset(
        name="sglang",
        description="SGLang: python -m sglang.launch_server, sglang serve, sglang::* workers, the SGLang router",
        grace_period_s=10,
        ports=(30000,),
        shm_patterns=_NCCL_TORCH_SHM,
        modules=frozenset({"sglang.launch_server", "sglang.srt.server", "sglang_router.launch_server",
                           "sglang_router.launch_router"}),
        commands_with_subcommand=(("sglang", frozenset({"serve", "launch_server"})),),
        title_prefixes=("sglang::",),
    ),
    Preset(
        name="vllm",
        description="vLLM: vllm serve, the OpenAI API server module, VLLM::* processes, vLLM Ray workers",
        grace_period_s=15,
        ports=(8000,),
        shm_patterns=_NCCL_TORCH_SHM,
        modules=frozenset({"vllm.entrypoints.openai.api_server", "vllm.entrypoints.api_server"}),
        commands_with_subcommand=(("vllm", frozenset({"serve"})),),
        title_prefixes=("VLLM::", "VllmWorkerProcess", "ray::RayWorkerWrapper"),
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
        description="TensorRT-LLM: trtllm-serve, and Triton serving the TensorRT-LLM backend",
        grace_period_s=30,
        ports=(8000,),
        shm_patterns=_NCCL_TORCH_SHM,
        commands=frozenset({"trtllm-serve", "trtllm-llmapi-launch"}),
        modules=frozenset({"tensorrt_llm.commands.serve"}),
        extra=_triton_with_trtllm,
    ),
    Preset(
        name="triton",
        description="Triton Inference Server: tritonserver",
        grace_period_s=30,
        ports=(8000, 8001, 8002),
        shm_patterns=("nccl-*", "triton_*"),
        commands=frozenset({"tritonserver"}),
    ),
    Preset(
        name="llamacpp",
        description="llama.cpp: llama-server, python -m llama_cpp.server",
        grace_period_s=10,
        ports=(8080,),
        shm_patterns=(),
        commands=frozenset({"llama-server"}),
        modules=frozenset({"llama_cpp.server"}),
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


def is_bystander(argv: t.Sequence[str], comm: str) -> bool:
    program = os.path.basename(argv[0]) if argv else comm
    return program in BYSTANDERS or comm in BYSTANDERS
