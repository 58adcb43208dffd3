"""What the target is asked to answer or read for drafter training: prompts, agentic edits, agent-length prompts and
code windows.

Knows: the training share of the pinned sources (files the benchmark never uses: ``sources.is_benchmark_file``), how
its task prompts (the benchmark's templates, ``corpora.prompts``), agentic edits (``corpora.agentic``), agent-length
prompts (task prompts after whole files, as the benchmark's context axis sends them) and long code windows are drawn,
deterministically from a seed, and the held-out prompts a drafter's check uses.

Does not know: the model, or how answers and features are made and stored (``distill_data``).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from speculab.bench.contexts import Lengthener, with_files
from speculab.bench.workload import WorkloadItem
from speculab.corpora.agentic import LANGUAGES as AGENTIC_LANGUAGES
from speculab.corpora.agentic import TASKS as AGENTIC_TASKS
from speculab.corpora.agentic import agentic_messages
from speculab.corpora.context_files import DOMAINS, ContextFile, build, package_path
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
    kind: str = "tasks"  # the domains' task templates (corpora/prompts.py), "agentic" edits (corpora/agentic.py), or "long"
    context_tokens: tuple[int, int] = (0, 0)  # "long": each prompt after training-share files up to this many tokens

    @classmethod
    def stored(cls, record: dict) -> DataSpec:
        """A spec as ``spec.json`` holds it; one written before a field existed has that field's default."""
        record = dict(record)
        record["prompt_tokens"] = tuple(record.get("prompt_tokens", cls.prompt_tokens))
        record["context_tokens"] = tuple(record.get("context_tokens", cls.context_tokens))
        return cls(**{k: v for k, v in record.items() if k in cls.__dataclass_fields__})


AGENTIC_TOKENS = (400, 650)  # an agentic edit's code window, as the benchmark's agentic slice cuts them
LONG_CONTEXT = (2_048, 7_680)  # an agent-length prompt's tokens: the embedded model's 8k positions less an answer's room
ROOM = 64  # positions left after a long prompt's answer


def long_context(positions: int, response_tokens: int) -> tuple[int, int]:
    """The range a long prompt's tokens are drawn from for a target of ``positions``: ``LONG_CONTEXT``, or as much of
    it as fits before the answer and ``ROOM``."""
    most = min(LONG_CONTEXT[1], positions - response_tokens - ROOM)
    return min(LONG_CONTEXT[0], most // 2), most


def training_files(domain: str) -> list[SourceFile]:
    """The domain's files outside the benchmark share, in sorted order."""
    return [f for s in SOURCES if s.domain == domain for f in iter_files(s) if not is_benchmark_file(f.file_id)]


def draw_prompts(tokenizer, spec: DataSpec) -> list[dict]:
    if spec.kind == "agentic":
        return draw_agentic_prompts(tokenizer, spec)
    if spec.kind == "long":
        return draw_long_prompts(tokenizer, spec)
    if spec.kind != "tasks":
        raise ValueError(f"DataSpec.kind must be 'tasks', 'agentic' or 'long', not {spec.kind!r}")
    return [
        {"id": f"train-{n:05d}", **task.record(), "prompt_ids": tokenizer.encode_chat(task.messages())}
        for n, task in enumerate(draw_tasks(tokenizer, spec))
    ]


@dataclass(frozen=True)
class Task:
    """A task prompt on a window of a training-share file, before it is encoded."""

    domain: str
    task: str
    file: SourceFile
    content: str  # the user's message

    def messages(self) -> list[dict]:
        return [{"role": "user", "content": self.content}]

    def record(self) -> dict:
        return {"domain": self.domain, "task": self.task, "source": self.file.file_id}


def draw_tasks(tokenizer, spec: DataSpec) -> list[Task]:
    """``spec.num_prompts`` task prompts, the domains in their shares, each on a window of its own file."""
    rng = random.Random(spec.seed)
    count = lambda text: len(tokenizer.encode(text))  # noqa: E731
    drawn: list[Task] = []
    for domain, share in DOMAIN_SHARE.items():
        files = training_files(domain)
        rng.shuffle(files)
        wanted = round(spec.num_prompts * share)
        tasks = list(TEMPLATES[domain])
        for file in files:
            if sum(t.domain == domain for t in drawn) == wanted:
                break
            window = pick_window(file.text, count, rng, *spec.prompt_tokens)
            if window is None:
                continue
            task = tasks[len(drawn) % len(tasks)]
            drawn.append(Task(domain, task, file, code_prompt(file, task, window)))
    return drawn


def draw_long_prompts(tokenizer, spec: DataSpec) -> list[dict]:
    """``spec.num_prompts`` task prompts (``draw_tasks``), each after whole training-share files of its language up to
    a length drawn from ``spec.context_tokens``: a coding agent's requests, lengthened as the benchmark's context axis
    lengthens its own (``bench.contexts``) but from the training share's files. Each prompt's files start at its own
    place in the pool, so prompts quote different files; none quotes its task's file. A record names the files it
    quotes (``context_files``)."""
    tasks = draw_tasks(tokenizer, spec)
    pool, file_ids = training_context_files(tokenizer, skip={t.file.file_id for t in tasks})
    rng = random.Random(spec.seed + 11)
    prompts = []
    for n, task in enumerate(tasks):
        files = pool[task.domain]
        start = rng.randrange(len(files))
        lengthen = Lengthener(tokenizer, {task.domain: files[start:] + files[:start]})
        item = WorkloadItem(f"long-{n:05d}", task.domain, task.task, (("user", task.content),), task.domain)
        quotes = lengthen.quotes(item, rng.randint(*spec.context_tokens))
        long = with_files(item, [text for _, text in quotes])
        prompts.append(
            {
                "id": item.id,
                **task.record(),
                "context_files": [file_ids[file.source, file.path] for file, _ in quotes],
                "prompt_ids": tokenizer.encode_chat(long.message_dicts()),
            }
        )
    return prompts


def training_context_files(tokenizer, skip: set[str]) -> tuple[dict[str, list[ContextFile]], dict[tuple[str, str], str]]:
    """The training share's context pool (domain -> files in the pool's order), drawn as the benchmark's pool is
    (``context_files.build``: whole files that read as code, shuffled from its seed) but without ``skip``'s files; and
    each pool file's id by its (source, path)."""
    files = {domain: training_files(domain) for domain in DOMAINS}
    records = build(lambda text: len(tokenizer.encode(text)), skip, files)
    pool: dict[str, list[ContextFile]] = {}
    for record in records:
        pool.setdefault(record["domain"], []).append(ContextFile(**record))
    return pool, {(f.source.label, package_path(f)): f.file_id for domain in files.values() for f in domain}


def files_read(record: dict) -> list[str]:
    """The training-share files a prompt record shows the target: its task's, then any it quotes before it."""
    return [record["source"], *record.get("context_files", ())]


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
