"""Stand-in for sglang.launch_server: builds SGLang's process tree (see gpusim.engines)."""

if __name__ == "__main__":
    from gpusim.engines import sglang_main

    sglang_main()
