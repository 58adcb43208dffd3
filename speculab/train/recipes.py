"""Each drafter kind's training recipe: its model, loss step, batches, saved layout and held-out check.

Knows: how an EAGLE-1/2 head, an EAGLE-3 head and a draft model are built (optionally from a
trained drafter's weights), its own flags, which loss each trains with, how each is saved and evaluated
(through ``speculab.methods``, like every other command), and its model card's summary. Each method's entry in
``methods.METHODS`` names its recipe here.
Does not know: the data or the loop (``pipeline.py``, ``loop.py``); the pipeline hands each ``setup`` the data's
token ranking as ``ranking()`` (ids [n], counts [n]), counted once a run for the recipe and the file beside it.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

import speculab.train.draft as draft_training
import speculab.train.eagle as eagle_training
import speculab.train.eagle3 as eagle3_training
from speculab.methods import METHODS, new_proposer, parse_method, proposer_options
from speculab.models.eagle3_head import load_eagle3_head
from speculab.models.eagle_head import load_eagle_head


@dataclass(frozen=True)
class Recipe:
    model: torch.nn.Module
    step: Callable  # batch -> (loss, metrics)
    make_batch: Callable  # [(token ids, features)] -> batch
    save: Callable  # (model, out folder) -> path of the weights
    load_for_eval: Callable  # (out folder, loaded target) -> proposer
    metrics: tuple[str, ...]  # the logged metrics the loss plot shows
    writes_ranking: bool = False  # a token ranking (draft_vocab.safetensors) ships beside it, for draft_vocab=N


def _trained(folder: Path, load) -> torch.nn.Module:
    """The trained drafter ``load()`` reads from ``folder`` (--init), or a clear error when there is none."""
    if not (folder / "config.json").exists():
        raise ValueError(f"--init {folder}: no trained drafter there (config.json missing)")
    return load()


def _start_from(model: torch.nn.Module, folder: Path, load) -> None:
    """Copy a trained drafter's weights into the freshly built ``model`` (same architecture and sizes)."""
    state = _trained(folder, load).state_dict()
    mine = model.state_dict()
    for name, value in mine.items():
        if name not in state:
            raise ValueError(f"--init {folder}: it has no tensor {name}; is it a drafter of this kind for this target?")
        if state[name].shape != value.shape:
            raise ValueError(
                f"--init {folder}: tensor {name} has shape {tuple(state[name].shape)}, the model being "
                f"trained needs {tuple(value.shape)} (check --hidden-size, --layers, --intermediate-size)"
            )
    model.load_state_dict({name: state[name].to(value.dtype) for name, value in mine.items()})


def _evaluation(spec_text: str):
    """The held-out check's proposer for a trained drafter in ``out``: ``spec_text`` with ``out`` as its drafter,
    parsed and built by ``speculab.methods`` like every other command's."""

    def load_for_eval(out, loaded):
        name = spec_text.partition(":")[0]
        spec = parse_method(f"{spec_text},{METHODS[name].drafter}={out}")
        return new_proposer(spec, proposer_options(spec, loaded))

    return load_for_eval


class EagleRecipe:
    TITLE = "EAGLE-2 head for {target}"
    HELP = "an EAGLE-1/2 head (published layout)"

    @staticmethod
    def add_flags(p: argparse.ArgumentParser) -> None:
        """Nothing beyond every drafter kind's flags."""

    @staticmethod
    def setup(args, target, loaded, ranking):
        raw = json.loads((loaded.path / "config.json").read_text())
        head = eagle_training.new_head(target, seed=args.seed)
        if args.init is not None:
            _start_from(head, args.init, lambda: load_eagle_head(args.init, target, torch.float32, prepack=False))
        step_fn = lambda batch: eagle_training.head_loss(head, target, batch)  # noqa: E731

        load_for_eval = _evaluation("eagle:num_steps=5,topk=8,num_draft_tokens=32,policy=off,draft_vocab=none")
        return Recipe(
            head,
            step_fn,
            eagle_training.make_batch,
            lambda m, out: eagle_training.save_head(m, raw, out),
            load_for_eval,
            ("loss", "feature_loss", "token_loss", "top1"),
            writes_ranking=True,
        )

    @staticmethod
    def summary(head, args) -> list[str]:
        n = sum(p.numel() for p in head.parameters())
        return [
            f"An EAGLE-1-layout head (one decoder layer fed the target's final hidden states; {n / 1e6:.2f}M parameters, "
            "bf16 safetensors), trained by `speculab train eagle` with the reference recipe: 1.0 · SmoothL1 on features "
            "+ 0.1 · soft cross-entropy through the frozen lm_head, uniform feature noise, AdamW (β 0.9, 0.95) with "
            "warm-up, gradient clipping by value 0.5.",
            "Use it with `--method eagle --eagle DIR` (EAGLE-2 dynamic tree: num_steps 5, topk 8, num_draft_tokens 32 "
            "in the acceptance figures below).",
            "Beside it, `draft_vocab.safetensors` ranks the tokens by frequency (the training data and the training "
            "share of the sources), for a reduced draft vocabulary: `--draft-vocab N`, or `draft_vocab=N` in "
            "`speculab bench`.",
        ]


class Eagle3Recipe:
    TITLE = "EAGLE-3 head for {target}"
    HELP = "an EAGLE-3 head (published layout), with the training-time test"

    @staticmethod
    def add_flags(p: argparse.ArgumentParser) -> None:
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

    @staticmethod
    def setup(args, target, loaded, ranking):
        raw = json.loads((loaded.path / "config.json").read_text())
        init = None
        if args.init is not None:
            init = _trained(args.init, lambda: load_eagle3_head(args.init, target, torch.float32, prepack=False))
        target_ids = Eagle3Recipe.vocabulary(args, target, ranking, init)
        head = eagle3_training.new_eagle3_head(target, target_ids, seed=args.seed)
        if init is not None:
            _start_from(head, args.init, lambda: init)
        step_fn = lambda batch: eagle3_training.ttt_loss(head, target, batch, args.ttt_steps, args.feature_noise)  # noqa: E731
        batch_of = eagle3_training.make_cached_batch if args.features == "cached" else eagle3_training.make_batch

        load_for_eval = _evaluation("eagle3:num_steps=5,topk=8,num_draft_tokens=32,policy=off,draft_vocab=none")
        return Recipe(
            head,
            step_fn,
            # without the answer's start (the third item) every position counts
            lambda group: batch_of(
                target, target_ids, group if args.train_on == "answers" else [(g[0], g[1], None, *g[3:]) for g in group]
            ),
            lambda m, out: eagle3_training.save_eagle3_head(m, raw, out),
            load_for_eval,
            ("loss", "top1", "top1_step1", "top1_step2"),
            writes_ranking=True,
        )

    @staticmethod
    def vocabulary(args, target, ranking, init) -> torch.Tensor:
        """The draft vocabulary's target ids [draft_vocab]: the --init head's own (``init``: its lm_head rows are
        those tokens), else the most frequent tokens of the training data (``ranking()``)."""
        if init is not None:
            return init.d2t + torch.arange(len(init.d2t))
        size = min(args.draft_vocab, target.config.vocab_size)
        return eagle3_training.draft_vocabulary(ranking()[0], size, target.config.vocab_size)[0]

    @staticmethod
    def summary(head, args) -> list[str]:
        n = sum(p.numel() for p in head.parameters())
        return [
            f"An EAGLE-3 head (one decoder layer fed three target layers' hidden states; {n / 1e6:.2f}M parameters, "
            f"a {head.lm_head.weight.shape[0]}-token draft vocabulary of the most frequent training tokens"
            + (" (those of the head it started from)" if args.init is not None else "")
            + ", bf16 "
            "safetensors in the published layout), trained by `speculab train eagle3` with the training-time test: "
            f"{args.ttt_steps} unrolled steps, soft cross-entropy to the target over the draft vocabulary weighted 0.8^k, "
            + ("at every position" if args.train_on == "all" else "at the positions of the target's answers only")
            + (f", uniform feature noise {args.feature_noise} of each layer's RMS" if args.feature_noise > 0 else "")
            + (
                "; the target layers' inputs cached once (offline training)."
                if args.features == "cached"
                else "; the target run in every step (online training)."
            ),
            "Use it with `--method eagle3 --eagle DIR` (num_steps 5, topk 8, num_draft_tokens 32 in the figures below).",
            "Beside it, `draft_vocab.safetensors` ranks the tokens by frequency (the training data and the training "
            f"share of the sources): `draft_vocab=auto` (the default) keeps the head's rows of the "
            f"{METHODS['eagle3'].auto_draft_vocab:,} most frequent.",
        ]


class DraftRecipe:
    TITLE = "Draft model for {target}"
    HELP = "a small draft model (HF layout)"

    @staticmethod
    def add_flags(p: argparse.ArgumentParser) -> None:
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

    @staticmethod
    def setup(args, target, loaded, ranking):
        raw = json.loads((loaded.path / "config.json").read_text())
        draft = draft_training.new_draft(
            raw, target.embed_tokens.weight, args.hidden_size, args.layers, args.intermediate_size, seed=args.seed
        )
        if args.init is not None:
            _start_from(draft, args.init, lambda: type(draft).from_pretrained(args.init, torch_dtype=torch.float32))
        vocab_size = target.config.vocab_size
        rows_of_step = lambda: None  # noqa: E731  the whole vocabulary
        if DraftRecipe.reduced(args, vocab_size):
            kept = ranking()[0][: args.draft_vocab]
            generator = torch.Generator().manual_seed(args.seed)
            rows_of_step = lambda: draft_training.loss_rows(kept, vocab_size, args.negatives, generator)  # noqa: E731
        step_fn = lambda batch: draft_training.draft_loss(draft, target, batch, rows_of_step())  # noqa: E731

        load_for_eval = _evaluation("draft:num_speculative_tokens=5,draft_vocab=none")
        return Recipe(
            draft,
            step_fn,
            draft_training.make_batch,
            lambda m, out: draft_training.save_draft(m, loaded.path, out),
            load_for_eval,
            ("kl", "top1", "overlap"),
            writes_ranking=DraftRecipe.reduced(args, vocab_size),
        )

    @staticmethod
    def reduced(args, vocab_size: int) -> bool:
        """Whether the loss covers the frequent tokens plus negatives rather than the whole vocabulary."""
        return 0 < args.draft_vocab < vocab_size

    @staticmethod
    def summary(draft, args) -> list[str]:
        n = sum(p.numel() for p in draft.parameters())
        return [
            f"A Llama-architecture draft model ({args.layers} layers, hidden {args.hidden_size}, {n / 1e6:.2f}M parameters, "
            "tied embeddings, bf16 safetensors, the target's tokenizer), distilled by `speculab train draft`: "
            "KL(target ‖ draft) at every position of self-distilled data; the embedding starts as the target's "
            "projected on its principal directions.",
            *(
                [
                    f"The loss covers the {args.draft_vocab:,} most frequent tokens plus {args.negatives:,} others drawn "
                    "afresh each step (which keep the rest of the output rows low); the model drafts over its whole "
                    "vocabulary."
                ]
                if DraftRecipe.reduced(args, draft.config.vocab_size)
                else []
            ),
            "Use it with `--method draft --draft DIR` (acceptance below with num_speculative_tokens 5; "
            "acceptance rate = accepted draft tokens / draft tokens, as vLLM defines it).",
        ]
