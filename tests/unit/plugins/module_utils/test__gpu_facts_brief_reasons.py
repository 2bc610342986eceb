"""Reasons that name processes never stand for more, or other, processes than those that hold the GPUs."""

from __future__ import annotations

from ansible_collections.gpuops.hygiene.plugins.module_utils import _gpu_facts, _nvidia_smi, _procfs


def held_texts(records, threshold):
    reasons = _gpu_facts.held_reasons(records, threshold)
    assert {reason.code for reason in reasons} <= {"gpu_held"} and not any(reason.lasting for reason in reasons)
    return [reason.text for reason in reasons]


MODEL = "--model-path meta-llama/Llama-3.1-70B-Instruct"


def holder(pid, title, argv=None):
    process = _procfs.Process(pid=pid, ppid=1, pgid=pid, sid=pid, state="S", comm=title[:15], argv=argv or (title,),
                              start_ticks=1, flags=0, threads=1, uid=0, nspid=(pid,), cgroups=("/",))
    return _gpu_facts.Holder(pid=pid, process=process, listed_by_driver=True)


def held(index, *owners):
    return (_nvidia_smi.GpuRow(index=index, pci_bus_id=f"00000000:{index:02X}:00.0"), 95944, list(owners))


def test_ranks_with_a_gap_are_named_one_by_one_not_as_a_range():
    ranks = (0, 2, 3)
    records = [held(index, holder(20 + index, f"sglang::scheduler_TP{rank}")) for index, rank in enumerate(ranks)]
    reason = held_texts(records, 100)[0]
    assert "(sglang::scheduler_TP0, sglang::scheduler_TP2, sglang::scheduler_TP3)" in reason
    assert "TP0-3" not in reason


def test_consecutive_ranks_are_a_range():
    records = [held(index, holder(20 + index, f"VLLM::Worker_TP{index + 4}")) for index in range(4)]
    assert "held by pids 20-23 (VLLM::Worker_TP4-7) in the host" in held_texts(records, 100)[0]


def test_a_long_command_line_is_cut_between_arguments_and_says_so():
    argv = ("python3", "-m", "sglang.launch_server", *MODEL.split(), "--tp", "8", "--port", "30000", "--mem-fraction",
            "0.9")
    described = holder(26, "python3", argv=argv).describe()
    shown = described[len("pid 26 ("):described.index(" ... (+")]
    assert " ".join(argv).startswith(shown + " ") and len(shown) <= 80
    assert described.endswith("words)) in the host")
    assert MODEL in described  # the model's name whole, never a prefix of it
