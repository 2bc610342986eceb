"""The end of a server's log: why it failed, from the lines real engines print (the source next to each), and a read
that is bounded, follows no symbolic link and never opens anything but a regular file."""

from __future__ import annotations

import os
import threading
import time

import pytest

from ansible_collections.gpuops.hygiene.plugins.module_utils import _ready_log

# https://github.com/sgl-project/sglang/issues/27670 and https://github.com/kvcache-ai/ktransformers/issues/1969
SGLANG_OOM = """\
[2026-05-01 15:16:15 TP2] Scheduler hit an exception: Traceback (most recent call last):
  File "/root/sglang/python/sglang/srt/managers/scheduler.py", line 3118, in run_scheduler_process
    scheduler = Scheduler(
                ^^^^^^^^^^
torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 150.00 MiB. GPU 0 has a total capacity of 23.52 GiB \
of which 125.38 MiB is free. Process 6397 has 386.00 MiB memory in use.
[06-09 17:46:28] Rank 0 scheduler is dead. Please check if there are relevant logs.
[2026-05-01 15:16:15] Received sigquit from a child process. It usually means the child failed.
"""
# https://github.com/vllm-project/vllm/issues/21661 (worker) and https://github.com/vllm-project/vllm/issues/23176
VLLM_NCCL = """\
(VllmWorker TP1 pid=761) ERROR 11-04 18:02:56 [v1/executor/multiproc_executor.py:597]     raise \
RuntimeError(f"NCCL error: {error_str}")
(VllmWorker TP1 pid=761) ERROR 11-04 18:02:56 [v1/executor/multiproc_executor.py:597] RuntimeError: NCCL error: \
unhandled cuda error (run with NCCL_DEBUG=INFO for details)
(APIServer pid=1179246) Traceback (most recent call last):
(APIServer pid=1179246)   File "/home/ss345/vllm-local-build/vllm/vllm/v1/engine/utils.py", line 759, in wait_for_engine_startup
(APIServer pid=1179246)     raise RuntimeError("Engine core initialization failed. "
(APIServer pid=1179246) RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}
"""
# https://github.com/vllm-project/vllm/issues/7514
UVICORN_PORT = """\
INFO:     Started server process [6593]
INFO:     Waiting for application startup.
INFO:     Application startup complete.
ERROR:    [Errno 98] error while attempting to bind on address ('0.0.0.0', 8000): address already in use
INFO:     Waiting for application shutdown.
INFO:     Application shutdown complete.
"""
# https://github.com/huggingface/text-generation-inference/issues/1354
TGI_TRACEBACK = """\
  File "/opt/conda/lib/python3.10/site-packages/text_generation_server/models/custom_modeling/flash_rw_modeling.py", line 138, in __init__
    raise ValueError(

ValueError: `num_heads` must be divisible by `num_shards` (got `num_heads`: 71 and `num_shards`: 2
 rank=0
2023-12-16T09:36:24.632149Z ERROR text_generation_launcher: Shard 0 failed to start
2023-12-16T09:36:24.632181Z  INFO text_generation_launcher: Shutting down shards
Error: ShardCannotStart
"""
# https://github.com/vllm-project/vllm/issues/13579 (the API server's own traceback, chained)
VLLM_CONFIG = """\
Traceback (most recent call last):
  File "/usr/local/lib/python3.12/dist-packages/transformers/models/auto/configuration_auto.py", line 1073, in from_pretrained
    config_class = CONFIG_MAPPING[config_dict["model_type"]]
KeyError: 'qwen2_5_vl'

During handling of the above exception, another exception occurred:

Traceback (most recent call last):
  File "/usr/local/lib/python3.12/dist-packages/vllm/entrypoints/openai/api_server.py", line 709, in <module>
    uvloop.run(run_server(args))
ValueError: The checkpoint you are trying to load has model type `qwen2_5_vl` but Transformers does not recognize \
this architecture. This could be because of an issue with the checkpoint, or because your version of Transformers is \
out of date.
"""


@pytest.mark.parametrize("text, kind, start", [
    (SGLANG_OOM, "cuda_oom", "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 150.00 MiB."),
    (VLLM_NCCL, "nccl_error", "RuntimeError: NCCL error: unhandled cuda error (run with NCCL_DEBUG=INFO for details)"),
    (UVICORN_PORT, "address_in_use", "ERROR:    [Errno 98] error while attempting to bind on address ('0.0.0.0', 8000)"),
])
def test_the_earliest_known_cause_is_named_with_its_line_never_a_quoted_source_line(text, kind, start):
    found = _ready_log.cause(text.splitlines())
    assert found["kind"] == kind and found["line"].startswith(start), found


def test_an_engines_own_summary_after_the_root_cause_does_not_hide_it():
    """vLLM ends with "Engine core initialization failed. See root cause above": the NCCL error above is the cause."""
    found = _ready_log.cause(VLLM_NCCL.splitlines())
    assert found["kind"] == "nccl_error"
    assert found["line"] == "RuntimeError: NCCL error: unhandled cuda error (run with NCCL_DEBUG=INFO for details)"


@pytest.mark.parametrize("text, line", [
    (TGI_TRACEBACK, "ValueError: `num_heads` must be divisible by `num_shards` (got `num_heads`: 71 and `num_shards`: 2"),
    (VLLM_CONFIG, "ValueError: The checkpoint you are trying to load has model type `qwen2_5_vl` but Transformers does "
                  "not recognize this architecture. This could be because of an issue with the checkpoint, or because "
                  "your version of Transformers is out of date."),
])
def test_without_a_known_cause_the_last_line_of_the_last_traceback(text, line):
    if text is TGI_TRACEBACK:
        text = "Traceback (most recent call last):\n" + text
    assert _ready_log.cause(text.splitlines()) == {"kind": "python_exception", "label": "Python exception", "line": line}


def test_a_log_that_says_nothing_known_has_no_cause_and_code_lines_are_no_exception():
    lines = ["INFO 06-01 22:03:08 [api_server.py:1289] vLLM API server version 0.9.0.1", "Traceback (most recent call last):",
             '  File "x.py", line 1, in f', "    raise ValueError"]
    assert _ready_log.cause(lines) is None


def test_the_launchers_last_exit_line_is_how_the_server_ended():
    lines = ["gpuops.hygiene.server_launch: pid 40 exited with code 1 at 2026-11-29T20:14:42.003Z",
             "gpuops.hygiene.server_launch: pid 41 started",
             "gpuops.hygiene.server_launch: pid 41 was killed by signal 9 (SIGKILL) at 2026-11-29T20:15:01.250Z"]
    assert _ready_log.exit_status(lines) == {"pid": 41, "code": None, "signal": "SIGKILL", "at": "2026-11-29T20:15:01.250Z"}
    assert _ready_log.exit_status(lines[:2]) == {"pid": 40, "code": 1, "signal": None, "at": "2026-11-29T20:14:42.003Z"}
    assert _ready_log.exit_status(["gpuops.hygiene.server_launch: pid 41 started"]) is None


def test_only_the_end_of_a_big_log_is_read_and_a_cut_first_line_is_dropped(tmp_path):
    log = tmp_path / "server.log"
    log.write_text("x" * 100 + "\n" + "line\n" * 50000 + "the end\n")
    tail = _ready_log.read_tail(str(log))
    assert tail.error is None and tail.lines[-1] == "the end" and tail.size == log.stat().st_size
    assert sum(len(line) + 1 for line in tail.lines) <= _ready_log.LOG_TAIL_BYTES
    assert all(line in ("line", "the end") for line in tail.lines)


def test_a_progress_bar_keeps_its_last_state_and_control_characters_are_spelled_out(tmp_path):
    log = tmp_path / "server.log"
    log.write_text("Loading safetensors checkpoint shards:  10%\rLoading safetensors checkpoint shards: 100%\n\x1b[31mred\n")
    tail = _ready_log.read_tail(str(log))
    assert tail.lines[0] == "Loading safetensors checkpoint shards: 100%"
    assert _ready_log.excerpt(tail.lines)[1] == "\\x1b[31mred"


def test_a_symbolic_link_anywhere_on_the_path_is_refused(tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "server.log").write_text("secret\n")
    os.symlink(tmp_path / "real", tmp_path / "link")
    os.symlink(tmp_path / "real" / "server.log", tmp_path / "file-link")
    for path in (tmp_path / "link" / "server.log", tmp_path / "file-link"):
        tail = _ready_log.read_tail(str(path))
        assert tail.lines == [] and "symbolic link" in tail.error


def test_a_fifo_is_not_waited_on(tmp_path):
    """Opening a FIFO for reading blocks until a writer comes: the log is opened without blocking and refused."""
    fifo = tmp_path / "server.log"
    os.mkfifo(fifo)
    started = time.monotonic()
    tail = _ready_log.read_tail(str(fifo))
    assert "is not a regular file" in tail.error and time.monotonic() - started < 1.5


def test_a_read_that_hangs_is_cut_off_at_its_deadline(tmp_path, monkeypatch):
    """The read runs in a child with a deadline: a file on a stalled filesystem costs the timeout, not the task."""
    log = tmp_path / "server.log"
    log.write_text("x\n")
    monkeypatch.setattr(_ready_log.os, "pread", lambda *args: threading.Event().wait(60))
    started = time.monotonic()
    tail = _ready_log.read_tail(str(log), timeout=0.5)
    assert "did not finish within 0.5 s" in tail.error and time.monotonic() - started < 2.5
