"""The README's "Is this host clean?" commands, as an operator types them: one table row for one host, and the
JMESPath expression that picks fields from the facts (the ad-hoc command with --become, its -t tree, jp.py)."""

from __future__ import annotations

import json
import os
import re
import subprocess

import jmespath
import yaml

from gpusim import fleet
from gpusim.testing import COLLECTIONS, PLUGINS, REPO, run_playbook, tool, wait_for_gpu_holders

STATUS = os.path.join(REPO, "playbooks", "gpu_status.yml")


def section() -> str:
    with open(os.path.join(REPO, "README.md"), encoding="utf-8") as handle:
        text = handle.read()
    return text[text.index("### 3. Is this host clean?"):text.index("### 4. Relaunch and wait until ready")]


def commands() -> list[list[str]]:
    block = re.search(r"```sh\n(.*?)```", section(), re.S).group(1)
    return [line.split("#")[0].split() for line in block.splitlines() if line.strip()]


def busy_host(sim):
    host = sim.host()
    holder = fleet.start_holder(host, "python3 train.py", gpus=[2], mib=50000)
    wait_for_gpu_holders(host, 1)
    return host, holder


def test_the_status_of_one_host_is_one_table_row(sim):
    host, _holder = busy_host(sim)
    sim.host("other")
    status = commands()[0]
    assert status[:2] == ["ansible-playbook", "gpuops.hygiene.gpu_status"] and status[-2:] == ["-l", "gpu-b01"]
    run = run_playbook(STATUS, sim.inventory(), {}, limit=host)
    lines = run.result("Show the summary table", host)["msg"]
    assert len(lines) == 3 and lines[1].split()[:2] == [host, "busy"] and lines[2] == "1 hosts: 1 busy"


def test_the_readme_picks_the_operators_fields_from_the_facts(sim, tmp_path):
    host, holder = busy_host(sim)
    inventory = tmp_path / "inventory.yml"
    inventory.write_text(sim.inventory())
    ad_hoc, pick = commands()[1], commands()[2]
    assert ad_hoc[:2] == ["ansible", "gpu-b01"] and "--become" in ad_hoc and pick[0] == "jp.py"
    argv = [tool("ansible"), host] + ad_hoc[2:]
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=COLLECTIONS, ANSIBLE_CONNECTION_PLUGINS=os.path.join(PLUGINS, "connection"),
               ANSIBLE_PYTHON_INTERPRETER="/usr/bin/python3", ANSIBLE_HOST_KEY_CHECKING="False")
    subprocess.run(argv, cwd=tmp_path, env=env, check=True, capture_output=True, text=True, timeout=300)
    expression = pick[pick.index("-f") + 2:]
    picked = subprocess.run([tool("jp.py"), "-f", f"facts/{host}", " ".join(expression).strip("'")], cwd=tmp_path,
                            check=True, capture_output=True, text=True, timeout=60)
    found = json.loads(picked.stdout)
    assert found["verdict"] == "busy" and found["held"] == [2]
    assert found["reasons"] == [f"GPU 2 (00000000:3A:00.0): 50000 MiB used > idle threshold 100 MiB, held by pid "
                                f"{holder} (python3 train.py) in the host"]
    # The playbook form: community.general.json_query is jmespath.search of the same expression.
    play = yaml.safe_load(re.search(r"```yaml\n(.*?)```", section(), re.S).group(1))
    query = re.search(r"json_query\('(.*)'\)", play[1]["ansible.builtin.debug"]["msg"]).group(1)
    with open(tmp_path / "facts" / host, encoding="utf-8") as handle:
        facts = json.load(handle)["ansible_facts"]
    assert jmespath.search(query, facts) == {"verdict": "busy", "held": [2]}
