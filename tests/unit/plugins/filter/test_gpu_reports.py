"""The filter wrappers: registered results in, a clear Ansible error for anything else."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gpuops.hygiene.plugins.filter.gpu_reports import FilterModule


def test_filters_are_registered():
    assert sorted(FilterModule().filters()) == ["gpu_json_report", "gpu_junit_xml", "gpu_prometheus_metrics",
                                                "gpu_reset_outcomes", "gpu_reset_result", "gpu_summary_table",
                                                "server_ready_outcomes", "server_ready_table"]


@pytest.mark.parametrize("before", [{"changed": False}, {"ansible_facts": {"gpu_memory": {"gpus": "x"}}}, None])
def test_results_of_other_modules_are_an_ansible_error(before):
    with pytest.raises(AnsibleFilterError, match="gpu_reset_result: the registered results are not those of the collection"):
        FilterModule().filters()["gpu_reset_result"](before, "gpu-1")
