"""stop_units: which manager's units are stopped, and only after the manager names the targets' cgroup."""

from __future__ import annotations

import os
import stat

import pytest

from ansible_collections.gpuops.hygiene.plugins.module_utils import _kill, _procfs, _signal

SYSTEM = _procfs.ServiceUnit("sglang.service", "/system.slice/sglang.service", "system")
USER_SSHD = _procfs.ServiceUnit("sshd.service", "/user.slice/user-1000.slice/user@1000.service/app.slice/sshd.service",
                                "user", 1000)
CONTAINER_SSHD = _procfs.ServiceUnit("sshd.service", "/lxc/200/ns/system.slice/sshd.service", "other")


@pytest.fixture
def systemctl(tmp_path, monkeypatch):
    """A systemctl on PATH that logs its argv and answers `show -p ControlGroup --value` with $CONTROL_GROUP."""
    log = tmp_path / "calls"
    script = tmp_path / "systemctl"
    script.write_text(f"""#!/bin/sh
echo "$*" >> {log}
if [ "$1" = show ]; then printf '%s\\n' "$CONTROL_GROUP"; fi
exit 0
""")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")

    def calls() -> list[str]:
        return log.read_text().splitlines() if log.exists() else []
    return calls


def _stop(units, monkeypatch, control_group):
    monkeypatch.setenv("CONTROL_GROUP", control_group)
    request = _kill.Request(servers=("sglang",), stop_units=True)
    request.resolve()
    warnings: list[str] = []
    outcome = _signal.stop_units({unit: [] for unit in units}, _signal.Executor(request, lambda message: None), warnings)
    return outcome, warnings


def test_a_system_unit_is_stopped_after_its_manager_names_the_targets_cgroup(systemctl, monkeypatch):
    outcome, warnings = _stop([SYSTEM], monkeypatch, "/system.slice/sglang.service")
    assert outcome == {SYSTEM: "stopped with systemctl stop"} and warnings == []
    assert systemctl() == ["show -p ControlGroup --value sglang.service", "stop sglang.service"]


@pytest.mark.parametrize("control_group", ["", "/system.slice/system-sglang.slice/sglang.service"])
def test_a_unit_whose_cgroup_the_manager_does_not_confirm_is_not_stopped(systemctl, monkeypatch, control_group):
    outcome, warnings = _stop([SYSTEM], monkeypatch, control_group)
    assert outcome[SYSTEM] == (f"not stopped: systemctl show -p ControlGroup sglang.service says {control_group!r}, "
                               f"not the targets' cgroup /system.slice/sglang.service")
    assert warnings == [f"sglang.service: {outcome[SYSTEM]}"]
    assert systemctl() == ["show -p ControlGroup --value sglang.service"]


def test_units_of_users_and_containers_are_reported_and_systemctl_never_runs(systemctl, monkeypatch):
    outcome, warnings = _stop([USER_SSHD, CONTAINER_SSHD], monkeypatch, "/system.slice/sshd.service")
    assert outcome[USER_SSHD].startswith("reported, never stopped: a unit of the user manager of uid 1000")
    assert "systemctl --user -M 1000@ stop sshd.service" in outcome[USER_SSHD]
    assert outcome[CONTAINER_SSHD].startswith("reported, never stopped: not a unit of this host's system manager")
    assert systemctl() == [] and warnings == []
