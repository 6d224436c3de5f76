"""Mining and input synthesis: real PyTorch code into KernelBench-format tasks.

miner.py (the stage: ``mine_tasks``, the report) reads files (sources.py), finds nn.Module classes
(discover.py), extracts each with its dependency closure (extract.py) and the repository's own calls
of it (callsites.py), then deduces constructor arguments (init_args.py) and forward inputs
(input_synthesis.py), checked by the filters (input_filters.py), in forked sandbox children
(input_sandbox.py). Empty on purpose: the sandbox's zygote imports input_sandbox.py alone."""
