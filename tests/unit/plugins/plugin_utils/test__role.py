"""The role's variables on the controller: one line naming a wrong variable, old names and typos warned about,
where a reset runs, and what the run's tags leave out."""

from __future__ import annotations

import pytest
import yaml
from ansible.parsing.yaml.loader import AnsibleLoader

from ansible_collections.gpuops.hygiene.plugins.plugin_utils import _role

DEFAULTS = yaml.safe_load(open(_role.SPEC_PATH.replace("meta/argument_specs.yml", "defaults/main.yml"), encoding="utf-8"))


def settings(host="gpu-1", container_nodes=(), **variables):
    return _role.settings(host, {**DEFAULTS, **variables}, lambda value: value, container_nodes)


def test_defaults_give_the_module_its_options_and_the_role_sets_host_and_scope():
    found = settings()
    assert found.runs_on == "gpu-1" and found.container is None and found.wait_mode == "module"
    assert found.module_args["servers"] == ["all"] and found.module_args["wait_for"] == 60.0
    assert found.module_args["ports"] == list(range(30000, 30008)) and found.module_args["expected_gpu_count"] == 8
    assert found.module_args["host"] == "gpu-1" and found.module_args["verify_only"] is False
    assert "container" not in found.module_args and "grace_period" not in found.module_args
    assert set(found.module_args) - {"host", "verify_only"} <= set(_role.module_options())
    assert found.selected and not found.read_only and found.warnings == ()


@pytest.mark.parametrize(("variable", "value", "message"), [
    ("gpu_reset_wait_for", "soon", "gpu_reset_wait_for must be a number, not 'soon'"),
    ("gpu_reset_expected_gpu_count", "eight", "gpu_reset_expected_gpu_count must be an integer, not 'eight'"),
    ("gpu_reset_ports", ["30000", "http"], "gpu_reset_ports must be a list of ints, not ['30000', 'http']"),
    ("gpu_reset_signal", "SIGSTOP", "gpu_reset_signal must be one of SIGTERM, SIGINT, SIGQUIT, SIGHUP, SIGUSR1, "
                                    "SIGUSR2, SIGKILL, not 'SIGSTOP'"),
    ("gpu_reset_wait_mode", "later", "gpu_reset_wait_mode must be one of module, until, not 'later'"),
    ("gpu_reset_fail_when_dirty", "perhaps", "gpu_reset_fail_when_dirty must be true or false, not 'perhaps'"),
    ("gpu_reset_wait_timeout", [1], "gpu_reset_wait_timeout must be a number, not [1]"),
    # float() of it raises OverflowError, which ansible-core's own check lets escape
    ("gpu_reset_grace_period", 10 ** 400, "gpu_reset_grace_period must be a number, not an integer too large for one"),
])
def test_a_wrong_type_is_one_line_naming_the_variable(variable, value, message):
    with pytest.raises(_role.RoleError) as error:
        settings(**{variable: value})
    assert str(error.value) == message


def test_every_default_is_valid_for_its_spec_as_it_is():
    """A value equal to its default is taken without a check (the common path): the default must be what the
    check would give for it, of the same type."""
    for name, spec in _role.options().items():
        default = spec.get("default")
        checked = _role._checked(_role.PREFIX + name, default, spec)  # pylint: disable=protected-access
        assert checked == default and type(checked) is type(default), name
        assert DEFAULTS[_role.PREFIX + name] == default, name


def test_a_value_set_to_the_default_in_another_type_is_still_checked_and_converted():
    found = settings(gpu_reset_wait_for=60, gpu_reset_expected_gpu_count="8", gpu_reset_remove_stale_shm="yes")
    assert found.module_args["wait_for"] == 60.0 and isinstance(found.module_args["wait_for"], float)
    assert found.module_args["expected_gpu_count"] == 8 and found.module_args["remove_stale_shm"] is True


def test_the_defaults_as_ansible_hands_them_over_are_taken_without_a_check(monkeypatch):
    """Ansible's YAML loader gives subclasses of str, int, float and list (tagged with their origin): still the
    defaults, so none is validated again per host."""
    with open(_role.SPEC_PATH.replace("meta/argument_specs.yml", "defaults/main.yml"), encoding="utf-8") as handle:
        tagged = yaml.load(handle, Loader=AnsibleLoader)  # noqa: S506 - Ansible's own safe loader
    assert tagged["gpu_reset_backend"].__class__ is not str and tagged["gpu_reset_ports"].__class__ is not list
    expected = settings().module_args

    def checked(name, *_args):
        raise AssertionError(f"{name} was checked")
    monkeypatch.setattr(_role, "_checked", checked)
    assert _role.settings("gpu-1", tagged, lambda value: value).module_args == expected


@pytest.mark.parametrize(("value", "default"), [
    (True, 1), (1, True), (0, False), (60, 60.0), ([True], [1]), ([1, 2], [1]), ("8", 8), (None, ""), ([], None),
])
def test_a_value_equal_to_the_default_in_another_type_is_not_the_default(value, default):
    assert not _role._is_default(value, default)  # pylint: disable=protected-access


def test_values_are_converted_as_the_module_would():
    found = settings(gpu_reset_wait_for="5", gpu_reset_ports=["30000", 29500], gpu_reset_gpu_holders="yes")
    assert found.module_args["wait_for"] == 5.0 and found.module_args["ports"] == [30000, 29500]
    assert found.module_args["gpu_holders"] is True


def test_former_names_still_work_with_a_warning_naming_the_new_one():
    found = settings(gpu_reset_wait_timeout=12, gpu_reset_clean_shm=False, gpu_reset_node_containers=True,
                     gpu_reset_extra_ports=[29500, 30001])
    assert found.module_args["wait_for"] == 12.0 and found.module_args["remove_stale_shm"] is False
    assert found.module_args["container_processes"] is True
    assert found.module_args["ports"] == list(range(30000, 30008)) + [29500]
    assert found.warnings == (
        "gpu_reset_wait_timeout is now gpu_reset_wait_for: its value is used for this release, rename it",
        "gpu_reset_clean_shm is now gpu_reset_remove_stale_shm: its value is used for this release, rename it",
        "gpu_reset_node_containers is now gpu_reset_container_processes: its value is used for this release, rename it",
        "gpu_reset_extra_ports is now part of gpu_reset_ports: its ports are added for this release, list them in "
        "gpu_reset_ports")


def test_a_typo_is_warned_about_with_the_closest_name():
    found = settings(gpu_reset_wait_timout=5, gpu_reset_servres=["vllm"], gpu_reset_hosts="all", gpu_reset_result={},
                     gpu_reset_zzz=1)
    assert found.warnings == (
        "gpu_reset_servres is not a variable of the role gpuops.hygiene.gpu_reset and is ignored "
        "(did you mean gpu_reset_servers?)",
        "gpu_reset_wait_timout is not a variable of the role gpuops.hygiene.gpu_reset and is ignored "
        "(did you mean gpu_reset_wait_for?)",
        "gpu_reset_zzz is not a variable of the role gpuops.hygiene.gpu_reset and is ignored")
    assert found.module_args["servers"] == ["all"]


def test_a_container_runs_on_its_node_scoped_to_its_vmid():
    found = settings(host="llm-ct200", proxmox_node="pve-b03", proxmox_vmid=200)
    assert (found.runs_on, found.container, found.module_args["container"]) == ("pve-b03", "200", "200")
    assert settings(host="llm-ct200", proxmox_node="pve-b03", proxmox_vmid=" 201 ").container == "201"


@pytest.mark.parametrize(("vmid", "got"), [
    (None, "is missing"), ("", "is missing"), ("0200", "is '0200', not a container id"),
    ("200; rm", "is '200; rm', not a container id"), (True, "is True, not a container id"),
    (-1, "is -1, not a container id"), ("1234567890", "is '1234567890', not a container id"),
])
def test_a_node_without_a_valid_vmid_is_refused_never_reset_as_the_node(vmid, got):
    variables = {"proxmox_node": "pve-b03"} if vmid is None else {"proxmox_node": "pve-b03", "proxmox_vmid": vmid}
    with pytest.raises(_role.RoleError) as error:
        settings(host="llm-ct200", **variables)
    assert str(error.value) == (f"llm-ct200 has proxmox_node 'pve-b03' but its proxmox_vmid {got}: the container is "
                                f"not reset (give the container's vmid, a positive integer such as 200)")


def test_a_vmid_without_a_node_is_refused():
    with pytest.raises(_role.RoleError, match="^llm-ct200 has proxmox_vmid 200 but no proxmox_node"):
        settings(host="llm-ct200", proxmox_vmid=200, proxmox_node="")


def test_a_node_of_inventory_containers_is_refused_as_a_host_unless_asked():
    inventory = {"container_nodes": ["pve-b03"], "groups": {"all": ["pve-b03", "ct200", "ct201", "gpu-1"]},
                 "hostvars": {"pve-b03": {}, "ct200": {"proxmox_node": "pve-b03"}, "ct201": {"proxmox_node": "pve-b03"},
                              "gpu-1": {}}}
    with pytest.raises(_role.RoleError) as error:
        settings(host="pve-b03", **inventory)
    assert str(error.value) == ("pve-b03 is the Proxmox node of inventory containers (ct200, ct201): not reset as a "
                                "host (reset the containers by their own names), unless -e gpu_reset_nodes=true")
    assert settings(host="pve-b03", gpu_reset_nodes=True, **inventory).runs_on == "pve-b03"
    assert settings(host="gpu-1", **inventory).runs_on == "gpu-1"


@pytest.mark.parametrize(("run_tags", "skip_tags", "selected", "read_only"), [
    (["all"], [], True, False),
    (["facts"], [], True, True),
    (["stop", "verify"], [], True, False),
    (["all"], ["stop"], True, True),
    (["stop"], [], False, False),
    (["unrelated"], [], False, True),
    (["all"], ["facts", "verify", "leftovers"], False, False),
    (["tagged"], [], True, False),
])
def test_the_run_tags_decide_what_runs_as_ansible_would_for_the_one_run_task(run_tags, skip_tags, selected, read_only):
    found = settings(ansible_run_tags=run_tags, ansible_skip_tags=skip_tags)
    assert (found.selected, found.read_only) == (selected, read_only)
    assert found.module_args["verify_only"] is read_only


def test_verify_only_makes_any_run_read_only():
    assert settings(gpu_reset_verify_only=True).read_only is True
