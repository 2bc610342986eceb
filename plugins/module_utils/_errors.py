# Copyright (c) 2026, gpuops.hygiene contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The collection's own exception: helpers raise it, only a module's main() reports it."""

from __future__ import annotations


class GpuOpsError(Exception):
    """Bad input, or a host the collection cannot act on safely."""
