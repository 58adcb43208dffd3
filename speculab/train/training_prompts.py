"""What the target is asked to answer or read for drafter training: prompts, agentic edits and code windows.

Knows: the training share of the pinned sources (files the benchmark never uses: ``sources.is_benchmark_file``), how
its task prompts (the benchmark's templates, ``corpora.prompts``), agentic edits (``corpora.agentic``) and long code
windows are drawn, deterministically from a seed, and the held-out prompts a drafter's check uses.

Does not know: the model, or how answers and features are made and stored (``distill_data``).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from speculab.corpora.agentic import LANGUAGES as AGENTIC_LANGUAGES
from speculab.corpora.agentic import TASKS as AGENTIC_TASKS
from speculab.corpora.agentic import agentic_messages
from speculab.corpora.prompts import FENCE, TEMPLATES, code_prompt, pick_window
from speculab.corpora.sources import SOURCES, SourceFile, is_benchmark_file, iter_files

DOMAIN_SHARE = {"python": 0.4, "typescript": 0.35, "sql": 0.25}


@dataclass(frozen=True)
class CodeSpec:
    """Code windows read by the target (prefill only), beside the answered prompts."""

    num_windows: int = 0
    window_tokens: tuple[int, int] = (768, 1024)  # code, target tokens
    seed: int = 0


CODE_REQUEST = "Show the code of `{path}` ({source})."


@dataclass(frozen=True)
class DataSpec:
    num_prompts: int = 144
    prompt_tokens: tuple[int, int] = (200, 400)  # code window, target tokens
    response_tokens: int = 160
    sampled_share: float = 0.5  # this share of prompts is answered at temperature 0.8, the rest greedily
    seed: int = 0
    kind: str = "tasks"  # the domains' task templates (corpora/prompts.py), or "agentic" edits (corpora/agentic.py)

    @classmethod
    def stored(cls, record: dict) -> DataSpec:
        """A spec as ``spec.json`` holds it; one written before a field existed has that field's default."""
        record = dict(record)
        record["prompt_tokens"] = tuple(record.get("prompt_tokens", cls.prompt_tokens))
        return cls(**{k: v for k, v in record.items() if k in cls.__dataclass_fields__})


AGENTIC_TOKENS = (400, 650)  # an agentic edit's code window, as the benchmark's agentic slice cuts them


def training_files(domain: str) -> list[SourceFile]:
    """The domain's files outside the benchmark share, in sorted order."""
    return [f for s in SOURCES if s.domain == domain for f in iter_files(s) if not is_benchmark_file(f.file_id)]


def draw_prompts(tokenizer, spec: DataSpec) -> list[dict]:
    if spec.kind == "agentic":
        return draw_agentic_prompts(tokenizer, spec)
    if spec.kind != "tasks":
        raise ValueError(f"DataSpec.kind must be 'tasks' or 'agentic', not {spec.kind!r}")
    rng = random.Random(spec.seed)
    count = lambda text: len(tokenizer.encode(text))  # noqa: E731
    prompts: list[dict] = []
    for domain, share in DOMAIN_SHARE.items():
        files = training_files(domain)
        rng.shuffle(files)
        wanted = round(spec.num_prompts * share)
        tasks = list(TEMPLATES[domain])
        for file in files:
            if sum(p["domain"] == domain for p in prompts) == wanted:
                break
            window = pick_window(file.text, count, rng, *spec.prompt_tokens)
            if window is None:
                continue
            task = tasks[len(prompts) % len(tasks)]
            content = code_prompt(file, task, window)
            prompts.append(
                {
                    "id": f"train-{len(prompts):05d}",
                    "domain": domain,
                    "task": task,
                    "source": file.file_id,
                    "prompt_ids": tokenizer.encode_chat([{"role": "user", "content": content}]),
                }
            )
    return prompts


def draw_agentic_prompts(tokenizer, spec: DataSpec) -> list[dict]:
    """``spec.num_prompts`` agentic edits (rename, lint-fix, apply-review, second-turn in turn, ``corpora.agentic``),
    each on a window of its own training-share file, Python and TypeScript alike: requests whose answers copy the
    code shown, as a coding agent's are."""
    rng = random.Random(spec.seed)
    count = lambda text: len(tokenizer.encode(text))  # noqa: E731
    prompts: list[dict] = []
    for i, language in enumerate(AGENTIC_LANGUAGES):
        files = training_files(language)
        rng.shuffle(files)
        wanted = spec.num_prompts // len(AGENTIC_LANGUAGES) + (i < spec.num_prompts % len(AGENTIC_LANGUAGES))
        taken = 0
        for file in files:
            if taken == wanted:
                break
            window = pick_window(file.text, count, rng, *spec.prompt_tokens)
            task = AGENTIC_TASKS[len(prompts) % len(AGENTIC_TASKS)]
            path = file.path.removeprefix("package/")
            messages = window and agentic_messages(task, language, path, file.source.label, window)
            if not messages:
                continue
            prompts.append(
                {
                    "id": f"agentic-{len(prompts):05d}",
                    "domain": "agentic",
                    "task": task,
                    "source": file.file_id,
                    "prompt_ids": tokenizer.encode_chat(messages),
                }
            )
            taken += 1
    return prompts


def held_out_prompts(tokenizer, used_sources: set[str], count: int, seed: int) -> list[list[int]]:
    """``count`` training-share prompts (token ids) from files outside ``used_sources``, domains taken in turn:
    prompts no drafter trained on, for its held-out checks."""
    fresh = [p for p in draw_prompts(tokenizer, DataSpec(num_prompts=4 * count, seed=seed)) if p["source"] not in used_sources]
    by_domain: dict[str, list[dict]] = {}
    for p in fresh:
        by_domain.setdefault(p["domain"], []).append(p)
    picked = [by_domain[d][i] for i in range(count) for d in sorted(by_domain) if len(by_domain[d]) > i]
    return [p["prompt_ids"] for p in picked[:count]]


def draw_code_windows(tokenizer, spec: CodeSpec, skip_files: set[str] = frozenset()) -> list[dict]:
    """Windows of training-share files (one per file, none from ``skip_files``), as chat turns the target answers."""
    rng = random.Random(spec.seed + 7)
    count = lambda text: len(tokenizer.encode(text))  # noqa: E731
    windows: list[dict] = []
    for domain, share in DOMAIN_SHARE.items():
        files = [f for f in training_files(domain) if f.file_id not in skip_files]
        rng.shuffle(files)
        wanted, taken = round(spec.num_windows * share), 0
        for file in files:
            if taken == wanted:
                break
            window = pick_window(file.text, count, rng, *spec.window_tokens)
            if window is None:
                continue
            request = CODE_REQUEST.format(path=file.path.removeprefix("package/"), source=file.source.label)
            ids = tokenizer.encode_chat([{"role": "user", "content": request}])
            ids += tokenizer.encode(f"```{FENCE[domain]}\n{window.code}```", add_bos=False)
            windows.append({"id": f"code-{len(windows):05d}", "domain": domain, "task": "code", "source": file.file_id, "prompt_ids": ids})
            taken += 1
    return windows
