"""The benchmark's context-length axis: the workload's requests, each after repository files up to N tokens.

A coding agent sends whole files, then its request. So a context of N tokens here is the same request as the
workload's, preceded by whole files of its language from real, licensed repositories
(``speculab.corpora.context_files``: files the workload's own prompts never quote) until the prompt holds N target
tokens, the last file cut at a line where a whole one would overflow. The requests stay the same at every context,
so a cell's context is the only thing that differs from the same cell at another. Every request of a language
quotes the same files, in the pool's order, as a team's agents working in one repository do: their prompts share a
head, whose prefill the prompt cache computes once (``engine.PromptCache``).

Knows: the ``--contexts`` values (``workload``: the prompts as they are; a number of tokens, ``6000`` or ``6k``; ``max``:
the longest the target's positions hold after the output and a drafter's room; any of them with its own batch sizes
after ``@``, ``4k@1,4,16``), and how one prompt is lengthened.
Does not know: how cells are measured (``in_process.py``) or what files the pool holds (``corpora/context_files.py``).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, replace

from speculab.bench.workload import WorkloadItem
from speculab.corpora.context_files import PREAMBLE, ContextFile, load_context_files, quote_file

AS_IS = "workload"  # the --contexts value (and a record's context key) of the prompts as they are
MAX = "max"
ROOM = 64  # positions a profile's context leaves for drafting beyond the output (a tree's nodes, a chain's tokens)


def parse_context_spec(value: str) -> tuple[int | str | None, tuple[int, ...] | None]:
    """A ``--contexts`` value with its own batch sizes after ``@`` (``4k@1,16``): (the context, its batch sizes or
    None for ``--batch-sizes``)."""
    context, at, sizes = value.partition("@")
    if not at:
        return parse_context(context), None
    try:
        batch_sizes = tuple(int(b) for b in sizes.split(","))
    except ValueError:
        batch_sizes = ()
    if not batch_sizes or any(b < 1 for b in batch_sizes):
        raise ValueError(f"--contexts {value!r}: after @ give batch sizes such as 1,4,16")
    return parse_context(context), batch_sizes


def parse_context(value: str) -> int | str | None:
    """A ``--contexts`` value: None (the workload as it is), ``MAX``, or a number of target tokens (``6k`` = 6,144)."""
    text = value.strip().lower()
    if text in (AS_IS, "none", "as-is"):
        return None
    if text == MAX:
        return MAX
    scale = 1024 if text.endswith("k") else 1
    try:
        tokens = int(float(text.removesuffix("k")) * scale)
    except ValueError:
        raise ValueError(f"--contexts {value!r}: give {AS_IS}, {MAX} or a number of tokens such as 4096 or 6k") from None
    if tokens < 1:
        raise ValueError(f"--contexts {value!r}: a context holds at least one token")
    return tokens


def context_key(context: int | str | None) -> str:
    """How a context is named in records' keys and folders: ``workload``, ``max`` or its tokens."""
    return AS_IS if context is None else str(context)


def resolve_contexts(asked: tuple, positions: int, room: int) -> tuple[int | None, ...]:
    """``asked`` with ``MAX`` as the longest prompt the target's ``positions`` hold with ``room`` after it (the output
    and the drafters' headroom), each once; a longer one is refused, naming the limit."""
    return tuple(dict.fromkeys(resolve_contexts_each(asked, positions, room)))


def resolve_contexts_each(asked: tuple, positions: int, room: int) -> list[int | None]:
    """``resolve_contexts`` for each of ``asked``, in its order (repeats kept)."""
    resolved, longest = [], positions - room
    for context in asked:
        if context == MAX:
            context = longest
        if context is not None and context > longest:
            raise ValueError(
                f"--contexts {context}: the target holds {positions} positions and a request needs {room} after its "
                f"prompt (output and drafting), so a prompt holds at most {longest} tokens (--contexts {MAX})"
            )
        resolved.append(context)
    return resolved


@dataclass(frozen=True)
class Lengthener:
    """Prompts of ``context`` tokens for a target's tokenizer (its chat template counts)."""

    tokenizer: object  # speculab.models.tokenizer.Tokenizer
    files: dict[str, list[ContextFile]]  # language -> the pool's files, in the pool's order

    @classmethod
    def from_pool(cls, tokenizer) -> Lengthener:
        return cls(tokenizer, load_context_files())

    def tokens(self, item: WorkloadItem) -> int:
        return len(self.tokenizer.encode_chat(item.message_dicts()))

    def at(self, item: WorkloadItem, context: int | None) -> WorkloadItem:
        """``item`` after repository files up to ``context`` tokens (as it is when it holds that many already)."""
        return with_files(item, [text for _, text in self.quotes(item, context)])

    def quotes(self, item: WorkloadItem, context: int | None) -> list[tuple[ContextFile, str]]:
        """The pool's files that go before ``item`` to make ``context`` tokens, each with its quoted text (the last
        one's head only where the whole would overflow); none when ``item`` holds that many already."""
        if context is None or self.tokens(item) >= context:
            return []
        pool = self.files.get(item.language) or [f for files in self.files.values() for f in files]
        quoted: list[tuple[ContextFile, str]] = []
        for file in pool:
            whole = quote_file(file, file.text)
            if self.tokens(with_files(item, [*(text for _, text in quoted), whole])) <= context:
                quoted.append((file, whole))
                continue
            head = self._cut_to_fit(item, [text for _, text in quoted], file, context)
            quoted += [(file, head)] if head else []
            break
        return quoted

    def _cut_to_fit(self, item: WorkloadItem, files: list[str], file: ContextFile, context: int) -> str:
        """The longest head of ``file``, whole lines, that keeps the prompt within ``context`` ("" if none does)."""
        lines = file.text.splitlines(keepends=True)
        low, high = 0, len(lines)  # low lines fit; high + 1 do not
        while low < high:
            middle = (low + high + 1) // 2
            head = quote_file(file, "".join(lines[:middle]), middle, len(lines))
            if self.tokens(with_files(item, [*files, head])) <= context:
                low = middle
            else:
                high = middle - 1
        return quote_file(file, "".join(lines[:low]), low, len(lines)) if low else ""


def with_files(item: WorkloadItem, files: list[str]) -> WorkloadItem:
    """``item`` with ``files`` quoted at the head of its first user message."""
    if not files:
        return item
    messages, done = [], False
    for role, content in item.messages:
        if role == "user" and not done:
            content, done = PREAMBLE + "".join(files) + content, True
        messages.append((role, content))
    return replace(item, messages=tuple(messages))


@dataclass(frozen=True)
class PromptsByContext:
    """The run's requests at each of its contexts, and their target token ids where a target tokenizer is at hand."""

    contexts: tuple[int | None, ...]  # resolved: None (the workload's own) or tokens, in the order asked
    items: dict[int | None, list[WorkloadItem]]
    ids: dict[int | None, list[list[int]]]  # empty when no target is loaded (endpoints only, the workload's own)
    batch_sizes: dict[int | None, tuple[int, ...]]  # each context's batch sizes

    @classmethod
    def build(cls, cfg, items: list[WorkloadItem], loaded, room: int) -> PromptsByContext:
        """``items`` at each of ``cfg.contexts`` (settings.BenchConfig) for ``loaded`` (runtime.LoadedModel; None:
        only the workload's own is asked and no target is loaded); ``room``: the positions a request needs after its
        prompt."""
        if loaded is None:
            return cls((None,), {None: items}, {}, {None: cfg.batch_sizes_at(None)})
        each = resolve_contexts_each(cfg.contexts, loaded.model.config.max_position_embeddings, room)
        contexts = tuple(dict.fromkeys(each))
        sizes = {resolved: cfg.batch_sizes_at(asked) for asked, resolved in zip(cfg.contexts, each)}
        lengthen = Lengthener.from_pool(loaded.tokenizer) if any(c is not None for c in contexts) else None
        at = {c: [lengthen.at(i, c) for i in items] if c is not None else items for c in contexts}
        ids = {c: [loaded.tokenizer.encode_chat(i.message_dicts()) for i in found] for c, found in at.items()}
        return cls(contexts, at, ids, sizes)

    def median_of(self, context: int | None, n: int | None = None) -> int | None:
        """The median prompt tokens of the first ``n`` (None: all) prompts at ``context``."""
        if context not in self.ids:
            return None
        lengths = sorted(len(p) for p in self.ids[context][:n])
        return lengths[len(lengths) // 2]

    def record(self) -> dict:
        """What the run record says of its contexts: each one's median prompt tokens."""
        return {"context_tokens": {context_key(c): self.median_of(c) for c in self.contexts}}

    def label(self, context: int | None) -> str:
        return f"{context_key(context)} ({self.median_of(context)} tokens)"


def profile_contexts(contexts: tuple, model: str | None, max_tokens: int, endpoints: bool) -> tuple:
    """A profile's contexts for this run: the workload's own alone where the run measures ``endpoints`` (a server's
    limit is its own), and without a context the target's positions cannot hold (a model with fewer positions runs
    the others; stderr says so)."""
    if endpoints:
        return (None,)
    from speculab.models.config import ModelConfig
    from speculab.models.embedded import resolve_model_path

    positions = ModelConfig.from_file(resolve_model_path(model) / "config.json").max_position_embeddings
    kept = tuple(c for c in contexts if c is None or c + max_tokens + ROOM <= positions)
    for c in contexts:
        if c not in kept:
            print(f"speculab: the profile's {c}-token context is left out: the target holds {positions} positions", file=sys.stderr)
    return kept
