"""Stand-in for the sglang package: only what `python3 -m sglang.launch_server` needs."""
