#!/usr/bin/python
# Copyright (c) 2026, gpuops.hygiene contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: server_launch
short_description: Start an inference server detached in tmux, or restart its systemd unit
version_added: 0.1.0
description:
  - With O(argv), starts the command detached in a new tmux session named O(session), as people start servers by
    hand. The command is a list of words executed as they are, never a string a shell reads; a string is refused
    before anything runs.
  - "With O(log_path), a few lines of Python (run by the host's Python, or C(/usr/bin/python3) inside a container)
    start the server in the pane and copy its output to the pane and to the log (truncated first, as C(| tee) does);
    when the server ends they write C(gpuops.hygiene.server_launch: pid N exited with code C) (or C(was killed by
    signal S)) to both, which M(gpuops.hygiene.server_ready) reports. The log is opened without following a symbolic
    link and must be a regular file."
  - A tmux session of that name that still runs is never replaced (it may be someone's shell); the task fails and
    names what it runs. One whose server has just ended is waited for, up to 5 s.
  - With O(unit), runs C(systemctl restart) on that unit (the unit's own configuration says where its output goes).
  - With O(container), run on the Proxmox node, everything runs inside that container through C(pct exec), with the
    container's own tmux, systemctl and Python.
author:
  - Gpuops Hygiene Maintainers (@gpuops)
attributes:
  check_mode:
    support: full
    description: Checks the arguments and whether the session is free, and returns the command it would run.
  diff_mode:
    support: none
    description: Nothing to compare, it starts a process.
extends_documentation_fragment:
  - gpuops.hygiene.bytecode
  - gpuops.hygiene.server_log
  - gpuops.hygiene.scope
options:
  argv:
    description:
      - The server's command, a list of words (C([python3, -m, sglang.launch_server, --port, "30000"])). C(argv[0]) is
        looked up on the E(PATH) of the tmux server.
      - A string is refused, as is a first word with spaces or C(=) in it (a whole command line written as one word).
      - Exactly one of O(argv) and O(unit).
    type: raw
  unit:
    description: A systemd unit to restart with C(systemctl restart) (C(sglang.service)). Exactly one of O(argv) and O(unit).
    type: str
  session:
    description: The name of the tmux session for O(argv) (letters, digits, C(_) and C(-)).
    type: str
    default: server
  chdir:
    description: The working directory of the server started with O(argv).
    type: path
    default: /
requirements:
  - Python >= 3.9 on the managed host
  - tmux on the host (inside the container with O(container)) for O(argv)
notes:
  - Always reports a change; it does not check whether the same server already runs (stop it first, for example with
    the playbook C(gpuops.hygiene.restart_servers), which resets the host before it launches).
seealso:
  - module: gpuops.hygiene.server_ready
  - module: gpuops.hygiene.gpu_host_reset
"""

EXAMPLES = r"""
- name: Start SGLang TP8 in tmux session sglang, its output in /var/log/sglang.log
  gpuops.hygiene.server_launch:
    argv: [python3, -m, sglang.launch_server, --model-path, /models/llama-70b, --tp, "8", --port, "30000"]
    session: sglang
    log_path: /var/log/sglang.log

- name: Restart the vLLM unit of Proxmox container 200, from its node
  gpuops.hygiene.server_launch:
    unit: vllm.service
    container: "200"
  delegate_to: pve-node-1
"""

RETURN = r"""
launched_with:
  description: V(tmux) or V(systemd).
  returned: always
  type: str
command:
  description: The command run (on the host, or inside the container), before C(pct exec) for a container.
  returned: always
  type: list
  elements: str
pid:
  description:
    - With O(argv), the PID of the pane's process (the launcher with O(log_path), else the server); with O(unit), the
      unit's MainPID. As the host, or the container, numbers them. Null in check mode.
  returned: always
  type: int
session:
  description: The tmux session, with O(argv).
  returned: when argv is given
  type: str
unit:
  description: The unit, with O(unit).
  returned: when unit is given
  type: str
argv:
  description: The server's command as given, or null.
  returned: always
  type: list
  elements: str
log_path:
  description: Where the server's output goes, or null.
  returned: always
  type: str
check_mode:
  description: Whether nothing was started (check mode).
  returned: always
  type: bool
"""

from ansible_collections.gpuops.hygiene.plugins.module_utils import _bytecode

_bytecode.install()  # first: the imports below then compile once per host, not once per run

from ansible_collections.gpuops.hygiene.plugins.module_utils import _launch, _options
from ansible_collections.gpuops.hygiene.plugins.module_utils._errors import GpuOpsError
from ansible_collections.gpuops.hygiene.plugins.module_utils._module import new_module
from ansible_collections.gpuops.hygiene.plugins.module_utils._platform import check_host


def argument_spec() -> dict:
    return dict(**_options.launch(), **_options.server_log(), **_options.scope())


def _request(params: dict, check_mode: bool) -> _launch.Request:
    return _launch.Request(argv=params["argv"], unit=params["unit"], session=params["session"],
                           log_path=params["log_path"], chdir=params["chdir"], container=params["container"],
                           check_mode=check_mode)


def main() -> None:
    module = new_module(argument_spec(), supports_check_mode=True)
    try:
        check_host()
        result = _launch.launch(_request(module.params, module.check_mode))
    except GpuOpsError as error:
        module.fail_json(msg=str(error))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
