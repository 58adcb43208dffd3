"""``speculab train eagle|draft``: from a target folder to a shipped drafter, in one command.

Knows: the order of the work (self-distilled data with features, cached and
resumable → training under a time budget with checkpoints → the checkpoint in
its published layout → held-out acceptance → card and manifest) and where each
piece is kept. Does not know: the losses (``eagle.py``, ``draft.py``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from pathlib import Path

import torch

from speculab.models.embedded import cache_dir


def add_train_parser(sub) -> None:
    t = sub.add_parser("train", help="train a drafter (EAGLE head or draft model) for a target")
    kinds = t.add_subparsers(dest="kind", required=True)
    for kind, help_text in (("eagle", "an EAGLE-1/2 head (published layout)"),
                            ("eagle3", "an EAGLE-3 head (published layout), with the training-time test"),
                            ("draft", "a small draft model (HF layout)"),
                            ("data", "only make (or finish) the self-distilled data both trainers read"),
                            ("vocab", "only write the token ranking (draft_vocab.safetensors) beside an existing head")):
        p = kinds.add_parser(kind, help=help_text)
        p.add_argument("--target", default=None, help="target checkpoint folder (default: the embedded SmolLM2-135M-Instruct)")
        if kind != "data":
            p.add_argument("--out", required=True, type=Path, help="output folder")
        p.add_argument("--data-dir", type=Path, default=None, help="self-distilled data cache (default: ~/.cache/speculab/train-data/<target>)")
        p.add_argument("--num-prompts", type=int, default=144, help="training prompts drawn and answered per prompt seed")
        p.add_argument("--prompt-seeds", type=int, nargs="+", default=None, metavar="SEED",
                       help="draw --num-prompts prompts for each of these seeds (default: --seed), each set kept in "
                            "its own data folder (DATA_DIR, then DATA_DIR-seedN): more seeds, more answered prompts")
        p.add_argument("--response-tokens", type=int, default=160)
        p.add_argument("--code-windows", type=int, default=0,
                       help="also have the target read this many long code windows of training-share files "
                            "(prefill only: much cheaper per token than answered prompts)")
        p.add_argument("--steps", type=int, default=1200)
        p.add_argument("--lr", type=float, default=1e-3)
        p.add_argument("--warmup-steps", type=int, default=50)
        p.add_argument("--batch-tokens", type=int, default=2048, help="padded tokens per step")
        p.add_argument("--max-minutes", type=float, default=None, help="stop (and save) after this much training time")
        p.add_argument("--checkpoint-every", type=int, default=50)
        p.add_argument("--resume", action="store_true", help="continue from OUT/checkpoint.pt")
        if kind in ("eagle", "draft"):
            p.add_argument("--init", type=Path, default=None, metavar="DIR",
                           help="start from the weights of this trained drafter (same kind, same target) with a fresh "
                                "optimiser and schedule, e.g. to go on training a shipped drafter on more data")
        p.add_argument("--eval-prompts", type=int, default=8)
        p.add_argument("--eval-tokens", type=int, default=96)
        p.add_argument("--seed", type=int, default=0)
        if kind == "eagle3":
            p.add_argument("--draft-vocab", type=int, default=8192, help="the head's vocabulary: the most frequent tokens")
            p.add_argument("--ttt-steps", type=int, default=7, help="training-time test: steps the head is unrolled")
        if kind == "draft":
            p.add_argument("--draft-vocab", type=int, default=8192,
                           help="score the loss over the N most frequent tokens plus --negatives others drawn each step "
                                "(several times cheaper per step on a CPU; 0: the whole vocabulary)")
            p.add_argument("--negatives", type=int, default=1024)
        if kind in ("eagle", "eagle3", "vocab", "draft"):
            p.add_argument("--ranking-source-chars", type=int, default=2_000_000,
                           help="characters per domain of training-share source files counted, beside the "
                                "self-distilled data, for the token ranking of reduced draft vocabularies (0: data only)")
        p.add_argument("--device", default=None)
        if kind == "draft":
            p.add_argument("--hidden-size", type=int, default=192)
            p.add_argument("--layers", type=int, default=3)
            p.add_argument("--intermediate-size", type=int, default=768)
    t.set_defaults(func=cmd_train)


def _data_dir(args, loaded, seed: int) -> Path:
    """The data folder of one prompt seed: DATA_DIR for --seed, DATA_DIR-seedN for the others."""
    base = args.data_dir or cache_dir() / "train-data" / loaded.path.name
    return base if seed == args.seed else base.with_name(f"{base.name}-seed{seed}")


def _answered_prompts(loaded, spec, data_dir: Path) -> list[dict]:
    from speculab.train.distill_data import generate_sequences

    spec_file = data_dir / "spec.json"
    if spec_file.exists() and json.loads(spec_file.read_text()) != json.loads(json.dumps(dataclasses.asdict(spec))):
        raise SystemExit(f"{data_dir} holds data made with other settings ({spec_file}); pass another --data-dir")
    data_dir.mkdir(parents=True, exist_ok=True)
    spec_file.write_text(json.dumps(dataclasses.asdict(spec)))
    return generate_sequences(loaded, spec, data_dir)


def _data(args, loaded):
    from speculab.train.distill_data import CodeSpec, DataSpec, data_manifest, load_features, record_code_windows

    seeds = list(dict.fromkeys(args.prompt_seeds or [args.seed]))
    specs = [DataSpec(num_prompts=args.num_prompts, response_tokens=args.response_tokens, seed=s) for s in seeds]
    folders = [_data_dir(args, loaded, spec.seed) for spec in specs]
    parts = [(folder, _answered_prompts(loaded, spec, folder)) for spec, folder in zip(specs, folders)]
    sequences = [s for _, records in parts for s in records]
    # Windows avoid the files of --seed's prompts (what they were drawn against when first made).
    base = _data_dir(args, loaded, args.seed)
    code_spec = CodeSpec(num_windows=args.code_windows, seed=args.seed)
    own = {s["source"] for d, records in parts if d == base for s in records}
    windows = record_code_windows(loaded, code_spec, base, skip_files=own)
    parts.append((base, windows))
    items = None
    if args.kind not in ("data", "vocab"):  # only training reads the features (~1 GB for the shipped data)
        items = []
        for data_dir, records in parts:  # ids repeat across seeds: features are looked up per folder
            features = load_features(data_dir, records)
            items += [(s["prompt_ids"] + s["response_ids"], features[s["id"]]) for s in records]
    return sequences + windows, items, data_manifest(sequences, specs, windows, code_spec)


def _earlier_commands(out: Path) -> list[str]:
    """The commands of the runs a resumed run continues (from the manifest they left)."""
    path = out / "manifest.json"
    if not path.exists():
        return []
    manifest = json.loads(path.read_text())
    return manifest.get("commands") or [manifest["command"]]


def _write_ranking(out: Path, loaded, sequences: list[dict], command: list[str], source_chars: int) -> dict:
    """The token ranking for reduced draft vocabularies, beside the head; a shipped manifest is kept current."""
    from speculab.train.card import sha256_of
    from speculab.train.vocab import rank_tokens, save_ranking

    if not (out / "config.json").exists():
        raise SystemExit(f"{out}: no head there (config.json missing)")
    ids, counts = rank_tokens(loaded.tokenizer, sequences, source_chars)
    path = save_ranking(out, ids, counts)
    record = {"file": path.name, "distinct_tokens": ids.numel(), "counted_tokens": int(counts.sum())}
    manifest_path = out / "manifest.json"
    if manifest_path.exists():
        manifest = json.loads(manifest_path.read_text())
        manifest["files"][path.name] = sha256_of(path)
        manifest["token_ranking"] = record | {"command": " ".join(command)}
        manifest_path.write_text(json.dumps(manifest, indent=1) + "\n")
    return record


def _eval_prompts(args, loaded, sequences) -> list[list[int]]:
    from speculab.train.distill_data import DataSpec, draw_prompts

    used = {s["source"] for s in sequences}
    spec = DataSpec(num_prompts=args.eval_prompts * 4, seed=args.seed + 1000)
    fresh = [p for p in draw_prompts(loaded.tokenizer, spec) if p["source"] not in used]
    by_domain = {}
    for p in fresh:
        by_domain.setdefault(p["domain"], []).append(p)
    picked = [p for i in range(args.eval_prompts) for d in sorted(by_domain) if len(by_domain[d]) > i for p in [by_domain[d][i]]]
    return [p["prompt_ids"] for p in picked[: args.eval_prompts]]


def cmd_train(args: argparse.Namespace) -> int:
    from speculab import runtime
    from speculab.models.loading import load_model
    from speculab.train import loop
    from speculab.train.card import command_line, measure_acceptance, plot_losses, write_card, write_manifest

    torch.manual_seed(args.seed)
    command = command_line(args.argv)
    started = time.perf_counter()
    loaded = runtime.load(args.target, dtype="float32", device=args.device)
    sequences, items, data = _data(args, loaded)
    if args.kind == "data":
        print(json.dumps({k: v for k, v in data.items() if k not in ("files", "sources")}))
        return 0
    if args.kind == "vocab":
        print(json.dumps(_write_ranking(args.out, loaded, sequences, command, args.ranking_source_chars)))
        return 0
    # Training needs the lm_head as a plain differentiable linear: an unpacked fp32 copy of the target.
    target = load_model(loaded.path, torch.float32, loaded.device, prepack=False)
    trainer = TRAINERS[args.kind]
    model, step_fn, make_batch, save, load_for_eval, metrics = trainer.setup(args, target, loaded, sequences)
    cfg = loop.LoopConfig(steps=args.steps, lr=args.lr, warmup_steps=args.warmup_steps,
                          checkpoint_every=args.checkpoint_every, max_minutes=args.max_minutes)
    from speculab.train.distill_data import batches_by_tokens

    def batches(start: int):
        stream = batches_by_tokens(items, args.batch_tokens, args.seed)
        for _ in range(start):  # a resumed run continues the same data order
            next(stream)
        for group in stream:
            yield make_batch(group)

    state_dir = args.out / "state"  # checkpoint and logs: resumable, not shipped
    result = loop.run(model, batches, step_fn, cfg, state_dir, resume=args.resume, desc=f"train {args.kind}")
    save(model, args.out)
    if args.kind == "eagle" or (args.kind == "draft" and DraftTrainer.reduced(args, target.config.vocab_size)):
        # the ranking a reduced draft vocabulary reads (--draft-vocab N, draft_vocab=auto in speculab bench)
        _write_ranking(args.out, loaded, sequences, command, args.ranking_source_chars)
    history = loop.read_log(state_dir)
    (args.out / "train_log.jsonl").write_text("".join(json.dumps(h) + "\n" for h in history))
    plot_losses(history, metrics, args.out / "loss.png", f"speculab train {args.kind}: {loaded.path.name}")
    if args.eval_prompts > 0:
        proposer = load_for_eval(args.out, loaded)
        acceptance = measure_acceptance(loaded, proposer, _eval_prompts(args, loaded, sequences), args.eval_tokens)
    else:
        acceptance = {"prompts": 0, "max_tokens": 0, "mean_acceptance_length": None, "acceptance_rate": None,
                      "accepted_per_position": [], "identical_to_baseline": None}
    loop_summary = {"steps_done": result.steps_done, "finished": result.finished, "seconds": result.seconds,
                    "final": history[-1] if history else {}}
    init = getattr(args, "init", None)  # eagle and draft only
    earlier = (_earlier_commands(init) if init else []) + (_earlier_commands(args.out) if args.resume else [])
    card = write_card(args.out, title=trainer.TITLE.format(target=loaded.path.name), summary=trainer.summary(model, args),
                      data=data, loop=loop_summary, acceptance=acceptance, plot="loss.png", command=command,
                      earlier_commands=earlier, init_from=init)
    write_manifest(args.out, command=command, data={k: v for k, v in data.items() if k != "files"} | {"num_files": len(data["files"])},
                   train_seconds=result.seconds,
                   extra={"commands": earlier + [" ".join(command)],  # every run that trained this checkpoint, in order
                          "total_seconds": round(time.perf_counter() - started, 1), "acceptance": acceptance,
                          "steps": result.steps_done, "target": str(loaded.path)})
    (args.out / "training_files.json").write_text(json.dumps(data["files"], indent=0) + "\n")
    print(json.dumps({"out": str(args.out), "card": str(card), "steps": result.steps_done,
                      "train_minutes": round(result.seconds / 60, 1), "tau": acceptance["mean_acceptance_length"],
                      "acceptance_rate": acceptance["acceptance_rate"]}))
    return 0


def _start_from(model: torch.nn.Module, folder: Path, load) -> None:
    """Copy a trained drafter's weights into the freshly built ``model`` (same architecture and sizes)."""
    if not (folder / "config.json").exists():
        raise SystemExit(f"--init {folder}: no trained drafter there (config.json missing)")
    state = load().state_dict()
    mine = model.state_dict()
    for name, value in mine.items():
        if name not in state:
            raise SystemExit(f"--init {folder}: it has no tensor {name}; is it a drafter of this kind for this target?")
        if state[name].shape != value.shape:
            raise SystemExit(f"--init {folder}: tensor {name} has shape {tuple(state[name].shape)}, the model being "
                             f"trained needs {tuple(value.shape)} (check --hidden-size, --layers, --intermediate-size)")
    model.load_state_dict({name: state[name].to(value.dtype) for name, value in mine.items()})


def _evaluation(spec_text: str):
    """The held-out check's proposer for a trained drafter in ``out``: ``spec_text`` with ``out`` as its drafter,
    parsed and built by ``speculab.methods`` like every other command's."""
    from speculab.methods import METHODS, new_proposer, parse_method, proposer_options

    def load_for_eval(out, loaded):
        name = spec_text.partition(":")[0]
        spec = parse_method(f"{spec_text},{METHODS[name].drafter}={out}")
        return new_proposer(spec, proposer_options(spec, loaded))

    return load_for_eval


class EagleTrainer:
    TITLE = "EAGLE-2 head for {target}"

    @staticmethod
    def setup(args, target, loaded, sequences):
        from speculab.models.eagle_head import load_eagle_head
        from speculab.train.eagle import head_loss, make_batch, new_head, save_head

        raw = json.loads((loaded.path / "config.json").read_text())
        head = new_head(target, seed=args.seed)
        if args.init is not None:
            _start_from(head, args.init, lambda: load_eagle_head(args.init, target, torch.float32, prepack=False))
        step_fn = lambda batch: head_loss(head, target, batch)  # noqa: E731

        load_for_eval = _evaluation("eagle:num_steps=5,topk=8,num_draft_tokens=32,batch_budget=none,draft_vocab=none")
        return head, step_fn, make_batch, lambda m, out: save_head(m, raw, out), load_for_eval, ("loss", "feature_loss", "token_loss", "top1")

    @staticmethod
    def summary(head, args) -> list[str]:
        n = sum(p.numel() for p in head.parameters())
        return [f"An EAGLE-1-layout head (one decoder layer fed the target's final hidden states; {n / 1e6:.2f}M parameters, "
                "bf16 safetensors), trained by `speculab train eagle` with the reference recipe: 1.0 · SmoothL1 on features "
                "+ 0.1 · soft cross-entropy through the frozen lm_head, uniform feature noise, AdamW (β 0.9, 0.95) with "
                "warm-up, gradient clipping by value 0.5.",
                "Use it with `--method eagle --eagle DIR` (EAGLE-2 dynamic tree: num_steps 5, topk 8, num_draft_tokens 32 "
                "in the acceptance figures below).",
                "Beside it, `draft_vocab.safetensors` ranks the tokens by frequency (the training data and the training "
                "share of the sources), for a reduced draft vocabulary: `--draft-vocab N`, or `draft_vocab=N` in "
                "`speculab bench`."]


class Eagle3Trainer:
    TITLE = "EAGLE-3 head for {target}"

    @staticmethod
    def setup(args, target, loaded, sequences):
        from speculab.train.eagle3 import draft_vocabulary, make_batch, new_eagle3_head, save_eagle3_head, ttt_loss
        from speculab.train.vocab import rank_tokens

        raw = json.loads((loaded.path / "config.json").read_text())
        ranking, _ = rank_tokens(loaded.tokenizer, sequences, args.ranking_source_chars)
        size = min(args.draft_vocab, target.config.vocab_size)
        target_ids, _, _ = draft_vocabulary(ranking, size, target.config.vocab_size)
        head = new_eagle3_head(target, target_ids, seed=args.seed)
        step_fn = lambda batch: ttt_loss(head, target, batch, args.ttt_steps)  # noqa: E731

        load_for_eval = _evaluation("eagle3:num_steps=5,topk=8,num_draft_tokens=32,batch_budget=none")
        return (head, step_fn, lambda group: make_batch(target, target_ids, group),
                lambda m, out: save_eagle3_head(m, raw, out), load_for_eval, ("loss", "top1", "top1_step1", "top1_step2"))

    @staticmethod
    def summary(head, args) -> list[str]:
        n = sum(p.numel() for p in head.parameters())
        return [f"An EAGLE-3 head (one decoder layer fed three target layers' hidden states; {n / 1e6:.2f}M parameters, "
                f"a {head.lm_head.weight.shape[0]}-token draft vocabulary of the most frequent training tokens, bf16 "
                "safetensors in the published layout), trained by `speculab train eagle3` with the training-time test: "
                f"{args.ttt_steps} unrolled steps, soft cross-entropy to the target over the draft vocabulary weighted 0.8^k.",
                "Use it with `--method eagle3 --eagle DIR` (num_steps 5, topk 8, num_draft_tokens 32 in the figures below)."]


class DraftTrainer:
    TITLE = "Draft model for {target}"

    @staticmethod
    def setup(args, target, loaded, sequences):
        from speculab.train.draft import draft_loss, loss_rows, make_batch, new_draft, save_draft
        from speculab.train.vocab import rank_tokens

        raw = json.loads((loaded.path / "config.json").read_text())
        draft = new_draft(raw, target.embed_tokens.weight, args.hidden_size, args.layers, args.intermediate_size, seed=args.seed)
        if args.init is not None:
            _start_from(draft, args.init, lambda: type(draft).from_pretrained(args.init, torch_dtype=torch.float32))
        vocab_size = target.config.vocab_size
        rows_of_step = lambda: None  # noqa: E731  the whole vocabulary
        if DraftTrainer.reduced(args, vocab_size):
            kept = rank_tokens(loaded.tokenizer, sequences, args.ranking_source_chars)[0][: args.draft_vocab]
            generator = torch.Generator().manual_seed(args.seed)
            rows_of_step = lambda: loss_rows(kept, vocab_size, args.negatives, generator)  # noqa: E731
        step_fn = lambda batch: draft_loss(draft, target, batch, rows_of_step())  # noqa: E731

        load_for_eval = _evaluation("draft:num_speculative_tokens=5,draft_vocab=none")
        return draft, step_fn, make_batch, lambda m, out: save_draft(m, loaded.path, out), load_for_eval, ("kl", "top1", "overlap")

    @staticmethod
    def reduced(args, vocab_size: int) -> bool:
        """Whether the loss covers the frequent tokens plus negatives rather than the whole vocabulary."""
        return 0 < args.draft_vocab < vocab_size

    @staticmethod
    def summary(draft, args) -> list[str]:
        n = sum(p.numel() for p in draft.parameters())
        return [f"A Llama-architecture draft model ({args.layers} layers, hidden {args.hidden_size}, {n / 1e6:.2f}M parameters, "
                "tied embeddings, bf16 safetensors, the target's tokenizer), distilled by `speculab train draft`: "
                "KL(target ‖ draft) at every position of self-distilled data; the embedding starts as the target's "
                "projected on its principal directions.",
                *([f"The loss covers the {args.draft_vocab:,} most frequent tokens plus {args.negatives:,} others drawn "
                   "afresh each step (which keep the rest of the output rows low); the model drafts over its whole "
                   "vocabulary."] if DraftTrainer.reduced(args, draft.config.vocab_size) else []),
                "Use it with `--method draft --draft DIR` (acceptance below with num_speculative_tokens 5; "
                "acceptance rate = accepted draft tokens / draft tokens, as vLLM defines it)."]


TRAINERS = {"eagle": EagleTrainer, "eagle3": Eagle3Trainer, "draft": DraftTrainer}
