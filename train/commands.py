"""`kernelmill train sft|rft|rl|eval` and `kernelmill serve-model`: the training stage on the command line.

Every flag defaults to the [train] settings (kernelmill.settings.TrainSettings, overridden by
--config and KERNELMILL_TRAIN_* variables); a flag given on the command line wins.

The trainer (torch, transformers, matplotlib: seconds to import) is imported inside each handler,
so the rest of the CLI does not wait for it. Each command prints a JSON
summary on stdout; per-step metrics go to ``<out>/metrics.jsonl`` (plot with
``kernelmill train plot``).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

from kernelmill.config import load_settings
from kernelmill.errors import InputError
from kernelmill.settings import Settings, keywords_for


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--corpus", required=True, help="corpus directory (sft/ rft/ rl/ Parquet folders, README.md card)")
    p.add_argument("--device", default=None, help="auto, cpu, cuda (default: [train] device)")
    p.add_argument("--heldout-frac", type=float, default=None, help="share of tasks never trained on")
    p.add_argument("--seed", type=int, default=None)


def register(sub) -> None:
    tr = sub.add_parser("train", help="train a kernel-writing model on the corpora (SFT, RFT, RL) and evaluate it")
    tsub = tr.add_subparsers(dest="train_command", metavar="TRAIN_COMMAND")

    for name, what in (("sft", "supervised fine-tuning on the sft config (multi-turn repair dialogues)"),
                       ("rft", "rejection-sampling fine-tuning on the rft config (correct completions only)")):
        p = tsub.add_parser(name, help=what)
        _common(p)
        p.add_argument("--out", required=True, help="output directory (checkpoints, metrics.jsonl); resumes if it has checkpoints")
        p.add_argument("--init", default="", help="model directory or training output to start from (default: [train] model, else a tiny model)")
        p.add_argument("--steps", type=int, default=None)
        p.add_argument("--batch-size", type=int, default=None)
        p.add_argument("--lr", type=float, default=None)
        p.add_argument("--no-resume", action="store_true", help="ignore checkpoints already in --out")
        p.set_defaults(handler=_sft, train_config=name)

    p = tsub.add_parser("rl", help="GRPO with multi-turn verifier feedback, PrimeEcho, Buffered Dynamic Retry, MirrorPop")
    _common(p)
    p.add_argument("--out", required=True)
    p.add_argument("--init", required=True, help="starting policy: an SFT output directory or a model directory")
    p.add_argument("--backend", default="cpu", help="verifier backend for rewards (cpu, cuda)")
    p.add_argument("--steps", type=int, default=None)
    p.add_argument("--group-size", type=int, default=None)
    p.add_argument("--prompts-per-step", type=int, default=None)
    p.add_argument("--turns", type=int, default=None)
    p.add_argument("--max-new-tokens", type=int, default=None)
    for flag in ("prime-echo", "retry", "mirrorpop"):
        p.add_argument(f"--no-{flag}", action="store_true", help=f"switch {flag} off (ablation)")
    p.add_argument("--no-resume", action="store_true")
    p.set_defaults(handler=_rl)

    p = tsub.add_parser("eval", help="pass@k on held-out tasks through the verifier")
    _common(p)
    p.add_argument("--model", required=True, help="model directory or training output (latest checkpoint)")
    p.add_argument("--backend", default="cpu")
    p.add_argument("--n", type=int, default=None, help="samples per task (1: greedy)")
    p.add_argument("--k", type=int, nargs="+", default=None)
    p.add_argument("--max-tasks", type=int, default=None)
    p.add_argument("--max-new-tokens", type=int, default=None)
    p.set_defaults(handler=_eval)

    p = tsub.add_parser("plot", help="plot metrics.jsonl of a training output to a PNG")
    p.add_argument("--out", required=True, help="training output directory holding metrics.jsonl")
    p.add_argument("--png", default="", help="image path (default: <out>/metrics.png)")
    p.set_defaults(handler=_plot)
    tr.set_defaults(handler=lambda a: (tr.print_help(), 2)[1])

    sm = sub.add_parser("serve-model", help="serve a checkpoint with `transformers serve` (OpenAI-compatible) for the generate stage",
                        description="Start `transformers serve` for a model directory or a training output's latest "
                                    "checkpoint, wait until it answers /v1/models, print the --set overrides that point "
                                    "`kernelmill generate` at it, and serve until interrupted (train/serve.py).")
    sm.add_argument("checkpoint", help="model directory, or a training output directory (its latest checkpoint)")
    sm.add_argument("--host", default="127.0.0.1")
    sm.add_argument("--port", type=int, default=8000, help="0: a free port")
    sm.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:1 ...")
    sm.add_argument("--continuous-batching", action="store_true",
                    help="batch concurrent requests (paged attention); the first request's temperature then holds for all")
    sm.add_argument("--log", default="", help="server log file (default: a temporary folder, printed)")
    sm.add_argument("--timeout-s", type=float, default=300.0, help="give up when it has not answered by then")
    sm.set_defaults(handler=_serve_model)


def _setup(args, **flags) -> Settings:
    """The settings, with the command's flags that were given (``flags``: flag -> [train] key) set
    on ``[train]``: the trainer's keyword defaults are TrainSettings' (kernelmill/settings.py), so a
    flag left out keeps the configured value."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    from transformers.utils import logging as hf_logging  # transformers: seconds to import; only training needs it

    hf_logging.disable_progress_bar()
    over = {f"train.{key}": getattr(args, flag) for flag, key in flags.items() if getattr(args, flag, None) is not None}
    return load_settings(args.config, over)


def _sft(args) -> int:
    s = _setup(args, steps="sft_steps", batch_size="batch_size", lr="lr", heldout_frac="heldout_frac",
               seed="seed", device="device")
    from train.sft import train_sft

    res = train_sft(args.corpus, args.out, config=args.train_config, init=args.init or s.train.model,
                    resume=not args.no_resume, **keywords_for(train_sft, s.train))
    print(json.dumps(res, indent=2))
    return 0


def _rl(args) -> int:
    s = _setup(args, steps="rl_steps", prompts_per_step="prompts_per_step", group_size="group_size",
               turns="turns", max_new_tokens="max_new_tokens", heldout_frac="heldout_frac", seed="seed",
               device="device")
    from train.rl import train_rl

    kw = keywords_for(train_rl, s.train)
    kw.update(prime_echo=kw["prime_echo"] and not args.no_prime_echo, retry=kw["retry"] and not args.no_retry,
              mirrorpop=kw["mirrorpop"] and not args.no_mirrorpop)
    res = train_rl(args.corpus, args.out, init=args.init, backend=args.backend,
                   verify_cfg=s.verify, resume=not args.no_resume, **kw)
    print(json.dumps(res, indent=2, default=str))
    return 0


def _eval(args) -> int:
    s = _setup(args, n="eval_n", k="eval_k", max_tasks="eval_max_tasks", max_new_tokens="max_new_tokens",
               heldout_frac="heldout_frac", device="device")
    from train.evaluate import evaluate_checkpoint

    res = evaluate_checkpoint(args.model, args.corpus, backend=args.backend, verify_cfg=s.verify,
                              **keywords_for(evaluate_checkpoint, s.train))
    print(json.dumps(res, indent=2))
    return 0


def _serve_model(args) -> int:
    from train.serve import ModelServer, prepare_checkpoint

    ckpt, changed = prepare_checkpoint(args.checkpoint)
    server = ModelServer(ckpt, host=args.host, port=args.port, device=args.device,
                         continuous_batching=args.continuous_batching, log_path=args.log or None, timeout_s=args.timeout_s)
    try:
        server.start()
    except RuntimeError as e:
        print(f"kernelmill serve-model: {e}", file=sys.stderr)
        return 1
    print(json.dumps({"base_url": server.base_url, "model": server.model, "pid": server.proc.pid,
                      "ready_s": server.ready_s, "log": str(server.log_path), "changed": changed,
                      "generate": " ".join(f"--set {s}" for s in server.settings())}, indent=1), flush=True)
    import signal

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # `kill` of this command stops the server too
    try:
        return server.proc.wait()
    except KeyboardInterrupt:
        return 0
    finally:
        server.stop()


def _plot(args) -> int:
    from train.sft import read_metrics

    path = Path(args.out) / "metrics.jsonl"
    if not path.is_file():
        raise InputError(f"training output {args.out}", "has no metrics.jsonl")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    recs = read_metrics(path)
    panels = [("sft", "loss"), ("rft", "loss"), ("rl", "reward_mean"), ("rl", "pass_rate"),
              ("rl", "mirrorpop_dropped_share"), ("rl", "buffer_size"), ("rl", "approx_kl")]
    panels = [(s, k) for s, k in panels if any(r.get("stage") == s and r.get(k) is not None for r in recs)]
    if not panels:
        raise InputError(str(path), "holds no plottable metrics")
    fig, axes = plt.subplots(len(panels), 1, figsize=(7, 2.2 * len(panels)), squeeze=False)
    for ax, (stage, key) in zip(axes[:, 0], panels):
        pts = [(r["step"], r[key]) for r in recs if r.get("stage") == stage and r.get(key) is not None]
        ax.plot([p[0] for p in pts], [p[1] for p in pts])
        ax.set_ylabel(f"{stage} {key}", fontsize=8)
    axes[-1, 0].set_xlabel("step")
    fig.tight_layout()
    png = Path(args.png or Path(args.out) / "metrics.png")
    fig.savefig(png, dpi=90)
    print(png)
    return 0
