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

and the start-up (see "start-up" below):

  startup_s      seconds before the server starts its workers (imports, arguments)     default 0
  load_s         seconds each worker takes to claim its memory, in load_steps steps    default 0
  load_steps     how many allocations a worker claims its memory in                   default 4
  bind_after_load  the HTTP port is bound once every worker has loaded, as the real
                 engines do (uvicorn, TGI's router start after the model)             default false
  health_after_s the health endpoint answers 503 this long after the port is bound     default 0
  health_hang    the HTTP server accepts connections and never answers                 default false
  fail           cuda_oom, nccl_error (worker fail_rank fails), or traceback (the
                 server itself fails): the engine's real log lines, then its exit      default none
  fail_rank      the worker that fails                                                 default 0
  fail_after_s   seconds after its start at which it fails                             default 0.5
"""

from __future__ import annotations

import argparse
import ctypes
import json
import mmap
import multiprocessing
import os
import queue
import secrets
import select
import signal
import socket
import subprocess
import sys
import threading
import time

from gpusim import proctitle
from gpusim.world import driver_request

PR_SET_PDEATHSIG = 1
DEFAULT_MIB = 95944  # ~93.7 GiB: what a TP8 server leaves used on a 97,887 MiB GPU
_KEEP: list = []     # mappings and descriptors that must live as long as the process
_WAKEUP: list[int] = []  # signal_wakeup()'s descriptor, once made


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
    driver keeps the memory: the mappings keep the device files open). With the knob load_s the memory is claimed in
    load_steps allocations spread over that many seconds, as weights are copied to the GPU shard by shard."""
    minor = visible_gpus()[device]
    opened = [os.open(path, os.O_RDWR) for path in ("/dev/nvidiactl", "/dev/nvidia-uvm", f"/dev/nvidia{minor}")]
    for fd in (opened[0], opened[2]):
        _map_descriptor(fd, 4096)
    load_s = float(knob("load_s", 0))
    steps = max(1, int(knob("load_steps", 4))) if load_s > 0 else 1
    for step in range(steps):
        if step:
            time.sleep(load_s / steps)
        driver_request({"op": "alloc", "minor": minor, "mib": mib // steps + (mib % steps if step == 0 else 0)})
    if load_s > 0:
        time.sleep(load_s / steps)
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


def signal_wakeup() -> int:
    """The read end of a pipe the interpreter writes to on every signal, whichever thread the kernel gives it to.

    Python runs handlers in the main thread only; a signal the kernel hands to another thread (any thread of a
    stopped process may take it when SIGCONT resumes them) leaves a main thread blocked in sleep() asleep. The
    engines' servers wait the way asyncio does (uvicorn, zmq poll loops): on a wakeup descriptor, so a signal wakes
    the main thread wherever it lands."""
    if not _WAKEUP:
        read, write = os.pipe()
        os.set_blocking(write, False)
        signal.set_wakeup_fd(write)
        _WAKEUP.append(read)
    return _WAKEUP[0]


def sleep_forever() -> None:
    wakeup = signal_wakeup()
    while True:
        select.select([wakeup], [], [])
        os.read(wakeup, 512)


# The engines' health endpoints (see HEALTH_PATHS in plugins/module_utils/_presets.py for their sources).
HEALTH_PATHS = ("/health", "/health_generate", "/v2/health/ready")


def serve_http(server: socket.socket) -> None:
    """Answer every request with a small completion, forever; a health request gets 503 for health_after_s."""
    healthy_at = time.monotonic() + float(knob("health_after_s", 0))
    hanging: list[socket.socket] = []
    wakeup = signal_wakeup()
    while True:
        ready = select.select([server, wakeup], [], [], 1.0)[0]
        if wakeup in ready:
            os.read(wakeup, 512)
        if server not in ready:
            continue
        try:
            conn = server.accept()[0]
        except OSError:
            continue
        if knob("health_hang", False):
            hanging.append(conn)  # accepted, never read, never answered
            continue
        with conn:
            conn.settimeout(2.0)
            try:
                request = conn.recv(65536)
                path = request.split(b" ", 2)[1].decode("ascii", "replace") if request.count(b" ") >= 2 else ""
                status, body = b"200 OK", b'{"text": "ok"}'
                if path.split("?")[0] in HEALTH_PATHS and time.monotonic() < healthy_at:
                    status, body = b"503 Service Unavailable", b""
                conn.sendall(b"HTTP/1.1 " + status + b"\r\nContent-Type: application/json\r\nContent-Length: "
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


# --- start-up: how long it takes, and how it fails ----------------------------------------------------------
#
# Each failure writes what the engine itself prints (quoted from real runs, source next to each line) to its
# stdout/stderr, which the launch sends to the server's log, and ends the tree the way the engine does.

# The exception a failing worker (cuda_oom, nccl_error) or server (traceback) ends its traceback with.
CAUSES = {
    # torch's caching allocator (c10/cuda/CUDACachingAllocator.cpp) as an SGLang scheduler printed it:
    # https://github.com/sgl-project/sglang/issues/27670
    ("cuda_oom", "sglang"): (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 150.00 MiB. GPU 0 has a total capacity of "
        "23.52 GiB of which 125.38 MiB is free. Process 6397 has 386.00 MiB memory in use. Including non-PyTorch "
        "memory, this process has 22.98 GiB memory in use. Of the allocated memory 17.72 GiB is allocated by PyTorch, "
        "and 213.98 MiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting "
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory "
        "Management  (https://docs.pytorch.org/docs/stable/notes/cuda.html#optimizing-memory-usage-with-pytorch-cuda-alloc-conf)"),
    # vLLM's start-up memory check (vllm/v1/worker/gpu_worker.py): https://github.com/pytorch/pytorch/issues/175666
    ("cuda_oom", "vllm"): (
        "ValueError: Free memory on device cuda:0 (19.77/22.05 GiB) on startup is less than desired GPU memory "
        "utilization (0.9, 19.84 GiB). Decrease GPU memory utilization or reduce GPU memory used by other processes."),
    # A TGI shard: https://github.com/huggingface/text-generation-inference/issues/866
    ("cuda_oom", "tgi"): (
        "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 128.00 MiB (GPU 0; 15.77 GiB total "
        "capacity; 15.37 GiB already allocated; 13.62 MiB free; 15.77 GiB allowed; 15.40 GiB reserved in total by "
        "PyTorch) If reserved memory is >> allocated memory try setting max_split_size_mb to avoid fragmentation.  "
        "See documentation for Memory Management and PYTORCH_CUDA_ALLOC_CONF"),
    # pynccl's NCCL_CHECK (vllm/distributed/device_communicators/pynccl_wrapper.py; SGLang and TGI's torch print
    # the same NCCL text): https://github.com/vllm-project/vllm/issues/6732
    ("nccl_error", "sglang"): "RuntimeError: NCCL error: unhandled cuda error (run with NCCL_DEBUG=INFO for details)",
    ("nccl_error", "vllm"): "RuntimeError: NCCL error: unhandled cuda error (run with NCCL_DEBUG=INFO for details)",
    ("nccl_error", "tgi"): "RuntimeError: NCCL error: unhandled cuda error (run with NCCL_DEBUG=INFO for details)",
    # transformers' AutoConfig (models/auto/configuration_auto.py) on a model type it does not know:
    # https://github.com/vllm-project/vllm/issues/13579, https://github.com/sgl-project/sglang/issues/37183
    ("traceback", "sglang"): (
        "ValueError: The checkpoint you are trying to load has model type `qwen2_5_vl` but Transformers does not "
        "recognize this architecture. This could be because of an issue with the checkpoint, or because your version "
        "of Transformers is out of date."),
    # A TGI shard's own check: https://github.com/huggingface/text-generation-inference/issues/1354
    ("traceback", "tgi"): "ValueError: `num_heads` must be divisible by `num_shards` (got `num_heads`: 71 and `num_shards`: 2",
}
CAUSES[("traceback", "vllm")] = CAUSES[("traceback", "sglang")]
WORKER_FAILURES = ("cuda_oom", "nccl_error")


def _now(fmt: str = "%Y-%m-%d %H:%M:%S") -> str:
    return time.strftime(fmt)


def _print(*lines: str) -> None:
    sys.stderr.write("".join(line + "\n" for line in lines))
    sys.stderr.flush()


def _traceback(frames: list[tuple[str, int, str, str]], cause: str, prefix: str = "") -> list[str]:
    lines = [prefix + "Traceback (most recent call last):"]
    for path, line, function, code in frames:
        lines += [f'{prefix}  File "{path}", line {line}, in {function}', f"{prefix}    {code}"]
    return lines + [prefix + cause]


_SITE = "/usr/local/lib/python3.12/dist-packages"
# Frames of the real tracebacks quoted above (kvcache-ai/ktransformers issue 1969 for SGLang's scheduler, vllm issue
# 23176 for vLLM's API server, text-generation-inference issue 574 for a TGI shard).
_FRAMES = {
    "sglang": [(f"{_SITE}/sglang/srt/managers/scheduler.py", 3118, "run_scheduler_process", "scheduler = Scheduler("),
               (f"{_SITE}/sglang/srt/model_executor/model_runner.py", 495, "initialize", "self.load_model()")],
    "vllm": [(f"{_SITE}/vllm/v1/executor/multiproc_executor.py", 597, "worker_main", "worker = WorkerProc(*args, **kwargs)"),
             (f"{_SITE}/vllm/v1/worker/worker_base.py", 603, "init_device", "self.worker.init_device()")],
    "tgi": [("/opt/conda/bin/text-generation-server", 8, "<module>", "sys.exit(app())"),
            ("/opt/conda/lib/python3.11/site-packages/text_generation_server/server.py", 268, "serve_inner",
             "model = get_model_with_lora_adapters(")],
}
_SERVER_FRAMES = {
    "sglang": [(f"{_SITE}/sglang/launch_server.py", 14, "<module>", "launch_server(server_args)"),
               (f"{_SITE}/transformers/models/auto/configuration_auto.py", 1151, "from_pretrained", "raise ValueError(")],
    "vllm": [(f"{_SITE}/vllm/entrypoints/openai/api_server.py", 1895, "run_server", "async with build_async_engine_client(args) as engine_client:"),
             (f"{_SITE}/transformers/models/auto/configuration_auto.py", 1151, "from_pretrained", "raise ValueError(")],
}


def worker_failure(engine: str, rank: int) -> str | None:
    """The failure this worker is to have (a knob), or None."""
    kind = knob("fail")
    return kind if kind in WORKER_FAILURES and int(knob("fail_rank", 0)) == rank else None


def fail_worker(engine: str, rank: int, kind: str) -> None:
    """Claim part of the memory, wait fail_after_s, print the engine's traceback and exit as its worker does."""
    time.sleep(float(knob("fail_after_s", 0.5)))
    cause = CAUSES[(kind, engine)]
    if engine == "sglang":
        # The scheduler's handler logs the exception, then tells its parent with SIGQUIT (scheduler.py).
        lines = _traceback(_FRAMES["sglang"], cause)
        _print(f"[{_now()} TP{rank}] Scheduler hit an exception: {lines[0]}", *lines[1:])
        os.kill(os.getppid(), signal.SIGQUIT)
    elif engine == "vllm":
        prefix = f"(VllmWorker TP{rank} pid={os.getpid()}) ERROR {_now('%m-%d %H:%M:%S')} [multiproc_executor.py:597] "
        _print(prefix + "WorkerProc failed to start.", *_traceback(_FRAMES["vllm"], cause, prefix))
    else:
        _print(f"{_now('%Y-%m-%dT%H:%M:%S.000000Z')} ERROR text_generation_launcher: Error when initializing model",
               *_traceback(_FRAMES["tgi"], cause), f" rank={rank}")
    os._exit(1)


def startup(engine: str) -> None:
    """The server's own start-up: startup_s, and a failure of the server itself (traceback) before any worker."""
    time.sleep(float(knob("startup_s", 0)))
    if knob("fail") == "traceback" and engine in _SERVER_FRAMES:
        time.sleep(float(knob("fail_after_s", 0.5)))
        prefix = f"(APIServer pid={os.getpid()}) " if engine == "vllm" else ""
        _print(*_traceback(_SERVER_FRAMES[engine], CAUSES[("traceback", engine)], prefix))
        os._exit(1)


# uvicorn's start-up, then the OSError asyncio raises for a taken port (asyncio/base_events.py create_server), as
# uvicorn logs it before it exits (uvicorn/server.py): https://github.com/vllm-project/vllm/issues/7514 and
# https://github.com/wandb/openui/issues/226
def uvicorn_listen(port: int, children: list[int]) -> socket.socket:
    """Bind the HTTP port the way uvicorn does; a taken port ends the server as SGLang and vLLM end."""
    _print(f"INFO:     Started server process [{os.getpid()}]", "INFO:     Waiting for application startup.",
           "INFO:     Application startup complete.")
    try:
        return listen(port)
    except OSError as error:
        _print(f"ERROR:    [Errno {error.errno}] error while attempting to bind on address ('0.0.0.0', {port}): "
               f"{(error.strerror or '').lower()}", "INFO:     Waiting for application shutdown.",
               "INFO:     Application shutdown complete.")
        kill_all(children)
        os._exit(1)


def kill_all(pids: list[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def loaded_queue():
    return multiprocessing.get_context("spawn").Queue()


def wait_loaded(loaded, count: int, children: list[int]) -> int | None:
    """Wait until `count` workers said they have loaded; the PID of a child that died first, or None."""
    done = 0
    while done < count:
        try:
            loaded.get(timeout=0.05)
            done += 1
        except queue.Empty:
            dead = next((pid for pid in children if not _alive(pid)), None)
            if dead is not None:
                return dead
    return None


def _sglang_child_failed(children: list[int]):
    """SGLang's parent on SIGQUIT from a failed child (http_server.py launch_server): log, kill the whole tree."""
    def handler(*_args) -> None:
        # https://github.com/kvcache-ai/ktransformers/issues/1969 quotes it from SGLang.
        _print(f"[{_now()}] Received sigquit from a child process. It usually means the child failed.")
        kill_all(children)
        os.kill(os.getpid(), signal.SIGKILL)  # kill_process_tree(include_parent=True) ends with the parent itself
    return handler


# --- SGLang: python3 -m sglang.launch_server, workers sglang::scheduler_TPn and sglang::detokenizer ----


def sglang_scheduler(rank: int, loaded=None) -> None:
    _die_with_parent()
    proctitle.set_title(f"sglang::scheduler_TP{rank}")
    role = f"worker:{rank}"
    failure = worker_failure("sglang", rank)
    hold_gpu(rank, int(knob("mib", DEFAULT_MIB)) // (2 if failure else 1))
    if failure:
        fail_worker("sglang", rank, failure)
    if knob("shm", True):
        make_shm("nccl-")
    if rank == 0 and knob("dist_port"):
        listen(int(knob("dist_port")))
    if loaded is not None:
        loaded.put(rank)
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
    startup("sglang")
    bind_after_load = knob("bind_after_load", False)
    server = None if bind_after_load else listen(args.port)
    if knob("shm", True):
        from multiprocessing import shared_memory  # pylint: disable=import-outside-toplevel
        _KEEP.append(shared_memory.SharedMemory(create=True, size=1 << 20))
    if knob("fail"):
        signal.signal(signal.SIGQUIT, _sglang_child_failed(parent.children))
    loaded = loaded_queue()
    parent.children.extend(_spawn(sglang_scheduler, rank, loaded) for rank in range(args.tp))
    parent.children.append(_spawn(sglang_detokenizer))
    if knob("setsid_child", False):
        setsid_helper(None, 0, 512)
    if server is None:
        wait_loaded(loaded, args.tp, parent.children)
        server = uvicorn_listen(args.port, parent.children)
    serve_http(server)


# --- vLLM: vllm serve (console script), VLLM::EngineCore, VLLM::Worker_TPn -----------------------------


def vllm_worker(rank: int, loaded=None) -> None:
    _die_with_parent()
    proctitle.set_title(f"VLLM::Worker_TP{rank}")
    failure = worker_failure("vllm", rank)
    hold_gpu(rank, int(knob("mib", DEFAULT_MIB)) // (2 if failure else 1))
    if failure:
        fail_worker("vllm", rank, failure)
    if knob("shm", True):
        make_shm("psm_")
    if rank == 0 and knob("dist_port"):
        listen(int(knob("dist_port")))
    if loaded is not None:
        loaded.put(rank)
    on_sigterm(f"worker:{rank}", _exit_after_delay)
    sleep_forever()


def vllm_engine_core(tp: int, ready=None) -> None:
    _die_with_parent()
    proctitle.set_title("VLLM::EngineCore")
    parent = Parent("engine_core")
    loaded = loaded_queue()
    parent.children = [_spawn(vllm_worker, rank, loaded) for rank in range(tp)]
    if wait_loaded(loaded, tp, parent.children) is not None:
        # The engine core's start-up failure (vllm/v1/engine/core.py run_engine_core): it stops its workers.
        _print(f"(EngineCore_DP0 pid={os.getpid()}) ERROR {_now('%m-%d %H:%M:%S')} [core.py:708] EngineCore failed to start.")
        kill_all(parent.children)
        os._exit(1)
    if ready is not None:
        ready.put("ready")
    sleep_forever()


def _vllm_wait_for_engine(ready, children: list[int], engine_ready: threading.Event) -> None:
    """The API server's wait for its engine core (vllm/v1/engine/utils.py wait_for_engine_startup): an engine core
    that dies first ends the server with https://github.com/vllm-project/vllm/issues/23176's traceback."""
    if wait_loaded(ready, 1, children) is None:
        engine_ready.set()
        return
    prefix = f"(APIServer pid={os.getpid()}) "
    _print(*_traceback([(f"{_SITE}/vllm/v1/engine/utils.py", 759, "wait_for_engine_startup",
                         'raise RuntimeError("Engine core initialization failed. "')],
                       "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}",
                       prefix))
    os._exit(1)


def vllm_cli() -> int:
    parser = argparse.ArgumentParser(prog="vllm")
    parser.add_argument("command", choices=["serve"])
    parser.add_argument("model")
    parser.add_argument("--tensor-parallel-size", "-tp", dest="tp", type=int, default=1)
    parser.add_argument("--port", type=int, default=8000)
    args = parser.parse_known_args()[0]
    parent = Parent()
    startup("vllm")
    bind_after_load = knob("bind_after_load", False)
    server = None if bind_after_load else listen(args.port)
    ready = loaded_queue()
    parent.children = [_spawn(vllm_engine_core, args.tp, ready)]
    engine_ready = threading.Event()
    threading.Thread(target=_vllm_wait_for_engine, args=(ready, parent.children, engine_ready), daemon=True).start()
    if knob("setsid_child", False):
        setsid_helper(None, 0, 512)
    if server is None:
        engine_ready.wait()
        server = uvicorn_listen(args.port, parent.children)
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
    failure = worker_failure("tgi", args.rank)
    if knob("fail") == "traceback" and args.rank == int(knob("fail_rank", 0)):
        failure = "traceback"  # a TGI shard checks the model itself
    hold_gpu(args.rank, int(knob("mib", DEFAULT_MIB)) // (2 if failure else 1))
    if failure:
        fail_worker("tgi", args.rank, failure)
    if knob("shm", True):
        make_shm("nccl-")
    loaded_fd = os.environ.get("GPUSIM_LOADED_FD")
    if loaded_fd:
        os.write(int(loaded_fd), b"%d\n" % args.rank)
        os.close(int(loaded_fd))
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
    try:
        server = listen(args.port)
    except OSError as error:
        # Rust's io::Error as the router's main returns it (std's Display: "<message> (os error N)").
        _print(f"Error: Axum({error.strerror} (os error {error.errno}))")
        os._exit(1)
    serve_http(server)


def _tgi_shards_loaded(loaded_read: int, shards: list[subprocess.Popen]) -> int | None:
    """The launcher's wait for its shards (launcher/src/main.rs): the rank of a shard that died first, or None."""
    buffer, done = b"", 0
    while done < len(shards):
        for rank, shard in enumerate(shards):
            if shard.poll() is not None:
                return rank
        if select.select([loaded_read], [], [], 0.05)[0]:
            chunk = os.read(loaded_read, 4096)
            buffer += chunk
            done = buffer.count(b"\n")
    return None


def tgi_launcher(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="text-generation-launcher")
    parser.add_argument("--model-id", default="/data/model")
    parser.add_argument("--num-shard", type=int, default=1)
    parser.add_argument("--port", type=int, default=8080)
    args = parser.parse_known_args(argv)[0]
    proctitle.set_argv(["text-generation-launcher", "--model-id", args.model_id, "--num-shard",
                        str(args.num_shard), "--port", str(args.port)])
    parent = Parent()
    time.sleep(float(knob("startup_s", 0)))
    loaded_read, loaded_write = os.pipe()
    shards = []
    for rank in range(args.num_shard):
        shards.append(subprocess.Popen(
            ["text-generation-server", "serve", args.model_id, "--sharded", "--rank", str(rank), "--world-size",
             str(args.num_shard), "--uds-path", "/tmp/text-generation-server"],
            pass_fds=(loaded_write,), env=dict(os.environ, GPUSIM_LOADED_FD=str(loaded_write))))
        parent.children.append(shards[-1].pid)
    os.close(loaded_write)
    failed = _tgi_shards_loaded(loaded_read, shards)
    if failed is not None:
        # https://github.com/huggingface/text-generation-inference/issues/1354
        stamp = _now("%Y-%m-%dT%H:%M:%S.000000Z")
        _print(f"{stamp} ERROR text_generation_launcher: Shard {failed} failed to start",
               f"{stamp}  INFO text_generation_launcher: Shutting down shards", "Error: ShardCannotStart")
        kill_all(parent.children)
        os._exit(1)
    router = subprocess.Popen(["python3", "-m", "gpusim.engines", "tgi-router", "--port", str(args.port),
                               "--model-id", args.model_id, TITLE_ROOM], executable="/usr/bin/python3")
    parent.children.append(router.pid)
    if router.wait() == 1:  # the router's own error exit (a taken port), not a stop
        # https://github.com/huggingface/text-generation-inference (launcher/src/main.rs: the webserver's exit)
        stamp = _now("%Y-%m-%dT%H:%M:%S.000000Z")
        _print(f"{stamp} ERROR text_generation_launcher: Webserver Crashed",
               f"{stamp}  INFO text_generation_launcher: Shutting down shards", "Error: WebserverFailed")
        kill_all(parent.children)
        os._exit(1)
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
