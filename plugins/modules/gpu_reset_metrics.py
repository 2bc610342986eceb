#!/usr/bin/python
# Copyright (c) 2026, gpuops.hygiene contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: gpu_reset_metrics
short_description: Write a host's GPU reset outcome as node_exporter textfile-collector metrics
version_added: 0.1.0
description:
  - Writes the outcome of a reset or a check (the role's C(gpu_reset_result), or RV(gpuops.hygiene.gpu_host_reset#module:ansible_facts.gpu_reset_result))
    to O(textfile_dir) as Prometheus text, the same text as the P(gpuops.hygiene.gpu_prometheus_metrics#filter) filter
    gives - per-host and per-GPU gauges.
  - node_exporter's textfile collector reads every C(*.prom) file of its directory. The text is written to a temporary
    file in that directory whose name does not end in C(.prom), then renamed over the old file; the collector never
    reads a partial file nor the temporary one.
  - The role P(gpuops.hygiene.gpu_reset#role) runs it when C(gpu_reset_textfile_dir) is set; a file that cannot be
    written is a warning there and a note in the verdict's message, never the loss of the verdict.
author:
  - Gpuops Hygiene Maintainers (@gpuops)
attributes:
  check_mode:
    support: full
    description: Says whether the file would change and writes nothing.
  diff_mode:
    support: none
    description: The metrics change with every check (their timestamp); no diff is shown.
options:
  result:
    description: The host's outcome (C(gpu_reset_result)).
    type: dict
    required: true
  textfile_dir:
    description: The directory node_exporter's textfile collector reads (C(--collector.textfile.directory)). It must exist.
    type: path
    required: true
  name:
    description: The file's name; by default C(gpuops_hygiene_<host>.prom), the host's name with every character but
      C([A-Za-z0-9_.-]) as C(_).
    type: str
requirements:
  - Python >= 3.9 on the managed host
"""

EXAMPLES = r"""
- name: Reset the host and keep the outcome
  gpuops.hygiene.gpu_host_reset:
    expected_gpu_count: 8
  register: reset

- name: Export the outcome to node_exporter
  gpuops.hygiene.gpu_reset_metrics:
    result: "{{ reset.ansible_facts.gpu_reset_result }}"
    textfile_dir: /var/lib/prometheus/node-exporter
"""

RETURN = r"""
path:
  description: The file written (or that would be, in check mode).
  returned: always
  type: str
  sample: /var/lib/prometheus/node-exporter/gpuops_hygiene_gpu-b01.prom
"""

from ansible_collections.gpuops.hygiene.plugins.module_utils import _metrics, _textfile
from ansible_collections.gpuops.hygiene.plugins.module_utils._errors import GpuOpsError
from ansible_collections.gpuops.hygiene.plugins.module_utils._module import new_module


def argument_spec() -> dict:
    return dict(
        result=dict(type="dict", required=True),
        textfile_dir=dict(type="path", required=True),
        name=dict(type="str"),
    )


def main() -> None:
    module = new_module(argument_spec(), supports_check_mode=True)
    params = module.params
    name = params["name"] or _textfile.file_name(str(params["result"].get("host") or "unknown"))
    path = f"{params['textfile_dir'].rstrip('/')}/{name}"
    try:
        text = _metrics.prometheus_metrics(params["result"])
        changed = True if module.check_mode else _textfile.write(params["textfile_dir"], name, text)
    except GpuOpsError as error:
        module.fail_json(msg=str(error), path=path)
    module.exit_json(changed=changed, path=path)


if __name__ == "__main__":
    main()
