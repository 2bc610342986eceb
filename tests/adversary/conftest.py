"""The adversary: hostile worlds (gpusim.hostile) built for real, the modules run against them, invariants checked.

Two hypothesis profiles (ADVERSARY_PROFILE): `ci` (the default) draws a fixed, derandomized set of worlds
(ADVERSARY_EXAMPLES, 30 unless set) and does not shrink, so that CI is reproducible and bounded in time; `deep`
(make adversary) draws new worlds every run (ADVERSARY_EXAMPLES, 300 unless set), shrinks what it finds, and
keeps failing examples in tests/output/adversary-db to try them first next time.
"""

from __future__ import annotations

import os
import sys

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis.database import DirectoryBasedExampleDatabase

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

_SLOW_WORLDS = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much,
                HealthCheck.function_scoped_fixture]
settings.register_profile("ci", max_examples=int(os.environ.get("ADVERSARY_EXAMPLES", "30")), derandomize=True,
                          database=None, deadline=None, phases=(Phase.explicit, Phase.generate),
                          suppress_health_check=_SLOW_WORLDS, print_blob=True)
settings.register_profile("deep", max_examples=int(os.environ.get("ADVERSARY_EXAMPLES", "300")), deadline=None,
                          database=DirectoryBasedExampleDatabase(os.path.join(os.path.dirname(HERE), "output",
                                                                              "adversary-db")),
                          suppress_health_check=_SLOW_WORLDS, print_blob=True)
PROFILE = os.environ.get("ADVERSARY_PROFILE", "ci")


def pytest_collection_modifyitems(items):
    for item in items:
        item.add_marker(pytest.mark.simulator)
