# Copyright (c) 2026, gpuops.hygiene contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations


class ModuleDocFragment:
    # What every module that runs on the host keeps there between runs: plugins/module_utils/_bytecode.py.
    # No options: "options: {}" only because Ansible refuses a fragment without them.
    DOCUMENTATION = r"""
options: {}
notes:
  - Run as root, the module keeps the compiled code of the collection's module_utils in
    C(/run/gpuops-hygiene/bytecode) (tmpfs, emptied at boot; the directory mode 0700, each entry 0600), so that the
    next runs do not compile them again from the zip Ansible ships them in. An entry is named by a digest of
    Python's bytecode magic, the module's name and its exact source; it is read only from a directory and a file that
    root owns and nobody else can write, never through a link. A run that adds an entry leaves at most 256 (about
    seven sets of the collection's module_utils, a few MB), the oldest removed first, so collection upgrades without
    a reboot do not fill the tmpfs. Runs as another user neither read nor write it; check mode writes it too (it is
    no state the module manages).
"""
