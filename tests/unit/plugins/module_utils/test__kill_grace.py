"""Each target's grace period is the one of the preset that selected it: a stop of `servers: [all]` gives SGLang's
workers SGLang's 10 s, not TGI's 90 s, and says in its result which grace applied to which target.

The trees are real processes with the engines' argv (gpusim.proctitle; the shapes and their sources are in
test__presets_real.py); those that ignore SIGTERM do so for real.
"""

from __future__ import annotations

import re

from ansible_collections.gpuops.hygiene.plugins.module_utils import _kill

from . import test__presets_trees as trees

grow = trees.grow  # a fixture: real processes with any argv
planned, tree = trees.planned, trees.tree

SGLANG = "python3 -m sglang.launch_server --model-path Qwen/Qwen2.5-7B-Instruct --tp 2 --port 30000"
TGI = "text-generation-launcher --model-id HuggingFaceH4/zephyr-7b-beta --num-shard 1 --port 8080"
SHARD = ("/opt/conda/bin/python3.11 /opt/conda/bin/text-generation-server serve HuggingFaceH4/zephyr-7b-beta "
         "--uds-path /tmp/text-generation-server --logger-level INFO --json-output")
SENT = re.compile(r"sent (SIG[A-Z]+) to pid (\d+) ")


def sglang_tree(ignore_term: bool = False) -> dict:
    return tree(SGLANG, tree("sglang::scheduler_TP0", ignore_term=ignore_term),
                tree("sglang::scheduler_TP1", ignore_term=ignore_term), tree("sglang::detokenizer"))


def graces(view, request: _kill.Request, pids: list[int]) -> dict[int, float]:
    request.resolve()
    result = _kill.run(request, lambda message: None)
    return {entry["pid"]: entry["grace_period"] for entry in result["planned"] if entry["pid"] in pids}


def test_the_plan_gives_each_target_the_grace_of_its_own_preset(grow, proc_view):
    sglang = grow(sglang_tree())
    tgi = grow(tree(TGI, tree(SHARD)))
    shared = grow(tree("ray::RayWorkerWrapper"))
    custom = grow(tree("/opt/serve/bin/my-llm-server --port 9000"))
    request = _kill.Request(servers=("all",), patterns=("^/opt/serve/bin/my-llm-server",), check_mode=True,
                            proc=proc_view.path)
    found = graces(proc_view, request, sglang + tgi + shared + custom)
    assert request.grace_period == 90 and request.timeout == 120  # the longest: the stop's own limits
    assert {found[pid] for pid in sglang} == {10}
    assert {found[pid] for pid in tgi} == {90}
    # A title that vLLM, TensorRT-LLM, LMDeploy and Aphrodite share gets the longest of their graces.
    assert found[shared[0]] == 30
    assert found[custom[0]] == _kill.DEFAULT_GRACE_S


def test_a_member_reached_only_through_a_tree_gets_its_leaders_grace(grow, proc_view):
    pids = grow(tree(TGI, tree("/usr/bin/python3 /opt/tools/shard_helper.py --watch")))
    assert graces(proc_view, _kill.Request(servers=("tgi",), check_mode=True, proc=proc_view.path), pids) == \
        {pids[0]: 90, pids[1]: 90}
    assert planned(proc_view, ("tgi",), pids)[pids[1]][0] == \
        f"member of the tree of pid {pids[0]} (preset tgi: program text-generation-launcher)"


def test_an_explicit_grace_period_applies_to_every_target(grow, proc_view):
    pids = grow(sglang_tree()) + grow(tree(TGI, tree(SHARD)))
    found = graces(proc_view, _kill.Request(servers=("all",), grace_period=3, check_mode=True, proc=proc_view.path),
                   pids)
    assert set(found.values()) == {3}


def test_sglang_workers_that_ignore_sigterm_get_sigkill_after_sglangs_grace_not_tgis(grow, proc_view):
    """The default `servers: [all]` (grace_period 90, for TGI) next to SGLang workers ignoring SIGTERM."""
    sglang = grow(sglang_tree(ignore_term=True))
    tgi = grow(tree(TGI, tree(SHARD)))
    logged: list[str] = []
    result = _kill.run(_kill.Request(servers=("all",), proc=proc_view.path), logged.append)
    # SIGKILL came when SGLang's grace was over: never earlier, and nowhere near TGI's 90 s.
    assert 10 <= result["elapsed_s"] < 45, result["elapsed_s"]
    assert result["grace_period"] == 90 and result["survivors"] == []
    killed = {entry["pid"]: entry for entry in result["killed"]}
    assert set(killed) == set(sglang + tgi)
    workers = sglang[1:3]
    for pid in workers:
        assert killed[pid]["signals"] == ["SIGTERM", "SIGKILL"] and killed[pid]["grace_period"] == 10
    for pid in [sglang[0], sglang[3]]:
        assert killed[pid]["signals"] == ["SIGTERM"] and killed[pid]["grace_period"] == 10
    for pid in tgi:
        assert killed[pid]["signals"] == ["SIGTERM"] and killed[pid]["grace_period"] == 90
    sigkills = {int(pid) for name, pid in (SENT.search(line).groups() for line in logged if SENT.search(line))
                if name == "SIGKILL"}
    assert sigkills == set(workers)
