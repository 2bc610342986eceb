"""outcomes(): the fleet's verdicts from each host's public gpu_reset_result only."""

from __future__ import annotations

from ansible_collections.gpuops.hygiene.plugins.plugin_utils import _registered, _report

FULL_KEYS = {"host", "verdict", "reasons", "message", "gpus", "gpus_clean", "gpus_expected", "processes_stopped",
             "mib_freed", "seconds_to_clean"}


def test_a_recorded_result_is_kept_as_it_is():
    recorded = _registered.reset_result({"unreachable": True, "msg": "ssh: no route to host"}, "gpu-9")
    [found] = _report.outcomes({"gpu-9": {"gpu_reset_result": recorded}}, ["gpu-9"])
    assert found == recorded and found is not recorded


def test_a_partial_result_is_completed_with_its_reasons_in_the_message():
    partial = {"verdict": "unknown", "reasons": ["unknown preset 'nosuch'"]}
    [found] = _report.outcomes({"gpu-1": {"gpu_reset_result": partial}}, ["gpu-1"])
    assert FULL_KEYS <= set(found)
    assert found["message"] == "gpu-1: UNKNOWN: unknown preset 'nosuch'"
    assert (found["host"], found["gpus"], found["processes_stopped"], found["mib_freed"]) == ("gpu-1", [], None, None)
    # Made elsewhere, its reasons came without codes: each is said to have none, the two lists in step.
    assert found["reason_codes"] == [{"code": "unspecified", "lasting": False}]
    missing = _report.outcomes({"gpu-1": {}}, ["gpu-1"])[0]
    assert missing["reason_codes"] == [{"code": "no_answer", "lasting": False}]


def test_private_role_variables_are_never_read():
    """A host with only the role's private run (even an unreachable one) has no verdict: unknown, never guessed."""
    hostvars = {"gpu-1": {"__gpu_reset_run": {"unreachable": True, "msg": "gone"}},
                "gpu-2": {"__gpu_reset_run": {"ansible_facts": {"gpu_reset_result": {"verdict": "clean"}}}}}
    found = _report.outcomes(hostvars, ["gpu-1", "gpu-2"])
    assert [(entry["host"], entry["verdict"]) for entry in found] == [("gpu-1", "unknown"), ("gpu-2", "unknown")]
    assert found[0]["reasons"] == ["no result: the play failed or ended on this host before its verdict"]


def test_the_order_is_the_hosts_order_and_an_unknown_host_is_kept():
    clean = {"verdict": "clean", "reasons": []}
    found = _report.outcomes({"b": {"gpu_reset_result": clean}, "a": {"gpu_reset_result": clean}}, ["b", "zz", "a"])
    assert [(entry["host"], entry["verdict"]) for entry in found] == [("b", "clean"), ("zz", "unknown"), ("a", "clean")]


def _hostvars(records):
    """Ansible's own HostVars over a real inventory and variable manager, each host's record registered."""
    from ansible.inventory.manager import InventoryManager  # pylint: disable=import-outside-toplevel
    from ansible.parsing.dataloader import DataLoader  # pylint: disable=import-outside-toplevel
    from ansible.vars.hostvars import HostVars  # pylint: disable=import-outside-toplevel
    from ansible.vars.manager import VariableManager  # pylint: disable=import-outside-toplevel
    loader = DataLoader()
    inventory = InventoryManager(loader=loader, sources=",".join(records) + ",")
    variables = VariableManager(loader=loader, inventory=inventory)
    for host, record in records.items():
        variables.set_host_variable(host, "gpu_reset_result", record)
    return HostVars(inventory, variables, loader)


def test_ansible_hostvars_give_the_registered_record_as_it_is_and_a_template_still_renders():
    """A registered record is read raw (templating it would walk every step's result); a value someone set as a
    template under that name is still rendered, as hostvars render it."""
    from ansible.template import trust_as_template  # pylint: disable=import-outside-toplevel
    clean = {"verdict": "clean", "reasons": [], "steps": {"kill": {"killed": [{"pid": 7}]}}}
    by_hand = trust_as_template("{{ {'verdict': 'busy', 'reasons': ['set by hand']} }}")  # as an inventory file's
    hostvars = _hostvars({"gpu-1": clean, "gpu-2": by_hand})
    assert _report.registered(hostvars, "gpu-1", "gpu_reset_result") is not None
    assert _report.registered(hostvars, "gpu-1", "gpu_reset_result")["steps"] == clean["steps"]
    assert _report.registered(hostvars, "nobody", "gpu_reset_result") is None
    found = _report.outcomes(hostvars, ["gpu-1", "gpu-2"])
    assert [(entry["verdict"], entry["reasons"]) for entry in found] == [("clean", []), ("busy", ["set by hand"])]
    assert _report.not_clean_pattern("all", hostvars) == "all,!gpu-1"
