# Copyright (c) 2026, gpuops.hygiene contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations


class ModuleDocFragment:
    # The server's log file, shared by server_launch (which writes it) and server_ready (which reads its end); the
    # argument spec is plugins/module_utils/_options.py server_log().
    DOCUMENTATION = r"""
options:
  log_path:
    description:
      - The server's log file, an absolute path (inside the container with O(container)).
      - M(gpuops.hygiene.server_launch) sends the server's output there (truncated at the launch, as C(| tee) does)
        and ends it with a line that says how the server exited; M(gpuops.hygiene.server_ready) reads the last
        64 KiB of it to say why a server failed (CUDA out of memory, a taken port, an NCCL error, the last line of a
        Python traceback) and how it exited.
      - The path is resolved without following any symbolic link (a link anywhere on it is refused) and must be a
        regular file; it is read by a child process with a 2 s deadline (a stalled network filesystem cannot hang the
        task).
    type: path
"""
