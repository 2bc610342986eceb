# Copyright (c) 2026, gpuops.hygiene contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Filters that turn the collection's results into verdicts and reports."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.gpuops.hygiene.plugins.module_utils import _metrics
from ansible_collections.gpuops.hygiene.plugins.plugin_utils import _ready_report, _registered, _report


def gpu_reset_result(before, host, kill=None, after=None, leftovers=None, gpu_reset=None, check_mode=False,
                     verify_only=False):
    try:
        return _registered.reset_result(before, host, kill=kill, after=after, leftovers=leftovers,
                                        gpu_reset=gpu_reset, check_mode=check_mode, verify_only=verify_only)
    except (KeyError, TypeError, ValueError) as error:
        raise AnsibleFilterError(f"gpu_reset_result: the registered results are not those of the collection's "
                                 f"modules ({error})") from error


def gpu_reset_outcomes(hostvars, hosts):
    return _report.outcomes(hostvars, hosts)


def gpu_reset_not_clean(pattern, hostvars):
    return _report.not_clean_pattern(pattern, hostvars)


def gpu_summary_table(results):
    return _report.summary_table(results)


def gpu_junit_xml(results, suite="gpu-hygiene", ready=None):
    return _report.junit_xml(results, suite, ready=ready)


def gpu_json_report(results, ready=None):
    return _report.json_report(results, ready=ready)


def gpu_prometheus_metrics(results, checked_at=None):
    return _metrics.prometheus_metrics(results, checked_at)


def server_ready_outcomes(hostvars, hosts):
    return _ready_report.outcomes(hostvars, hosts)


def server_ready_table(results):
    return _ready_report.table_text(results)


class FilterModule:
    def filters(self):
        return {
            "gpu_reset_result": gpu_reset_result,
            "gpu_reset_outcomes": gpu_reset_outcomes,
            "gpu_reset_not_clean": gpu_reset_not_clean,
            "gpu_summary_table": gpu_summary_table,
            "gpu_junit_xml": gpu_junit_xml,
            "gpu_json_report": gpu_json_report,
            "gpu_prometheus_metrics": gpu_prometheus_metrics,
            "server_ready_outcomes": server_ready_outcomes,
            "server_ready_table": server_ready_table,
        }
