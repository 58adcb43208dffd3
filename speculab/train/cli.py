"""``speculab train eagle|eagle3|draft|data|vocab``: each kind with its own flags.

Knows: the flags every drafter kind takes (the target, the self-distilled data, the training loop) and which function
runs each kind (``pipeline.py``). A drafter kind is a method whose entry in ``methods.METHODS`` names a training recipe;
the recipe adds its own flags (``recipes.py``: importing it costs about 15 ms once the method table is loaded; the
pipeline, the trainer's own stack, is imported only when a kind runs). Does not know: the work itself.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from speculab.methods import METHODS
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
    p.add_argument(
        "--long-prompts",
        type=int,
        default=0,
        help="also have the target answer this many agent-length prompts, as a coding agent sends them: task prompts "
        "after whole training-share files, 2k-7.5k tokens in all (as far as the target's positions allow), kept in "
        "DATA_DIR-long; a drafter trained on short prompts alone drafts worse after long ones",
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


def _out_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", required=True, type=Path, help="the head folder the ranking is written beside")


OTHER_KINDS = {  # kind -> (help, flag groups, command name in pipeline.py); a method's kind is its entry's recipe
    "data": ("only make (or finish) the self-distilled data the trainers read", (_target_flags, _data_flags), "cmd_data"),
    "vocab": (
        "only write the token ranking (draft_vocab.safetensors) beside an existing head",
        (_target_flags, _data_flags, _out_flag, _ranking_flags),
        "cmd_vocab",
    ),
}
DRAFTER_FLAGS = (_target_flags, _data_flags, _training_flags, _init_flag)  # every drafter kind's, then its recipe's own


def add_train_parser(sub) -> None:
    t = sub.add_parser("train", help="train a drafter (EAGLE head or draft model) for a target")
    kinds = t.add_subparsers(dest="kind", required=True)
    for name, entry in METHODS.items():
        if entry.recipe:
            recipe = entry.recipe_class()
            p = kinds.add_parser(name, help=recipe.HELP)
            for add in DRAFTER_FLAGS:
                add(p)
            recipe.add_flags(p)
            p.set_defaults(func=_command("cmd_train"))
    for kind, (help_text, groups, command) in OTHER_KINDS.items():
        p = kinds.add_parser(kind, help=help_text)
        for add in groups:
            add(p)
        p.set_defaults(func=_command(command))


def _command(name: str):
    def run(args: argparse.Namespace) -> int:
        from speculab.train import pipeline

        return getattr(pipeline, name)(args)

    return run
