"""The filter wrappers: registered results in, a clear Ansible error for anything else."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gpuops.hygiene.plugins.filter.gpu_reports import FilterModule


def test_filters_are_registered():
    assert sorted(FilterModule().filters()) == ["gpu_json_report", "gpu_junit_xml", "gpu_prometheus_metrics",
                                                "gpu_reset_not_clean", "gpu_reset_outcomes", "gpu_reset_result",
                                                "gpu_summary_table", "server_ready_outcomes", "server_ready_table"]


def test_the_hosts_that_are_not_clean_are_the_pattern_less_the_clean_ones():
    hostvars = {"a": {"gpu_reset_result": {"verdict": "clean"}}, "b": {"gpu_reset_result": {"verdict": "busy"}},
                "c": {}, "d": {"gpu_reset_result": {"steps": {}}}, "e": {"gpu_reset_result": {"verdict": "clean"}}}
    not_clean = FilterModule().filters()["gpu_reset_not_clean"]
    assert not_clean("blackwell", hostvars) == "blackwell,!a,!e"
    assert not_clean(["gpu-b0*", "llm-*"], hostvars) == "gpu-b0*,llm-*,!a,!e"


@pytest.mark.parametrize("before", [{"changed": False}, {"ansible_facts": {"gpu_memory": {"gpus": "x"}}}, None])
def test_results_of_other_modules_are_an_ansible_error(before):
    with pytest.raises(AnsibleFilterError, match="gpu_reset_result: the registered results are not those of the collection"):
        FilterModule().filters()["gpu_reset_result"](before, "gpu-1")
