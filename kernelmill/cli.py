"""The one kernelmill CLI. Every stage is a subcommand.

Each stage module registers its own subcommands through a ``register(subparsers)`` function that
only declares arguments; heavy imports (torch, prefect, nnsmith, duckdb) happen inside the
handlers, so ``kernelmill --help`` stays fast. A handler returns the process exit code.

Exit codes: 0 success; 1 a stage failed on its input; 2 bad usage or bad input named in the message.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

# Modules that add subcommands, in the order --help lists them (the pipeline's order).
COMMAND_MODULES = (
    "flows.commands",        # run, serve, deploy
    "graphs.commands",       # load, nnsmith
    "synth.mine",            # mine
    "synth.annotate",        # annotate
    "synth.generate",        # generate
    "verifier.commands",     # verify, verify-batch, metrics
    "synth.repair",          # repair
    "curation.commands",     # curate, query, report
    "train.commands",        # train
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kernelmill",
        description="PyTorch programs in, verified GPU-kernel training corpora out.",
    )
    parser.add_argument("--config", help="TOML file overriding data/default.toml")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        try:
            mod = importlib.import_module(name)
        except ModuleNotFoundError as e:
            if e.name and name.startswith(e.name):
                continue  # stage not present in this checkout
            raise
        mod.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    # The ephemeral Prefect server takes 10-75 s to start on a small, busy machine; prefect waits 20 s.
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "180")
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "handler", None):
        parser.print_help()
        return 2
    from kernelmill.config import load_config
    from kernelmill.errors import InputError

    try:
        args.cfg = load_config(args.config)
        return int(args.handler(args) or 0)
    except (InputError, FileNotFoundError) as e:
        print(f"kernelmill {args.command}: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
