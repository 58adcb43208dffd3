"""The work of ``speculab train``: from a target folder to a shipped drafter, in one command.

Knows: the order of the work (self-distilled data with features, cached and
resumable -> training under a time limit with checkpoints -> the checkpoint in
its published layout -> held-out acceptance -> card and manifest) and where each
piece is kept. Does not know: the flags (``cli.py``), each kind's model and loss
(``recipes.py``, ``eagle.py``, ``eagle3.py``, ``draft.py``).
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import time
from pathlib import Path

import torch

from speculab import runtime
from speculab.files import cache_dir, sha256_of
from speculab.methods import method
from speculab.models.draft_vocab import save_ranking
from speculab.models.loading import load_model
from speculab.train import loop
from speculab.train.card import command_line, measure_acceptance, plot_losses, write_card, write_manifest
from speculab.train.distill_data import batches_by_tokens, data_manifest, generate_sequences, load_features, record_code_windows
from speculab.train.eagle3_features import cached_layer_features
from speculab.train.training_prompts import AGENTIC_TOKENS, CodeSpec, DataSpec, files_read, held_out_prompts, long_context
from speculab.train.vocab import rank_tokens


def _data_dir(args, loaded, seed: int) -> Path:
    """The data folder of one prompt seed: DATA_DIR for --seed, DATA_DIR-seedN for the others."""
    base = args.data_dir or cache_dir() / "train-data" / loaded.path.name
    return base if seed == args.seed else base.with_name(f"{base.name}-seed{seed}")


def _answered_prompts(loaded, spec, data_dir: Path) -> list[dict]:

    spec_file = data_dir / "spec.json"
    if spec_file.exists() and DataSpec.stored(json.loads(spec_file.read_text())) != spec:
        raise ValueError(f"{data_dir} holds data made with other settings ({spec_file}); pass another --data-dir")
    data_dir.mkdir(parents=True, exist_ok=True)
    spec_file.write_text(json.dumps(dataclasses.asdict(spec)))
    return generate_sequences(loaded, spec, data_dir)


def _specs_and_folders(args, loaded) -> tuple[list[DataSpec], list[Path]]:
    """Each answered prompt set and its data folder: one per prompt seed, then the agentic edits and the agent-length
    prompts (``--agentic-prompts``, ``--long-prompts``), each in a folder of its own beside --seed's."""
    seeds = list(dict.fromkeys(args.prompt_seeds or [args.seed]))
    specs = [DataSpec(num_prompts=args.num_prompts, response_tokens=args.response_tokens, seed=s) for s in seeds]
    folders = [_data_dir(args, loaded, spec.seed) for spec in specs]
    base = _data_dir(args, loaded, args.seed)
    if getattr(args, "agentic_prompts", 0):  # agentic edits on training-share files
        specs.append(DataSpec(args.agentic_prompts, AGENTIC_TOKENS, args.response_tokens, seed=args.seed, kind="agentic"))
    if getattr(args, "long_prompts", 0):  # task prompts after whole training-share files: agent-length contexts
        context = long_context(loaded.model.config.max_position_embeddings, args.response_tokens)
        specs.append(DataSpec(args.long_prompts, response_tokens=args.response_tokens, seed=args.seed, kind="long", context_tokens=context))
    folders += [base.with_name(f"{base.name}-{spec.kind}") for spec in specs[len(folders) :]]
    return specs, folders


def _data(args, loaded, features: bool = False):
    """(sequences, training items with features when ``features``, the data manifest).

    An item is (token ids, final hidden states, where the answer starts), and for an EAGLE-3 head trained on
    cached features (``--features cached``) the three layers' inputs as a fourth."""

    specs, folders = _specs_and_folders(args, loaded)
    parts = [(folder, _answered_prompts(loaded, spec, folder)) for spec, folder in zip(specs, folders)]
    sequences = [s for _, records in parts for s in records]
    # Windows avoid the files of --seed's prompts (what they were drawn against when first made).
    base = _data_dir(args, loaded, args.seed)
    code_spec = CodeSpec(num_windows=args.code_windows, seed=args.seed)
    own = {s["source"] for d, records in parts if d == base for s in records}
    windows = record_code_windows(loaded, code_spec, base, skip_files=own)
    parts.append((base, windows))
    items = None
    if features:  # only training reads them (~1 GB for the shipped data)
        items = []
        for data_dir, records in parts:  # ids repeat across seeds: features are looked up per folder
            features = load_features(data_dir, records)
            # (token ids, features, where the answer starts): EAGLE-3 trains only where a head drafts
            part = [(s["prompt_ids"] + s["response_ids"], features[s["id"]], len(s["prompt_ids"])) for s in records]
            if getattr(args, "features", None) == "cached":
                fused = cached_layer_features(loaded.model, loaded.path.name, data_dir, records)
                part = [item + (fused[s["id"]],) for item, s in zip(part, records)]
            items += part
    return sequences + windows, items, data_manifest(sequences, specs, windows, code_spec)


def _earlier_commands(out: Path) -> list[str]:
    """The commands of the runs a resumed run continues (from the manifest they left)."""
    path = out / "manifest.json"
    if not path.exists():
        return []
    manifest = json.loads(path.read_text())
    return manifest.get("commands") or [manifest["command"]]


def _write_ranking(out: Path, ranking: tuple[torch.Tensor, torch.Tensor], command: list[str]) -> dict:
    """The token ranking (ids [n], counts [n]: ``rank_tokens``) beside the head, for reduced draft vocabularies;
    a shipped manifest is kept current."""

    if not (out / "config.json").exists():
        raise ValueError(f"{out}: no head there (config.json missing)")
    ids, counts = ranking
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

    return held_out_prompts(loaded.tokenizer, {f for s in sequences for f in files_read(s)}, args.eval_prompts, args.seed + 1000)


def _setup(args: argparse.Namespace):

    torch.manual_seed(args.seed)
    loaded = runtime.load(args.model, dtype="float32", device=args.device)
    return command_line(args.argv), loaded


def cmd_data(args: argparse.Namespace) -> int:
    _, loaded = _setup(args)
    _, _, data = _data(args, loaded)
    print(json.dumps({k: v for k, v in data.items() if k not in ("files", "sources")}))
    return 0


def cmd_vocab(args: argparse.Namespace) -> int:
    command, loaded = _setup(args)
    sequences, _, _ = _data(args, loaded)
    ranking = rank_tokens(loaded.tokenizer, sequences, args.ranking_source_chars)
    print(json.dumps(_write_ranking(args.out, ranking, command)))
    return 0


NO_ACCEPTANCE = {  # the card's acceptance fields when --eval-prompts 0 skips the held-out measurement
    "prompts": 0,
    "max_tokens": 0,
    "mean_acceptance_length": None,
    "acceptance_rate": None,
    "accepted_per_position": [],
    "reached_per_position": [],
    "conditional_acceptance": [],
    "identical_to_baseline": None,
}


@dataclasses.dataclass
class TrainRun:
    """One ``speculab train`` run, as its steps hand it on."""

    args: argparse.Namespace
    command: list[str]
    loaded: object  # runtime.LoadedModel: the target
    trainer: object  # the kind's recipe class (its method's entry names it)
    recipe: object  # what trainer.setup returned: model, make_batch, step, save, load_for_eval, metrics
    data: dict
    started: float


def cmd_train(args: argparse.Namespace) -> int:
    """Train one drafter kind (eagle, eagle3 or draft) end to end."""

    started = time.perf_counter()
    if args.card_notes is not None and not args.card_notes.is_file():  # found out now, not after hours of training
        raise ValueError(f"--card-notes {args.card_notes}: no such file")
    command, loaded = _setup(args)
    sequences, items, data = _data(args, loaded, features=True)
    # Training needs the lm_head as a plain differentiable linear: an unpacked fp32 copy of the target.
    target = load_model(loaded.path, torch.float32, loaded.device, prepack=False)
    trainer = method(args.kind).recipe_class()
    # counted once a run, if at all: a recipe's draft vocabulary and the ranking written beside it are the same
    ranking = functools.cache(lambda: rank_tokens(loaded.tokenizer, sequences, args.ranking_source_chars))
    run = TrainRun(args, command, loaded, trainer, trainer.setup(args, target, loaded, ranking), data, started)
    result, history = _train(run, items)
    if run.recipe.writes_ranking:
        # the ranking a reduced draft vocabulary reads (--draft-vocab N, draft_vocab=auto in speculab bench)
        _write_ranking(args.out, ranking(), command)
    if args.eval_prompts > 0:
        proposer = run.recipe.load_for_eval(args.out, loaded)
        acceptance = measure_acceptance(loaded, proposer, _eval_prompts(args, loaded, sequences), args.eval_tokens)
    else:
        acceptance = NO_ACCEPTANCE
    card = _write_records(run, result, history, acceptance)
    summary = {"out": str(args.out), "card": str(card), "steps": result.steps_done, "train_minutes": round(result.seconds / 60, 1)}
    print(json.dumps(summary | {"tau": acceptance["mean_acceptance_length"], "acceptance_rate": acceptance["acceptance_rate"]}))
    return 0


def _train(run: TrainRun, items) -> tuple[object, list[dict]]:
    """The training loop (resumable, under its time limit), the checkpoint saved, its log and loss plot written."""

    args, recipe = run.args, run.recipe
    cfg = loop.LoopConfig(
        steps=args.steps, lr=args.lr, warmup_steps=args.warmup_steps, checkpoint_every=args.checkpoint_every, max_minutes=args.max_minutes
    )

    def batches(start: int):
        stream = batches_by_tokens(items, args.batch_tokens, args.seed)
        for _ in range(start):  # a resumed run continues the same data order
            next(stream)
        for group in stream:
            yield recipe.make_batch(group)

    state_dir = args.out / "state"  # checkpoint and logs: resumable, not shipped
    result = loop.run(recipe.model, batches, recipe.step, cfg, state_dir, resume=args.resume, desc=f"train {args.kind}")
    recipe.save(recipe.model, args.out)
    history = loop.read_log(state_dir)
    (args.out / "train_log.jsonl").write_text("".join(json.dumps(h) + "\n" for h in history))
    plot_losses(history, recipe.metrics, args.out / "loss.png", f"speculab train {args.kind}: {run.loaded.path.name}")
    return result, history


def _write_records(run: TrainRun, result, history: list[dict], acceptance: dict) -> Path:
    """The card, the manifest and the list of training files; returns the card's path."""
    args, data = run.args, run.data
    loop_summary = {
        "steps_done": result.steps_done,
        "finished": result.finished,
        "seconds": result.seconds,
        "final": history[-1] if history else {},
    }
    init = getattr(args, "init", None)  # eagle and draft only
    earlier = (_earlier_commands(init) if init else []) + (_earlier_commands(args.out) if args.resume else [])
    card = write_card(
        args.out,
        title=run.trainer.TITLE.format(target=run.loaded.path.name),
        summary=run.trainer.summary(run.recipe.model, args),
        data=data,
        loop=loop_summary,
        acceptance=acceptance,
        plot="loss.png",
        command=run.command,
        earlier_commands=earlier,
        init_from=init,
        notes=_card_notes(args),
    )
    extra = {
        "commands": earlier + [" ".join(run.command)],  # every run that trained this checkpoint, in order
        "total_seconds": round(time.perf_counter() - run.started, 1),
        "acceptance": acceptance,
        "steps": result.steps_done,
        "target": str(run.loaded.path),
        "settings": _settings(args),  # what the card's prose says, as data
    }
    manifest_data = {k: v for k, v in data.items() if k != "files"} | {"num_files": len(data["files"])}
    write_manifest(args.out, command=run.command, data=manifest_data, train_seconds=result.seconds, extra=extra)
    (args.out / "training_files.json").write_text(json.dumps(data["files"], indent=0) + "\n")
    return card


def _card_notes(args) -> str:
    """``--card-notes FILE``'s text (its existence checked before training starts, in ``cmd_train``)."""
    return args.card_notes.read_text(encoding="utf-8") if args.card_notes is not None else ""


def _settings(args) -> dict:
    """The run's parsed flags (paths as text), as the manifest records them."""
    kept = {k: v for k, v in vars(args).items() if not callable(v)}
    return {k: str(v) if isinstance(v, Path) else v for k, v in kept.items()}
