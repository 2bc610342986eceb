# Copyright (c) 2026, gpuops.hygiene contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: gpu_reset_summary
short_description: The run's GPU summary - one table of every host's verdict, the fleet verdict, the CI reports
version_added: 0.1.0
description:
  - An action that runs on the controller, once per run (C(run_once)), after the role P(gpuops.hygiene.gpu_reset#role)
    has recorded C(gpu_reset_result) for each host. It reads only those records; a host of the run without one (the
    play failed on it before its verdict, a rolling reset stopped before it) is V(unknown) with that reason.
  - Returns the table as data (RV(table), with C(columns), C(header), C(rows) and C(count)) and as lines (RV(msg)),
    gives C(gpu_hygiene_clean) and C(gpu_hygiene_verdicts) to the next job of an AWX or AAP workflow (as
    M(ansible.builtin.set_stats) does), and writes the JUnit XML and JSON reports it is asked for, on the controller,
    creating their directories; a relative path is relative to the directory C(ansible-playbook) was started in.
  - It fails no host; the playbooks fail the hosts that are not clean after it, and the role's C(summary) entry point
    does the same.
author:
  - Gpuops Hygiene Maintainers (@gpuops)
options:
  hosts:
    description: The hosts of the run to report, in this order; empty means every host of the play (C(ansible_play_hosts_all)).
    type: list
    elements: str
    default: []
  junit_path:
    description: Write a JUnit XML report here (one test case per host; busy is a failure, unknown and unreachable an error).
    type: path
  report_path:
    description: Write the JSON report here (docs/gpu-report.schema.json in the collection's repository).
    type: path
  suite:
    description: The JUnit test suite's name.
    type: str
    default: gpu-hygiene
  ready:
    description:
      - Also the servers relaunched and waited for (each host's C(server_ready_result), as the playbooks
        C(gpuops.hygiene.restart_servers) and C(gpuops.hygiene.gate_benchmark) leave it) - their table in
        RV(ready_table) and RV(ready_msg), and in the reports each host's C(server) and the report's C(ready); a clean
        host whose server is not ready is a JUnit failure.
    type: bool
    default: false
extends_documentation_fragment:
  - action_common_attributes
attributes:
  action:
    support: full
    description: Runs on the controller; it reads the hosts' records and writes the reports there.
  async:
    support: none
    description: It runs at once, on the controller.
  bypass_host_loop:
    support: none
    description: Run it once for the run with C(run_once).
  check_mode:
    support: full
    description: Writes the reports in check mode too; they describe the run, which changed nothing.
  diff_mode:
    support: none
  platform:
    platforms: posix
notes:
  - Show the table with the stdout callback P(gpuops.hygiene.gpu_summary#callback), which prints RV(table) as a plain
    table, each host in its verdict's color; other callbacks show RV(msg) with C(ansible.builtin.debug).
seealso:
  - module: gpuops.hygiene.gpu_reset
  - plugin: gpuops.hygiene.gpu_summary
    plugin_type: callback
"""

EXAMPLES = r"""
- name: Show the run's table and write the CI reports
  gpuops.hygiene.gpu_reset_summary:
    junit_path: reports/gpu-gate.xml
    report_path: reports/gpu-gate.json
  register: summary
  run_once: true

- name: Show it with any stdout callback
  ansible.builtin.debug:
    msg: "{{ summary.msg }}"
  run_once: true
"""

RETURN = r"""
msg:
  description: The table as lines - the header, one row per host (worst verdicts first), the count.
  returned: always
  type: list
  elements: str
table:
  description: The same table as data - C(header), C(rows) (each with C(host), C(verdict), C(gpus_clean), C(mib_freed),
    C(stopped), C(seconds), C(why), as printed) and C(count).
  returned: always
  type: dict
clean:
  description: Every host of the run is clean.
  returned: always
  type: bool
hosts_not_clean:
  description: The hosts whose verdict is not clean, in the order of O(hosts).
  returned: always
  type: list
  elements: str
ready_table:
  description: With O(ready), the servers' table as data (rows with C(host), C(verdict) - V(ready), V(failed),
    V(timeout), V(not-launched) or V(unreachable) - C(seconds), C(gpus), C(why)).
  returned: with O(ready)
  type: dict
ready_msg:
  description: With O(ready), the servers' table as lines.
  returned: with O(ready)
  type: list
  elements: str
hosts_not_ready:
  description: With O(ready), the hosts whose server is not ready.
  returned: with O(ready)
  type: list
  elements: str
reports:
  description: The report files written.
  returned: when O(junit_path) or O(report_path) is given
  type: list
  elements: str
"""
