# Copyright (c) 2026, gpuops.hygiene contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The modules' AnsibleModule: bad input fails in one line even where ansible-core's own checks raise instead."""

from __future__ import annotations

import sys
import typing as t

from ansible.module_utils.basic import AnsibleModule


def _too_large_for_float(value: t.Any) -> bool:
    if isinstance(value, bool) or not isinstance(value, int):
        return False
    try:
        float(value)
    except OverflowError:
        return True
    return False


def new_module(argument_spec: dict[str, t.Any], **kwargs: t.Any) -> AnsibleModule:
    """AnsibleModule(argument_spec=argument_spec, **kwargs), failing in one line on a float option given an integer
    too large for a float.

    ansible-core checks a float option with float(), whose OverflowError it lets escape: a traceback instead of a
    message. The module is then made once more with its float options unchecked, only to fail naming the option.
    """
    try:
        return AnsibleModule(argument_spec=argument_spec, **kwargs)
    except OverflowError:
        floats = [name for name, spec in argument_spec.items() if spec.get("type") == "float"]
        unchecked = {name: dict(spec, type="raw") if name in floats else spec for name, spec in argument_spec.items()}
        module = AnsibleModule(argument_spec=unchecked, **kwargs)
        for name in floats:
            if _too_large_for_float(module.params.get(name)):
                module.fail_json(msg=f"{name} must be a number of at most {sys.float_info.max:.4g}, "
                                     f"not an integer of {module.params[name].bit_length()} bits")
        raise
