"""``speculab train eagle|eagle3|draft|data|vocab``: each kind with its own flags.

Knows: which flags each kind takes (the target, the self-distilled data, the training loop, each
drafter's sizes) and which function runs it (``pipeline.py``). Does not know: the work itself.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from speculab.runtime import add_model_flags


def _target_flags(p: argparse.ArgumentParser) -> None:
    add_model_flags(p, dtype=False)  # the target trains its drafter in fp32
    p.add_argument("--seed", type=int, default=0)


def _data_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data-dir", type=Path, default=None, help="self-distilled data cache (default: ~/.cache/speculab/train-data/<target>)")
    p.add_argument("--num-prompts", type=int, default=144, help="training prompts drawn and answered per prompt seed")
    p.add_argument(
        "--prompt-seeds",
        type=int,
        nargs="+",
        default=None,
        metavar="SEED",
        help="draw --num-prompts prompts for each of these seeds (default: --seed), each set kept in "
        "its own data folder (DATA_DIR, then DATA_DIR-seedN): more seeds, more answered prompts",
    )
    p.add_argument("--response-tokens", type=int, default=160)
    p.add_argument(
        "--code-windows",
        type=int,
        default=0,
        help="also have the target read this many long code windows of training-share files "
        "(prefill only: much cheaper per token than answered prompts)",
    )
    p.add_argument(
        "--agentic-prompts",
        type=int,
        default=0,
        help="also have the target answer this many agentic edits (rename, lint-fix, apply-review, second turn) "
        "on training-share Python and TypeScript files, kept in DATA_DIR-agentic",
    )


def _ranking_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--ranking-source-chars",
        type=int,
        default=2_000_000,
        help="characters per domain of training-share source files counted, beside the "
        "self-distilled data, for the token ranking of reduced draft vocabularies (0: data only)",
    )


def _training_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", required=True, type=Path, help="output folder")
    p.add_argument("--steps", type=int, default=1200)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--warmup-steps", type=int, default=50)
    p.add_argument("--batch-tokens", type=int, default=2048, help="padded tokens per step")
    p.add_argument("--max-minutes", type=float, default=None, help="stop (and save) after this much training time")
    p.add_argument("--checkpoint-every", type=int, default=50)
    p.add_argument("--resume", action="store_true", help="continue from OUT/state/checkpoint.pt")
    p.add_argument("--eval-prompts", type=int, default=8, help="held-out prompts for the acceptance check (0: none)")
    p.add_argument("--eval-tokens", type=int, default=96)
    p.add_argument(
        "--card-notes",
        type=Path,
        default=None,
        help="a Markdown file appended to the card as it is: why this drafter (the measurements that chose its shape "
        "or recipe, how it compares), which training cannot know",
    )
    _ranking_flags(p)


def _init_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--init",
        type=Path,
        default=None,
        metavar="DIR",
        help="start from the weights of this trained drafter (same kind, same target) with a fresh "
        "optimiser and schedule, e.g. to go on training a shipped drafter on more data",
    )


def _eagle3_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--draft-vocab", type=int, default=8192, help="the head's vocabulary: the most frequent tokens")
    p.add_argument("--ttt-steps", type=int, default=7, help="training-time test: steps the head is unrolled")
    p.add_argument(
        "--train-on",
        choices=("all", "answers"),
        default="all",
        help="positions the loss counts: every one, or only those a head drafts from (the target's answers; the "
        "shipped head, `make assets`): the unrolled steps then run on them alone, about half the time a step",
    )
    p.add_argument(
        "--features",
        choices=("cached", "online"),
        default="cached",
        help="cached: the three target layers' inputs are computed once per data folder (DATA_DIR/eagle3-features, "
        "bf16, ~3.5 KB a token) and each step runs only the head, about a third of an online step here; online: "
        "the target runs over every batch (nothing stored)",
    )
    p.add_argument(
        "--feature-noise",
        type=float,
        default=0.0,
        help="uniform noise on the fed features, this wide relative to each layer's RMS (EAGLE-1's ±0.1 on its "
        "post-norm features is 0.09 of their median RMS here; 0: none)",
    )


def _draft_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--draft-vocab",
        type=int,
        default=8192,
        help="score the loss over the N most frequent tokens plus --negatives others drawn each step "
        "(several times cheaper per step on a CPU; 0: the whole vocabulary)",
    )
    p.add_argument("--negatives", type=int, default=1024)
    p.add_argument("--hidden-size", type=int, default=192)
    p.add_argument("--layers", type=int, default=3)
    p.add_argument("--intermediate-size", type=int, default=768)


def _out_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", required=True, type=Path, help="the head folder the ranking is written beside")


KINDS = {  # kind -> (help, flag groups, command name in pipeline.py)
    "eagle": ("an EAGLE-1/2 head (published layout)", (_target_flags, _data_flags, _training_flags, _init_flag), "cmd_train"),
    "eagle3": (
        "an EAGLE-3 head (published layout), with the training-time test",
        (_target_flags, _data_flags, _training_flags, _init_flag, _eagle3_flags),
        "cmd_train",
    ),
    "draft": ("a small draft model (HF layout)", (_target_flags, _data_flags, _training_flags, _init_flag, _draft_flags), "cmd_train"),
    "data": ("only make (or finish) the self-distilled data the trainers read", (_target_flags, _data_flags), "cmd_data"),
    "vocab": (
        "only write the token ranking (draft_vocab.safetensors) beside an existing head",
        (_target_flags, _data_flags, _out_flag, _ranking_flags),
        "cmd_vocab",
    ),
}


def add_train_parser(sub) -> None:
    t = sub.add_parser("train", help="train a drafter (EAGLE head or draft model) for a target")
    kinds = t.add_subparsers(dest="kind", required=True)
    for kind, (help_text, groups, command) in KINDS.items():
        p = kinds.add_parser(kind, help=help_text)
        for add in groups:
            add(p)
        p.set_defaults(func=_command(command))


def _command(name: str):
    def run(args: argparse.Namespace) -> int:
        from speculab.train import pipeline

        return getattr(pipeline, name)(args)

    return run
