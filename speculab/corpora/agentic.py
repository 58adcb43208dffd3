"""The workload's agentic-coding slice: the edits a coding agent asks for, whose answers repeat the code shown.

Knows: four kinds of request, each on a window of real code (Python or TypeScript) from the benchmark share of the
pinned sources, made deterministically with no model in the loop:
- ``rename``: rename one identifier (the window's most used one) throughout and return the whole code;
- ``lint-fix``: a linter's report (long lines, functions without a docstring or JSDoc, computed from the code) to fix;
- ``apply-review``: numbered review comments (a rename and documentation of named functions) to apply;
- ``second-turn``: a conversation whose first answer is the rename done (by this module, exactly), then a second
  request on that answer (a comment above each function), as an agent's next turn sends it.
Every answer the model gives mostly copies code it was shown: where drafting from the context pays (n-gram, suffix).

Does not know: where files come from (``sources``), the other prompts (``build_workload``), or how it is run.
"""

from __future__ import annotations

import keyword
import re
from collections import Counter

from speculab.corpora.prompts import FENCE, Window

TASKS = ("rename", "lint-fix", "apply-review", "second-turn")
LANGUAGES = ("python", "typescript")
LINE_LIMIT = {"python": 79, "typescript": 100}
TS_WORDS = frozenset(
    "abstract any async await boolean break case catch class const constructor continue declare default delete do "
    "else enum export extends false finally for from function get if implements import in infer instanceof interface "
    "keyof let module namespace never new null number object of private protected public readonly return set static "
    "string super switch symbol this throw true try type typeof undefined unique unknown var void while with yield".split()
)
_WORD = re.compile(r"\b[A-Za-z_][A-Za-z0-9_]{3,}\b")
_FUNCTION = {
    "python": re.compile(r"^[ \t]*(?:async[ \t]+)?def[ \t]+(\w+)", re.M),
    "typescript": re.compile(r"^[ \t]*(?:export[ \t]+)?(?:async[ \t]+)?function\*?[ \t]+(\w+)", re.M),
}


def identifier(code: str, language: str) -> str | None:
    """The most used identifier of four characters or more that is not a keyword (the first seen on a tie)."""
    return next(iter(ranked_identifiers(code, language)), None)


def ranked_identifiers(code: str, language: str) -> list[str]:
    """Identifiers of four characters or more that are not keywords and are used three times or more: the most used
    first, the first seen first on a tie."""
    reserved = set(keyword.kwlist) | {"self", "None", "True", "False"} if language == "python" else TS_WORDS
    counts = Counter(w for w in _WORD.findall(_strip_strings(code)) if w not in reserved)
    return [w for w, n in sorted(counts.items(), key=lambda item: -item[1]) if n >= 3]


def _strip_strings(code: str) -> str:
    return re.sub(r"(\"[^\"\n]*\"|'[^'\n]*'|`[^`]*`)", " ", code)


def new_name(old: str, language: str) -> str:
    """snake_case for Python and for names that have an underscore; camelCase otherwise."""
    return f"{old}_renamed" if language == "python" or "_" in old else f"{old}Renamed"


def renamed(code: str, old: str, new: str) -> str:
    return re.sub(rf"\b{re.escape(old)}\b", new, code)


def functions(code: str, language: str) -> list[str]:
    return list(dict.fromkeys(_FUNCTION[language].findall(code)))


def lint_report(path: str, code: str, language: str) -> list[str]:
    """What a linter says of ``code``: lines over the limit, then functions with no docstring (JSDoc)."""
    limit = LINE_LIMIT[language]
    issues = [f"{path}:{n}: line too long ({len(line)} > {limit})" for n, line in enumerate(code.splitlines(), 1) if len(line) > limit]
    lines = code.splitlines()
    for n, line in enumerate(lines, 1):
        match = _FUNCTION[language].match(line)
        if match and not _documented(lines, n, language):
            issues.append(f"{path}:{n}: function `{match.group(1)}` has no {'docstring' if language == 'python' else 'JSDoc comment'}")
    return issues[:8]


def _documented(lines: list[str], n: int, language: str) -> bool:
    if language == "python":
        after = next((line.strip() for line in lines[n:] if line.strip() and not line.strip().endswith(",")), "")
        return after.startswith(('"""', "'''", 'r"""'))
    before = next((line.strip() for line in reversed(lines[: n - 1]) if line.strip()), "")
    return before.endswith("*/")


def agentic_messages(task: str, language: str, path: str, source: str, window: Window) -> list[dict] | None:
    """The conversation for ``task`` on ``window``; None when the code offers nothing to ask it of."""
    code, fence = window.code, FENCE[language]
    shown = f"```{fence}\n{code}```"
    where = f"`{path}` ({source})"
    old = identifier(code, language)
    new = old and new_name(old, language)
    if task == "rename" and old:
        return [
            _user(
                f"Rename `{old}` to `{new}` throughout this code from {where}, and return the complete updated code with no other changes.\n\n{shown}"
            )
        ]
    if task == "lint-fix":
        report = lint_report(path, code, language)
        if report:
            text = "\n".join(report)
            return [
                _user(
                    f"I ran the linter on {where} and it reported:\n\n```\n{text}\n```\n\nFix these issues and return the complete file.\n\n{shown}"
                )
            ]
        return None
    if task == "apply-review" and old:
        named = functions(code, language)[:2]
        review = [f"1. Rename `{old}` to `{new}` everywhere."] + [
            f"{i}. Document `{f}`: what it does and what it returns." for i, f in enumerate(named, 2)
        ]
        review.append(f"{len(review) + 1}. Keep everything else unchanged.")
        comments = "\n".join(review)
        return [_user(f"Apply these review comments to the code from {where} and return the full updated code.\n\n{comments}\n\n{shown}")]
    if task == "second-turn" and old:
        first = f"Rename `{old}` to `{new}` throughout this code from {where}, and return the complete updated code.\n\n{shown}"
        answer = f"Here is the code with `{old}` renamed to `{new}`:\n\n```{fence}\n{renamed(code, old, new)}```"
        again = "Thanks. Now add a short comment above each function saying what it does, and return the complete file again."
        return [_user(first), {"role": "assistant", "content": answer}, _user(again)]
    return None


def _user(content: str) -> dict:
    return {"role": "user", "content": content}
