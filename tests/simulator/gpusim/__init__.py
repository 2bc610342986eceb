"""gpusim: a GPU fleet simulator for testing gpuops.hygiene without GPUs.

It models hosts (real PID, mount, UTS, IPC, network and cgroup namespaces),
an NVIDIA driver per host (memory that follows processes), a fake nvidia-smi
that prints what the real one prints, Proxmox-style containers, and inference
servers with their real process shapes. See README.md beside this package.
"""
