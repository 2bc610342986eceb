"""Hypothesis strategies for hostile worlds (gpusim.hostile.World): what tenants and users may do on a GPU node.

Every process shape below is one that real software shows in /proc (the source is next to each); around them the
strategies draw what a hostile neighbour controls: any argv, title, comm and user, parents, sessions and PID or
mount namespaces, descriptors and mappings of the GPU devices (also only mapped, or only in a thread with a
descriptor table of its own), runtime shims that restart what they run, the container's /dev and /dev/shm in the
hands of its root, programs planted where PATH or the working directory may lead, and floods of processes,
descriptors, threads and files (bounded, so that a world builds in a few seconds). The run drawn last is the
module call an operator would make, with the documented option shapes.
"""

from __future__ import annotations

import dataclasses
import typing as t

from hypothesis import strategies as st

from gpusim.hostile import Action, Container, Plant, Proc, Run, World

VMIDS = ("200", "201")
SENTINEL_DIR = "/tmp/sentinel"
SENTINEL = f"{SENTINEL_DIR}/victim"
EVIL = "/tmp/evil"          # a directory of user nobody
WORK = "/tmp/work"          # a working directory of user nobody, with bin/ of its own
HEX64 = "3ea752c1cce6a65b39af7f68c971186e020992514b663ab7a917f47da70450fa"
TENANT_UIDS = (1000, 1001, 65534)

# --- what real software shows in /proc --------------------------------------------------------------------------

# Engine launches, as the presets' sources give them (plugins/module_utils/_presets.py).
SERVER_ARGV = {
    "sglang": [["python3", "-m", "sglang.launch_server", "--model-path", "meta-llama/Llama-3.1-8B", "--tp", "2",
                "--port", "30000"], ["sglang", "serve", "--model-path", "Qwen/Qwen3-8B"]],
    "vllm": [["/usr/bin/python3", "/usr/local/bin/vllm", "serve", "meta-llama/Llama-3.1-8B", "--port", "8000"],
             ["python3", "-m", "vllm.entrypoints.openai.api_server", "--model", "m"]],
    "tgi": [["text-generation-launcher", "--model-id", "bigscience/bloom-560m", "--num-shard", "2"]],
    "trtllm": [["trtllm-serve", "serve", "/models/llama", "--backend", "pytorch"]],
    "triton": [["tritonserver", "--model-repository=/models"]],
    "llamacpp": [["llama-server", "-m", "/models/q4.gguf", "--port", "8080"]],
    "ollama": [["/usr/local/bin/ollama", "serve"]],
}
WORKER_TITLES = {
    "sglang": ["sglang::scheduler_TP0", "sglang::scheduler_TP1", "sglang::detokenizer"],
    "vllm": ["VLLM::EngineCore", "VLLM::Worker_TP0", "VLLM::Worker_TP1"],
    "tgi": ["text-generation-server serve bigscience/bloom-560m --sharded --rank 0"],
}
# Container runtimes: Podman's conmon and the Docker/containerd shim as `ps -ef` shows them on a host running
# containers (quoted in github.com/Alberthua-Perl/tech-docs, podman-arch-usage); a container named like the server
# puts the server's name into conmon's argv (`-n vllm-server`). Docker's port proxy and the Kubernetes pause process
# (k8s.gcr.io/pause runs /pause).
RUNTIME_ARGV = [
    ["/usr/bin/conmon", "--api-version", "1", "-c", HEX64, "-u", HEX64, "-r", "/usr/bin/crun", "-b",
     f"/var/lib/containers/storage/overlay-containers/{HEX64}/userdata", "-p",
     f"/run/containers/storage/overlay-containers/{HEX64}/userdata/pidfile", "-n", "vllm-server", "--exit-dir",
     "/run/libpod/exits", "--full-attach", "-s", "-l", "journald", "--log-level", "warning", "--exit-command",
     "/usr/bin/podman", "--exit-command-arg", "container", "--exit-command-arg", "cleanup", "--exit-command-arg",
     HEX64],
    ["/usr/bin/containerd-shim-runc-v2", "-namespace", "moby", "-id", HEX64, "-address",
     "/run/containerd/containerd.sock"],
    ["/usr/bin/docker-proxy", "-proto", "tcp", "-host-ip", "0.0.0.0", "-host-port", "8000", "-container-ip",
     "172.17.0.2", "-container-port", "8000"],
    ["/pause"],
]
# What a runtime's payload sits in: the cgroups the node's managers give a container (docker's systemd driver,
# podman's libpod scope).
RUNTIME_CGROUPS = [f"/system.slice/docker-{HEX64}.scope", f"/machine.slice/libpod-{HEX64}.scope"]
MONITOR_ARGV = [["/usr/bin/nvidia-persistenced", "--user", "nvidia-persistenced"], ["/usr/bin/nv-hostengine", "-n"],
                ["/usr/bin/dcgm-exporter"], ["nvtop"], ["/usr/bin/python3", "/usr/local/bin/nvitop"],
                ["/usr/sbin/sshd", "-D"]]
BYSTANDER_ARGV = [["tail", "-f", "/tmp/vllm.log"], ["grep", "--line-buffered", "sglang", "/var/log/serve.log"],
                  ["less", "/tmp/sglang.log"], ["vim", "/etc/vllm/serve.yaml"],
                  ["/usr/bin/python3", "/usr/bin/ansible-playbook", "-i", "gpu-b01,", "deploy.yml", "-e",
                   "engine=vllm"], ["watch", "-n", "1", "nvidia-smi"], ["tmux", "new", "-s", "vllm"]]
WRAPPER_PREFIXES = [["sudo", "-u", "nobody"], ["timeout", "3600"], ["nohup"], ["env", "CUDA_VISIBLE_DEVICES=0"]]
JOB_ARGV = [["python3", "train.py", "--epochs", "90"], ["/opt/conda/bin/python", "-u", "eval_llm.py"],
            ["./a.out"], ["jupyter-lab", "--ip", "0.0.0.0"]]
NOISE = ["vllm", "sglang", "serve", "python3", "-m", "--tp", "8", "nvidia-smi", "conmon", "-n", "init", "\n",
         "\x1b[31m", "--port", "30000", "llama-server", "VLLM::Worker_TP0", "sglang::", "'", "$(id)", " ", ""]
PATTERNS = ["vllm", "sglang", "serve", "python", "llama", r"\.py", "VLLM::", "server", "nvidia", "conmon", "init",
            "tail", "^/usr/bin/"]
PLANTED_NAMES = ("nvidia-smi", "systemctl", "pct", "lxc-attach", "ps", "kill", "sh", "id", "timeout", "nsenter")


@dataclasses.dataclass(frozen=True)
class Scale:
    """How big the floods get. CI keeps every world cheap; the deep run (make adversary) reaches sizes at which a
    per-host cost (a quadratic table comparison, one descriptor per target, one record per file) shows."""

    procs: tuple[int, ...]
    fds: tuple[int, ...]
    own_tables: tuple[int, ...]
    files: tuple[int, ...]


CI = Scale(procs=(30, 120), fds=(16, 2000), own_tables=(1, 8, 64), files=(50, 300))
DEEP = Scale(procs=(30, 200, 1100), fds=(16, 20000), own_tables=(1, 8, 1500), files=(50, 2000))

text = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=40)
word = st.one_of(st.sampled_from(NOISE), text)


def with_devices(draw: t.Callable, minors: list[int], how: str | None = None) -> dict:
    """Fields of a Proc that reaches GPUs, maybe with memory: by descriptor, by mapping only, or in a thread."""
    chosen = draw(st.lists(st.sampled_from(minors), min_size=1, max_size=2, unique=True)) if minors else []
    how = how or draw(st.sampled_from(["fd", "fd", "map", "thread"]))
    paths = ["/dev/nvidiactl"] + [f"/dev/nvidia{minor}" for minor in chosen]
    fields: dict = {"opens": [], "maps": [], "thread_opens": []}
    fields[{"fd": "opens", "map": "maps", "thread": "thread_opens"}[how]] = paths
    # Memory, or none yet (a context being created, a monitor, a process that keeps the device for later).
    mib = draw(st.sampled_from([0, 101, 2048, 40000]))
    fields["alloc"] = [[minor, mib] for minor in chosen] if mib else []
    return fields


@st.composite
def hostile_bits(draw, scale: Scale) -> dict:
    """What any process may add: its kernel name, user, session, namespaces, threads, floods, its end on SIGTERM."""
    bits: dict = {}
    if draw(st.integers(0, 3)) == 0:
        bits["comm"] = draw(word)
    if draw(st.integers(0, 2)) == 0:
        bits["uid"] = draw(st.sampled_from(TENANT_UIDS))
    bits["session"] = draw(st.sampled_from(["same", "same", "setsid", "pgrp"]))
    bits["term"] = draw(st.sampled_from(["exit", "exit", "exit", "ignore", "hang"]))
    bits["term_delay_ms"] = draw(st.sampled_from([0, 0, 50, 400]))
    bits["threads"] = draw(st.sampled_from([0, 0, 0, 2, 40]))
    bits["own_tables"] = draw(st.sampled_from((0,) * 8 + scale.own_tables))
    bits["fds"] = draw(st.sampled_from((0,) * 8 + scale.fds))
    if bits["threads"] and draw(st.integers(0, 4)) == 0:
        bits["main_exit"] = True
    return bits


@st.composite
def group(draw, minors: list[int], where: str | None, start: int, scale: Scale) -> list[Proc]:
    """A few related processes; parent indexes are absolute (the group starts at index `start`)."""
    family = draw(st.sampled_from(["server", "server", "runtime", "bystander", "monitor", "job", "junk", "junk",
                                   "flood"]))
    root_bits = draw(hostile_bits(scale))
    procs: list[Proc] = []
    if family == "server":
        engine = draw(st.sampled_from(sorted(SERVER_ARGV)))
        argv = draw(st.sampled_from(SERVER_ARGV[engine]))
        if draw(st.integers(0, 3)) == 0:
            argv = draw(st.sampled_from(WRAPPER_PREFIXES)) + argv
        procs.append(Proc(argv, kind="server", container=where, **root_bits))
        for title in draw(st.lists(st.sampled_from(WORKER_TITLES.get(engine, ["worker"])), max_size=2)):
            devices = with_devices(draw, minors)
            procs.append(Proc(["python3", "-c", "from multiprocessing.spawn import spawn_main; spawn_main()"],
                              title=title.split(" ") if engine == "tgi" else [title], parent=start, kind="worker",
                              uid=root_bits.get("uid", 0), term=draw(st.sampled_from(["exit", "ignore"])), **devices))
    elif family == "runtime":
        argv = draw(st.sampled_from(RUNTIME_ARGV))
        procs.append(Proc(argv, kind="runtime", container=where, restart_ms=draw(st.sampled_from([None, 150, 600]))))
        engine = draw(st.sampled_from(sorted(SERVER_ARGV)))
        cgroup = draw(st.sampled_from(RUNTIME_CGROUPS)) if where is None else None
        payload = Proc(draw(st.sampled_from(SERVER_ARGV[engine])), parent=start, kind="server",
                       pidns=draw(st.booleans()), cgroup=cgroup, **with_devices(draw, minors))
        procs.append(payload)
    elif family == "bystander":
        argv = draw(st.sampled_from(BYSTANDER_ARGV))
        if draw(st.integers(0, 2)) == 0:
            argv = draw(st.sampled_from(WRAPPER_PREFIXES)) + argv
        procs.append(Proc(argv, kind="bystander", container=where, **root_bits))
    elif family == "monitor":
        devices = with_devices(draw, minors, "fd")
        if draw(st.booleans()):
            devices["alloc"] = []
        procs.append(Proc(draw(st.sampled_from(MONITOR_ARGV)), kind="monitor", container=where, **devices))
    elif family == "job":
        procs.append(Proc(draw(st.sampled_from(JOB_ARGV)), kind="job", container=where,
                          **with_devices(draw, minors), **root_bits))
    elif family == "junk":
        argv = draw(st.lists(word, min_size=0, max_size=6))
        title = draw(st.none() | st.lists(word, min_size=1, max_size=3))
        devices = with_devices(draw, minors) if draw(st.booleans()) else {}
        procs.append(Proc(argv, title=title, kind="junk", container=where, pidns=draw(st.integers(0, 5)) == 0,
                          fakedev=draw(st.integers(0, 5)) == 0 and not devices, **devices, **root_bits))
        for _child in range(draw(st.integers(0, 2))):
            procs.append(Proc(draw(st.lists(word, min_size=1, max_size=3)), parent=start + len(procs) - 1,
                              kind="junk", uid=root_bits.get("uid", 0), exit_now=draw(st.integers(0, 4)) == 0))
        if draw(st.integers(0, 4)) == 0:
            procs[0].noreap = True
    else:  # flood: many processes of one shape, idle, maybe matching a pattern
        argv = draw(st.sampled_from([["vllm", "serve", "tiny"], ["python3", "worker.py"], ["sleep", "infinity"]]))
        count = draw(st.sampled_from(scale.procs))
        procs.append(Proc(["sh", "-c", "spawner"], kind="flood", container=where, uid=1000))
        procs += [Proc(argv, parent=start, kind="flood", uid=1000) for _index in range(count)]
    return procs


@st.composite
def tenant_actions(draw, container: Container, scale: Scale) -> list[Action]:
    """What the container's root does with its /dev and /dev/shm."""
    actions = []
    vmid = container.vmid
    for _index in range(draw(st.integers(0, 3))):
        op = draw(st.sampled_from(["rm_dev", "mv_dev", "fake_dev", "link_dev", "shm_file", "shm_link", "shm_flood",
                                   "shm_symlink", "shm_dir"]))
        phase = draw(st.sampled_from(["before", "after"]))
        given = container.gpus or [0]
        if op == "rm_dev":
            actions.append(Action("rm", f"/dev/nvidia{draw(st.sampled_from(given))}", where=vmid, phase=phase))
        elif op == "mv_dev":
            source, target = draw(st.sampled_from(given)), draw(st.integers(5, 9))
            actions.append(Action("mv", f"/dev/nvidia{source}", f"/dev/nvidia{target}", where=vmid, phase=phase))
        elif op == "fake_dev":
            actions.append(Action("touch", f"/dev/nvidia{draw(st.integers(0, 9))}", where=vmid, phase="before",
                                  mode=0o666))
        elif op == "link_dev":
            actions.append(Action("symlink", f"/dev/nvidia{draw(st.integers(5, 9))}", "/dev/null", where=vmid))
        elif op == "shm_file":
            actions.append(Action("touch", f"/dev/shm/nccl-{draw(st.integers(0, 99))}", where=vmid, age_s=60))
        elif op == "shm_link":
            actions.append(Action("symlink", "/dev/shm/nccl-victim", SENTINEL, where=vmid))
        elif op == "shm_flood":
            actions.append(Action("flood", "/dev/shm/nccl-f", where=vmid, count=draw(st.sampled_from(scale.files)),
                                  age_s=60))
        elif op == "shm_dir":
            actions.append(Action("mkdir", "/dev/shm/nccl-dir", where=vmid, mode=0o777))
        else:
            # A gpusim container shares the machine's root (only /dev, /dev/shm, /tmp and /run are its own): its root's
            # "/" is the test machine's, which no world may write into. A real LXC container has a root of its own.
            targets = ["/", SENTINEL_DIR, "/run"] if container.engine == "lxc" else [SENTINEL_DIR, "/run"]
            actions.append(Action("shm_symlink", "/dev/shm", draw(st.sampled_from(targets)),
                                  where=vmid, phase="before"))
    return actions


@st.composite
def host_actions(draw, scale: Scale) -> list[Action]:
    """What an unprivileged user of the node leaves in the node's /dev/shm; the node's own file nothing may touch."""
    actions = [Action("sentinel", SENTINEL, "the node's own file", mode=0o600)]
    for _index in range(draw(st.integers(0, 3))):
        op = draw(st.sampled_from(["file", "link", "flood", "fifo", "dir"]))
        owner = draw(st.sampled_from(TENANT_UIDS))
        if op == "file":
            actions.append(Action("touch", f"/dev/shm/nccl-u{draw(st.integers(0, 9))}", owner=owner, age_s=60))
        elif op == "link":
            actions.append(Action("symlink", "/dev/shm/nccl-victim", SENTINEL, owner=owner))
        elif op == "flood":
            actions.append(Action("flood", "/dev/shm/nccl-u", owner=owner, count=draw(st.sampled_from(scale.files)),
                                  age_s=60))
        elif op == "fifo":
            actions.append(Action("fifo", "/dev/shm/nccl-fifo", owner=owner, mode=0o666))
        else:
            actions.append(Action("mkdir", "/dev/shm/nccl-dir", owner=owner, mode=0o777))
    return actions


@st.composite
def search_path(draw) -> tuple[list[str], str, list[Plant]]:
    """PATH, working directory and planted programs (all of them untrusted: someone else owns or can write them)."""
    plants = []
    for _index in range(draw(st.integers(0, 3))):
        directory = draw(st.sampled_from([EVIL, WORK, f"{WORK}/bin"]))
        name = draw(st.sampled_from(PLANTED_NAMES))
        owner, mode = draw(st.sampled_from([(65534, 0o755), (0, 0o777), (1000, 0o755)]))
        plants.append(Plant(directory, name, directory_owner=65534, directory_mode=0o777, owner=owner, mode=mode))
    trusted = ["/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"]
    extra = draw(st.lists(st.sampled_from([EVIL, "", ".", "bin", f"{WORK}/bin", "/nonexistent"]), max_size=2))
    path = draw(st.permutations(trusted + extra)) if extra else trusted
    cwd = draw(st.sampled_from(["/", "/", EVIL, WORK])) if plants else "/"
    return list(path), cwd, plants


@st.composite
def acting_run(draw, world: World, vmid: str | None) -> Run:
    module = draw(st.sampled_from(["inference_server_kill", "gpu_host_reset", "gpu_host_reset", "server_leftovers"]))
    args: dict = {}
    if vmid:
        args["container"] = vmid
    if module in ("inference_server_kill", "gpu_host_reset"):
        args["servers"] = draw(st.sampled_from([[], ["all"], ["vllm"], ["sglang", "tgi"]]))
        args["patterns"] = draw(st.lists(st.sampled_from(PATTERNS), max_size=2))
        if draw(st.integers(0, 4)) == 0:
            args["clients"] = [draw(st.sampled_from(PATTERNS))]
        args["gpu_holders"] = draw(st.booleans())
        if not (args["servers"] or args["patterns"] or args.get("clients") or args["gpu_holders"]):
            args["gpu_holders"] = True
        if not vmid and world.containers:
            args["container_processes"] = draw(st.booleans())
        names = [proc.shown_argv[0].rsplit("/", 1)[-1] for proc in world.procs
                 if proc.shown_argv and proc.shown_argv[0]]
        if names and draw(st.integers(0, 3)) == 0:
            args["protect"] = [draw(st.sampled_from(names))[:255] or "x"]
        args["signal"] = draw(st.sampled_from(["SIGTERM", "SIGTERM", "SIGINT", "SIGKILL"]))
        grace = draw(st.sampled_from([0.3, 0.8, 1.5]))
        args["grace_period"] = grace
        args["kill_timeout"] = grace + draw(st.sampled_from([2.0, 4.0]))
    if module == "gpu_host_reset":
        args.update(wait_for=draw(st.sampled_from([0.5, 1.5])), poll_interval=0.1, facts_timeout=5.0,
                    backend="nvidia_smi", reset_leaked_gpus=draw(st.booleans()), settle_window=1.0)
    if module in ("server_leftovers", "gpu_host_reset"):
        args["shm_patterns"] = draw(st.sampled_from([["nccl-*"], ["nccl-*", "psm_*"], []]))
        if module == "server_leftovers":
            args["remove_stale_shm"] = draw(st.booleans())
    run_as = draw(st.sampled_from([0, 0, 0, 0, 0, 65534])) if module == "inference_server_kill" else 0
    return Run(module, args, run_as=run_as)


@st.composite
def worlds(draw, scale: Scale = CI, engines: tuple[str, ...] = ("gpusim", "lxc")) -> World:
    gpus = draw(st.sampled_from([2, 3]))
    minors = list(range(gpus))
    proxmox = draw(st.booleans())
    containers = []
    if proxmox:
        for vmid in draw(st.sampled_from([VMIDS[:1], VMIDS[:1], VMIDS])):
            given = draw(st.lists(st.sampled_from(minors), min_size=0, max_size=gpus, unique=True))
            engine = draw(st.sampled_from(engines))
            containers.append(Container(vmid, sorted(given), engine=engine,
                                        privileged=engine == "gpusim" or draw(st.booleans())))
    places = [None] + [container.vmid for container in containers]
    procs: list[Proc] = []
    for _index in range(draw(st.integers(1, 5))):
        where = draw(st.sampled_from(places))
        reachable = minors if where is None else next(c.gpus for c in containers if c.vmid == where)
        procs += draw(group(reachable, where, len(procs), scale))
    actions = draw(host_actions(scale))
    for container in containers:
        actions += draw(tenant_actions(container, scale))
    path, cwd, plants = draw(search_path())
    world = World(gpus=gpus, proxmox=proxmox, containers=containers, procs=procs, actions=actions, plants=plants,
                  path=path, cwd=cwd)
    vmid = draw(st.sampled_from(places)) if containers else None
    facts = {"backend": "nvidia_smi", "facts_timeout": 5.0, **({"container": vmid} if vmid else {})}
    world.runs = [Run("gpu_memory_facts", facts, run_as=draw(st.sampled_from([0, 0, 0, 0, 65534]))),
                  draw(acting_run(world, vmid))]
    return world
