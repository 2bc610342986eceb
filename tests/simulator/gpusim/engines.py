"""Fake inference servers with the process shapes of the real ones.

Each engine is started inside a simulated host and builds the same tree the
real engine builds: the same command lines (module entry points, console
scripts, native binaries), the same renamed workers, GPU memory held by the
workers through the simulated driver (with /dev/nvidia* open), a listening
HTTP port, and /dev/shm files. Knobs (GPUSIM_KNOBS, JSON) bend the shutdown:

  term_delay_s   seconds between SIGTERM and exit (every process)       default 0.1
  ignore_term    roles that ignore SIGTERM: parent, worker, worker:N, detokenizer, engine_core
  hang_on_term   roles whose SIGTERM handler never returns
  orphan_workers parent exits on SIGTERM without stopping its workers   default false
  setsid_child   the server double-forks a setsid helper holding memory default false
  pdeathsig      workers die with their parent (PR_SET_PDEATHSIG)       default false
  dist_port      TCP port the rank-0 worker listens on (torch/NCCL)     default none
  mib            MiB each worker holds                                  default 95944
  shm            create /dev/shm files                                  default true
"""

from __future__ import annotations

import argparse
import ctypes
import json
import mmap
import multiprocessing
import os
import secrets
import select
import signal
import socket
import subprocess
import sys
import time

from gpusim import proctitle
from gpusim.world import driver_request

PR_SET_PDEATHSIG = 1
DEFAULT_MIB = 95944  # ~93.7 GiB: what a TP8 server leaves used on a 97,887 MiB GPU
_KEEP: list = []     # mappings and descriptors that must live as long as the process


def knobs() -> dict:
    return json.loads(os.environ.get("GPUSIM_KNOBS", "{}"))


def knob(name: str, default=None):
    return knobs().get(name, default)


# --- what every GPU process does ---------------------------------------------------------------------


def visible_gpus() -> list[int]:
    """GPU minors this process can open, in order: what CUDA numbers 0, 1, 2, ..."""
    return sorted(int(name[6:]) for name in os.listdir("/dev") if name.startswith("nvidia") and name[6:].isdigit())


def hold_gpu(device: int, mib: int, mapped_only: bool = False) -> None:
    """Open the device files like a CUDA context on CUDA device `device` does, then allocate.

    A CUDA context also maps /dev/nvidiactl and /dev/nvidiaN (rw-s lines of /proc/PID/maps, as quoted in
    horovod/horovod#671 and PaddlePaddle/Paddle#13306); with mapped_only the descriptors are then closed and
    only the mappings hold the device, as a process that closes every descriptor it inherited or opened does (the
    driver keeps the memory: the mappings keep the device files open)."""
    minor = visible_gpus()[device]
    opened = [os.open(path, os.O_RDWR) for path in ("/dev/nvidiactl", "/dev/nvidia-uvm", f"/dev/nvidia{minor}")]
    for fd in (opened[0], opened[2]):
        _map_descriptor(fd, 4096)
    driver_request({"op": "alloc", "minor": minor, "mib": mib})
    if mapped_only:
        for fd in opened:
            os.close(fd)
    else:
        _KEEP.extend(opened)


def _map_descriptor(fd: int, size: int) -> None:
    """mmap(MAP_SHARED) of an open file, without the duplicate descriptor Python's mmap keeps."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    address = libc.mmap(None, size, mmap.PROT_READ | mmap.PROT_WRITE, mmap.MAP_SHARED, fd, 0)
    if address in (None, ctypes.c_void_p(-1).value):
        raise OSError(ctypes.get_errno(), f"mmap of descriptor {fd}")


def map_file(path: str, size: int, create: bool = False) -> None:
    """Map a file and close its descriptor: only /proc/PID/maps still shows it (Python's mmap keeps a dup)."""
    flags = os.O_RDWR | (os.O_CREAT | os.O_EXCL if create else 0)
    fd = os.open(path, flags, 0o600)
    try:
        if create:
            os.ftruncate(fd, size)
        _map_descriptor(fd, size)
    finally:
        os.close(fd)


def make_shm(prefix: str, size: int = 1 << 20) -> str:
    """A /dev/shm file that stays mapped after its descriptor is closed (as NCCL and torch leave them)."""
    path = f"/dev/shm/{prefix}{secrets.token_hex(4)}"
    map_file(path, size, create=True)
    return path


def listen(port: int) -> socket.socket:
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("0.0.0.0", port))
    server.listen(64)
    _KEEP.append(server)
    return server


def _roles_match(setting, role: str) -> bool:
    roles = setting if isinstance(setting, list) else ([setting] if setting else [])
    base = role.split(":", 1)[0]
    return role in roles or base in roles or "all" in roles


def on_sigterm(role: str, stop) -> None:
    """Install the SIGTERM behaviour of one role: ignore, hang, or stop()."""
    if _roles_match(knob("ignore_term", []), role):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    elif _roles_match(knob("hang_on_term", []), role):
        signal.signal(signal.SIGTERM, lambda *_: time.sleep(10 ** 9))
    else:
        signal.signal(signal.SIGTERM, lambda *_: stop())


def _exit_after_delay() -> None:
    time.sleep(float(knob("term_delay_s", 0.1)))
    os._exit(0)


def _die_with_parent() -> None:
    if knob("pdeathsig", False):
        ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def sleep_forever() -> None:
    while True:
        time.sleep(3600)


def serve_http(server: socket.socket) -> None:
    """Answer every request with a small completion; forever."""
    while True:
        ready = select.select([server], [], [], 1.0)[0]
        if not ready:
            continue
        try:
            conn = server.accept()[0]
        except OSError:
            continue
        with conn:
            conn.settimeout(2.0)
            try:
                conn.recv(65536)
                body = b'{"text": "ok"}'
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
                             + str(len(body)).encode() + b"\r\nConnection: close\r\n\r\n" + body)
            except OSError:
                pass


class Parent:
    """A server parent that stops its children on SIGTERM (unless told to orphan them)."""

    def __init__(self, role: str = "parent") -> None:
        self.children: list[int] = []
        on_sigterm(role, self.stop)

    def stop(self) -> None:
        if not knob("orphan_workers", False):
            for pid in self.children:
                try:
                    os.kill(pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and any(_alive(pid) for pid in self.children):
                time.sleep(0.02)
        _exit_after_delay()


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            return handle.read().rpartition(b")")[2].split()[0] != b"Z"
    except OSError:
        return False


def setsid_helper(title_args: list[str] | None, gpu: int, mib: int) -> None:
    """Double fork: a helper in its own session, no longer a descendant of the server."""
    child = os.fork()
    if child:
        os.waitpid(child, 0)
        return
    os.setsid()
    if os.fork():
        os._exit(0)
    on_sigterm("helper", _exit_after_delay)
    if title_args:
        proctitle.set_argv(title_args)
    hold_gpu(gpu, mib)
    sleep_forever()


def _spawn(target, *args) -> int:
    process = multiprocessing.get_context("spawn").Process(target=target, args=args)
    process.start()
    return process.pid


# --- SGLang: python3 -m sglang.launch_server, workers sglang::scheduler_TPn and sglang::detokenizer ----


def sglang_scheduler(rank: int) -> None:
    _die_with_parent()
    proctitle.set_title(f"sglang::scheduler_TP{rank}")
    role = f"worker:{rank}"
    hold_gpu(rank, int(knob("mib", DEFAULT_MIB)))
    if knob("shm", True):
        make_shm("nccl-")
    if rank == 0 and knob("dist_port"):
        listen(int(knob("dist_port")))
    on_sigterm(role, _exit_after_delay)
    sleep_forever()


def sglang_detokenizer() -> None:
    _die_with_parent()
    proctitle.set_title("sglang::detokenizer")
    on_sigterm("detokenizer", _exit_after_delay)
    sleep_forever()


def sglang_main() -> None:
    parser = argparse.ArgumentParser(prog="sglang.launch_server")
    parser.add_argument("--model-path", default="meta-llama/Llama-3.1-70B-Instruct")
    parser.add_argument("--tp", "--tp-size", dest="tp", type=int, default=1)
    parser.add_argument("--port", type=int, default=30000)
    parser.add_argument("--host", default="127.0.0.1")
    args = parser.parse_known_args()[0]
    parent = Parent()
    server = listen(args.port)
    if knob("shm", True):
        from multiprocessing import shared_memory  # pylint: disable=import-outside-toplevel
        _KEEP.append(shared_memory.SharedMemory(create=True, size=1 << 20))
    parent.children = [_spawn(sglang_scheduler, rank) for rank in range(args.tp)]
    parent.children.append(_spawn(sglang_detokenizer))
    if knob("setsid_child", False):
        setsid_helper(None, 0, 512)
    serve_http(server)


# --- vLLM: vllm serve (console script), VLLM::EngineCore, VLLM::Worker_TPn -----------------------------


def vllm_worker(rank: int) -> None:
    _die_with_parent()
    proctitle.set_title(f"VLLM::Worker_TP{rank}")
    hold_gpu(rank, int(knob("mib", DEFAULT_MIB)))
    if knob("shm", True):
        make_shm("psm_")
    if rank == 0 and knob("dist_port"):
        listen(int(knob("dist_port")))
    on_sigterm(f"worker:{rank}", _exit_after_delay)
    sleep_forever()


def vllm_engine_core(tp: int) -> None:
    _die_with_parent()
    proctitle.set_title("VLLM::EngineCore")
    parent = Parent("engine_core")
    parent.children = [_spawn(vllm_worker, rank) for rank in range(tp)]
    sleep_forever()


def vllm_cli() -> int:
    parser = argparse.ArgumentParser(prog="vllm")
    parser.add_argument("command", choices=["serve"])
    parser.add_argument("model")
    parser.add_argument("--tensor-parallel-size", "-tp", dest="tp", type=int, default=1)
    parser.add_argument("--port", type=int, default=8000)
    args = parser.parse_known_args()[0]
    parent = Parent()
    server = listen(args.port)
    parent.children = [_spawn(vllm_engine_core, args.tp)]
    if knob("setsid_child", False):
        setsid_helper(None, 0, 512)
    serve_http(server)
    return 0


# --- TGI: text-generation-launcher (native), text-generation-router (native), text-generation-server ---


def tgi_server_cli() -> int:
    parser = argparse.ArgumentParser(prog="text-generation-server")
    parser.add_argument("command", choices=["serve"])
    parser.add_argument("model")
    parser.add_argument("--rank", type=int, default=0)
    args = parser.parse_known_args()[0]
    _die_with_parent()
    hold_gpu(args.rank, int(knob("mib", DEFAULT_MIB)))
    if knob("shm", True):
        make_shm("nccl-")
    on_sigterm(f"worker:{args.rank}", _exit_after_delay)
    sleep_forever()
    return 0


def tgi_router(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="text-generation-router")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--model-id", required=True)
    args = parser.parse_known_args(argv)[0]
    proctitle.set_argv(["text-generation-router", "--max-concurrent-requests", "128", "--port", str(args.port),
                        "--master-shard-uds-path", "/tmp/text-generation-server-0", "--tokenizer-name",
                        args.model_id])
    on_sigterm("router", _exit_after_delay)
    serve_http(listen(args.port))


def tgi_launcher(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="text-generation-launcher")
    parser.add_argument("--model-id", default="/data/model")
    parser.add_argument("--num-shard", type=int, default=1)
    parser.add_argument("--port", type=int, default=8080)
    args = parser.parse_known_args(argv)[0]
    proctitle.set_argv(["text-generation-launcher", "--model-id", args.model_id, "--num-shard",
                        str(args.num_shard), "--port", str(args.port)])
    parent = Parent()
    for rank in range(args.num_shard):
        shard = subprocess.Popen(["text-generation-server", "serve", args.model_id, "--sharded", "--rank",
                                  str(rank), "--world-size", str(args.num_shard), "--uds-path",
                                  "/tmp/text-generation-server"])
        parent.children.append(shard.pid)
    router = subprocess.Popen(["python3", "-m", "gpusim.engines", "tgi-router", "--port", str(args.port),
                               "--model-id", args.model_id, TITLE_ROOM], executable="/usr/bin/python3")
    parent.children.append(router.pid)
    sleep_forever()


# --- single-process holders: a CUDA job, GPU infrastructure ------------------------------------------


def holder(argv: list[str]) -> None:
    """Any process that holds memory on some GPUs (or only has the devices open)."""
    parser = argparse.ArgumentParser(prog="holder")
    parser.add_argument("--title", required=True, help="argv to show, NUL-free, split on spaces")
    parser.add_argument("--gpus", default="", help="comma-separated GPU indexes")
    parser.add_argument("--mib", type=int, default=0)
    parser.add_argument("--devices-only", action="store_true")
    parser.add_argument("--mapped-only", action="store_true", help="hold the GPUs by mappings, descriptors closed")
    args = parser.parse_known_args(argv)[0]
    proctitle.set_argv(args.title.split(" "))
    for gpu in [int(gpu) for gpu in args.gpus.split(",") if gpu]:
        if args.devices_only:
            _KEEP.append(os.open(f"/dev/nvidia{visible_gpus()[gpu]}", os.O_RDWR))
        else:
            hold_gpu(gpu, args.mib, mapped_only=args.mapped_only)
    if not args.mapped_only:
        _KEEP.append(os.open("/dev/nvidiactl", os.O_RDWR))
    on_sigterm("parent", _exit_after_delay)
    sleep_forever()


# --- starting things inside a host ---------------------------------------------------------------------

FAKEPKGS = "/run/gpusim/lib/fakepkgs"
PYTHONPATH = f"{FAKEPKGS}:/run/gpusim/lib"
# An argument that only reserves room in the argv area for a longer title written over it.
TITLE_ROOM = "-" * 120


def _engine_argv(engine: str, tp: int, port: int, model: str) -> list[str]:
    if engine == "sglang":
        return ["python3", "-m", "sglang.launch_server", "--model-path", model, "--tp", str(tp), "--port", str(port),
                "--host", "0.0.0.0"]
    if engine == "vllm":
        return ["vllm", "serve", model, "--tensor-parallel-size", str(tp), "--port", str(port)]
    if engine == "tgi":
        return ["python3", "-m", "gpusim.engines", "tgi-launcher", "--model-id", model, "--num-shard", str(tp),
                "--port", str(port), TITLE_ROOM]
    raise SystemExit(f"unknown engine {engine!r}")


def detach(command: list[str], knob_json: str = "{}", log_path: str = "/tmp/server.log") -> int:
    """Start a command in its own session, as `setsid cmd &` would; return its PID."""
    env = dict(os.environ, PYTHONPATH=PYTHONPATH, GPUSIM_KNOBS=knob_json,
               PATH="/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
    with open(log_path, "ab") as log:
        process = subprocess.Popen(command, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                   start_new_session=True,
                                   executable="/usr/bin/python3" if command[0] == "python3" else None)
    return process.pid


def launch(argv: list[str]) -> int:
    """Inside a host: start an engine or any command detached, print its PID as this host sees it."""
    parser = argparse.ArgumentParser(prog="launch")
    parser.add_argument("--engine")
    parser.add_argument("--tp", type=int, default=8)
    parser.add_argument("--port", type=int, default=30000)
    parser.add_argument("--model", default="meta-llama/Llama-3.1-70B-Instruct")
    parser.add_argument("--knobs", default="{}")
    parser.add_argument("--log", default="/tmp/server.log")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    if args.engine:
        command = _engine_argv(args.engine, args.tp, args.port, args.model)
    else:
        command = args.command[1:] if args.command[:1] == ["--"] else args.command
    print(json.dumps({"pid": detach(command, args.knobs, args.log)}))
    sys.stdout.flush()
    os._exit(0)


def main(argv: list[str]) -> int:
    command, rest = argv[0], argv[1:]
    if command == "launch":
        return launch(rest)
    if command == "tgi-launcher":
        tgi_launcher(rest)
    elif command == "tgi-router":
        tgi_router(rest)
    elif command == "holder":
        holder(rest)
    else:
        raise SystemExit(f"unknown command {command!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
