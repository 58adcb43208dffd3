"""Training data for drafters: code prompts from the training share, answered by the target.

Knows: how to have the target answer the training prompts (drawn by
``training_prompts``) (self-distillation: greedy for some, sampled for
others) with speculab's own engine, continuously batched, and how to store the resulting token
sequences so that a killed run resumes where it stopped.

The target's features come for free while it answers: a recording proposer
(drafts nothing, so decoding is plain) receives the hidden states of the
prompt at prefill and of every emitted token after, through the engine's
ordinary proposer hooks. Sequence i's features are stored as tensor ``"<id>"``
[num_tokens - 1, width] in a safetensors shard per batch of prompts: position t
holds the target's state after reading token t.

Beside the answered prompts, *code windows* add data at the cost of a prefill
only: a long window of a training-share file, framed as the assistant's answer
to a request for that file, read by the target once. Answering prompts costs a
decode step per token; a window costs a fraction of one. Measured on the
embedded model (BENCHMARKS.md): windows made the draft model much better and an
EAGLE head worse, since the target reading someone else's code moves its
features unlike the target writing its own answer, which is what a head drafts.

Does not know: losses (``eagle.py``, ``draft.py``) or how prompts are drawn (``training_prompts.py``).
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterator
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from tqdm import tqdm

from speculab.corpora.sources import SOURCES, source_record
from speculab.engine import Engine, sequence_length
from speculab.jsonl import read_records
from speculab.sampling import SamplingParams
from speculab.speculative.proposer import Proposer
from speculab.train.training_prompts import CodeSpec, DataSpec, draw_code_windows, draw_prompts, files_read

SLOT_POSITIONS = 16 * 4096  # the KV positions an answering engine holds: 16 slots of prompts up to 4k, fewer for longer
# ones (8 for agent-length prompts near 8k: about 3 GB of fp32 KV cache on the embedded model)


def read_sequences(path: Path) -> list[dict]:
    return read_records(path)  # a line cut by a kill is dropped and regenerated on resume


def group_by_tokens(items: list, length: Callable[[object], int], batch_tokens: int) -> list[list]:
    """Consecutive ``items`` in groups whose padded size (longest length × count) stays within ``batch_tokens``."""
    groups, group, longest = [], [], 0
    for item in items:
        padded = max(longest, length(item))
        if group and padded * (len(group) + 1) > batch_tokens:
            groups.append(group)
            group, padded = [], length(item)
        group.append(item)
        longest = padded
    return groups + ([group] if group else [])


def batches_by_tokens(sequences: list[tuple], batch_tokens: int, seed: int) -> Iterator[list]:
    """Endless epochs; each shuffles, then groups sequences of similar length under a cap on padded tokens."""
    epoch = 0
    while True:
        rng = random.Random(seed + epoch)
        order = list(range(len(sequences)))
        rng.shuffle(order)
        # sort within windows of 32 so padding stays low but epochs still differ
        order = [i for w in range(0, len(order), 32) for i in sorted(order[w : w + 32], key=lambda i: len(sequences[i][0]))]
        groups = group_by_tokens(order, lambda i: len(sequences[i][0]), batch_tokens)
        rng.shuffle(groups)
        for g in groups:
            yield [sequences[i] for i in g]
        epoch += 1


def _stored_records(out_dir: Path, index: Path) -> list[dict]:
    """The index's records whose features shard exists; the index is rewritten without a line cut by a kill."""
    done = [r for r in read_sequences(index) if (out_dir / r["features_file"]).exists()]
    index.write_text("".join(json.dumps(r) + "\n" for r in done))
    return done


def _store_shard(shard: Path, tensors: dict[str, torch.Tensor], index: Path, records: list[dict]) -> list[dict]:
    """Features first, then their index lines: a kill between the two leaves records that resume redoes."""
    save_file(tensors, shard)
    with index.open("a") as f:
        f.writelines(json.dumps(r) + "\n" for r in records)
    return records


def _groups(items: list, size: int) -> Iterator[list]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


class FeatureRecorder(Proposer):
    """Drafts nothing; keeps the target's features of every request it sees."""

    needs_features = True

    def __init__(self, feature_layers: tuple[int, ...] = ()):
        self.feature_layers = feature_layers
        self.request_in_slot: dict[int, int] = {}
        self.features: dict[int, list[torch.Tensor]] = {}

    def admit(self, slot, request, features=None) -> None:
        self.request_in_slot[slot] = request.id
        self.features[request.id] = [features.float().cpu()]

    def observe(self, slot, features) -> None:
        self.features[self.request_in_slot[slot]].append(features.float().cpu())

    def move(self, src, dst) -> None:
        self.request_in_slot[dst] = self.request_in_slot.pop(src)

    def release(self, slot) -> None:
        self.request_in_slot.pop(slot, None)

    def take(self, request_id: int) -> torch.Tensor:
        return torch.cat(self.features.pop(request_id))


def answer_params(prompts: list[dict], spec: DataSpec) -> list[SamplingParams]:
    """Each prompt's sampling settings, drawn in prompt order from the spec's seed: the same on a resumed run."""
    rng = random.Random(spec.seed + 1)
    params = []
    for _ in prompts:
        temperature = 0.8 if rng.random() < spec.sampled_share else 0.0
        params.append(SamplingParams(max_tokens=spec.response_tokens, temperature=temperature, seed=rng.randrange(1 << 30)))
    return params


def generate_sequences(
    loaded,
    spec: DataSpec,
    out_dir: Path,
    batch_size: int = 16,
    feature_layers: tuple[int, ...] = (),
    shard_size: int = 16,
    prompts: list[dict] | None = None,
) -> list[dict]:
    """Answer the training prompts with the target, recording its features; resumes from ``out_dir``.

    Continuous batching: every prompt is queued at once and the engine admits the next one into a slot as
    soon as an answer ends, so ``batch_size`` slots (fewer where the prompts are so long that more would hold over
    ``SLOT_POSITIONS``) stay busy until the queue runs dry (answers differ in
    length; a fixed group would wait for its longest). Answers are stored in shards of ``shard_size`` as they
    finish; a killed run loses at most the answers in flight. ``prompts``: ``draw_prompts(tokenizer, spec)``
    when the caller has drawn them already.
    """

    out_dir.mkdir(parents=True, exist_ok=True)
    index = out_dir / "sequences.jsonl"
    done = _stored_records(out_dir, index)
    if len(done) >= spec.num_prompts:
        return sorted(done, key=lambda r: r["id"])[: spec.num_prompts]
    prompts = prompts if prompts is not None else draw_prompts(loaded.tokenizer, spec)
    answered = {r["id"] for r in done}
    todo = [(p, params) for p, params in zip(prompts, answer_params(prompts, spec)) if p["id"] not in answered]
    if not todo:
        return sorted(done, key=lambda r: r["id"])
    recorder = FeatureRecorder(feature_layers)
    max_len = sequence_length(max(len(p["prompt_ids"]) for p in prompts), spec.response_tokens, recorder)
    slots = max(1, min(batch_size, SLOT_POSITIONS // max_len))
    engine = Engine(loaded.model, max_batch=slots, max_seq_len=max_len, stop_ids=loaded.tokenizer.stop_ids, proposer=recorder)
    asked = {engine.add_request(p["prompt_ids"], params).id: (p, params) for p, params in todo}
    finished = []
    with tqdm(total=len(prompts), initial=len(done), desc="self-distillation", unit="prompt") as bar:
        while engine.has_work:
            finished += [event.request for event in engine.step() if event.finished]
            if len(finished) >= shard_size or (finished and not engine.has_work):
                shard = f"features-{len(done):05d}.safetensors"
                tensors, records = {}, []
                for request in finished:
                    prompt, params = asked[request.id]
                    # an answer the target ends (an emitted stop token is not kept) has one feature row too many
                    length = len(prompt["prompt_ids"]) + len(request.output_ids) - 1
                    tensors[prompt["id"]] = recorder.take(request.id)[:length].contiguous()
                    records.append(
                        {**prompt, "response_ids": request.output_ids, "temperature": params.temperature, "features_file": shard}
                    )
                done += _store_shard(out_dir / shard, tensors, index, records)
                bar.update(len(finished))
                finished = []
    return sorted(done, key=lambda r: r["id"])


def record_code_windows(
    loaded, spec: CodeSpec, out_dir: Path, skip_files: set[str] = frozenset(), batch_size: int = 4, feature_layers: tuple[int, ...] = ()
) -> list[dict]:
    """Have the target read the code windows, recording its features; resumes from ``out_dir``.

    Each window is a one-token request: the prefill gives the features of every
    window token and the emitted token completes the sequence, so a window is
    stored exactly like an answered prompt (its response is that one token).
    """

    if spec.num_windows <= 0:
        return []
    out_dir.mkdir(parents=True, exist_ok=True)
    index = out_dir / "code_windows.jsonl"
    done = _stored_records(out_dir, index)
    windows = draw_code_windows(loaded.tokenizer, spec, skip_files)
    if [r["source"] for r in done] != [w["source"] for w in windows[: len(done)]]:
        raise ValueError(
            f"{index} holds code windows drawn with other settings than {spec}; "
            "pass the same --code-windows as before, or another --data-dir"
        )
    todo = windows[len(done) :]
    if not todo:
        return done
    recorder = FeatureRecorder(feature_layers)
    engine = Engine(
        loaded.model,
        max_batch=batch_size,
        max_seq_len=sequence_length(max(len(w["prompt_ids"]) for w in todo), 1, recorder),
        stop_ids=(),
        proposer=recorder,
    )
    with tqdm(total=len(windows), initial=len(done), desc="code windows", unit="window") as bar:
        for group in _groups(todo, batch_size):
            requests = engine.generate([g["prompt_ids"] for g in group], [SamplingParams(max_tokens=1)] * len(group))
            shard = f"code-features-{len(done):05d}.safetensors"
            tensors, records = {}, []
            for window, request in zip(group, requests):
                # a window that the target ends (an emitted stop token is not kept) has one feature row too many
                length = len(window["prompt_ids"]) + len(request.output_ids) - 1
                tensors[window["id"]] = recorder.take(request.id)[:length].contiguous()
                records.append({**window, "response_ids": request.output_ids, "temperature": 0.0, "features_file": shard})
            done += _store_shard(out_dir / shard, tensors, index, records)
            bar.update(len(group))
    return done


def load_features(out_dir: Path, sequences: list[dict]) -> dict[str, torch.Tensor]:
    """Sequence id -> [num_tokens - 1, width] features."""
    features: dict[str, torch.Tensor] = {}
    for shard in sorted({s["features_file"] for s in sequences}):
        features.update(load_file(out_dir / shard))
    return features


def data_manifest(sequences: list[dict], specs: list[DataSpec], windows: list[dict] = (), code_spec: CodeSpec | None = None) -> dict:
    """What the trainers read: the prompt sets (one spec per prompt seed), code windows, token counts, sources."""
    files = sorted({f for s in [*sequences, *windows] for f in files_read(s)})
    tasks = [s for s in specs if s.kind == "tasks"]
    agentic = [s for s in specs if s.kind == "agentic"]
    long = [s for s in specs if s.kind == "long"]
    return {
        "spec": specs[0].__dict__,
        **({"prompt_seeds": [s.seed for s in tasks]} if len(tasks) > 1 else {}),
        **({"agentic_spec": agentic[0].__dict__, "agentic_prompts": agentic[0].num_prompts} if agentic else {}),
        **({"long_spec": long[0].__dict__, "long_prompts": long[0].num_prompts} if long else {}),
        **(
            {
                "code_spec": code_spec.__dict__,
                "code_windows": len(windows),
                "code_window_tokens": sum(len(w["prompt_ids"]) + len(w["response_ids"]) for w in windows),
            }
            if windows
            else {}
        ),
        "num_sequences": len(sequences),
        "num_tokens": sum(len(s["prompt_ids"]) + len(s["response_ids"]) for s in sequences),
        "response_tokens": sum(len(s["response_ids"]) for s in sequences),
        "sampled_responses": sum(s["temperature"] > 0 for s in sequences),
        "sources": [source_record(s) for s in SOURCES],
        "files": files,
    }
