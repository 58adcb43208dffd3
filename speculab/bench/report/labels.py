"""Short labels for the report: a method's name, plus what differs where two settings of one method ran side by side.

Knows: the shape of a results.jsonl label, ``[engine:]name[(key=value,...)][@folder]`` (``speculab.methods``'
``MethodSpec.label``; older runs wrote bare values, ``name(3,auto)``, read here by position), and a short name for
the usual parameters. A label's short form depends only on the set of labels in the run: labels sharing a name (and
engine) keep the name and add the parameters whose values differ between them, abbreviated (``eagle-k2``,
``draft-n4``, ``eagle-auto`` for ``policy=auto``, ``eagle-shared4`` for a named policy, ``eagle-policy`` for a policy
file); a label that is already short
stays as it is. Two labels never get one short form. Does not know: what the parameters mean, or the records.
"""

from __future__ import annotations

import re
from pathlib import PurePosixPath

from speculab.policy.table import NAMED

POLICY = "policy"
FOLDER = "@"  # the drafter folder a label names after ``@``
ABBREVIATIONS = {
    "num_speculative_tokens": "n",
    "topk": "k",
    "num_steps": "s",
    "num_draft_tokens": "t",
    "batch_budget": "b",
    "draft_vocab": "v",
    "disable_by_batch_size": "lim",
    "prompt_lookup_min": "min",
    "prompt_lookup_max": "max",
    "max_tree_depth": "depth",
    "max_cached_requests": "cache",
    "max_spec_factor": "f",
    "min_token_prob": "p",
}
_LABEL = re.compile(r"^(?:(?P<engine>[\w.-]+):)?(?P<name>[\w.-]+)(?:\((?P<args>[^()]*)\))?(?:@(?P<folder>.+))?$")
SHORT_ENOUGH = 24  # characters: a label without settings this long is kept as it is


def parse_label(label: str) -> tuple[str, dict[str, str]] | None:
    """(``engine:name`` or ``name``, {parameter: value}); None for a label of another shape."""
    match = _LABEL.match(label)
    if match is None:
        return None
    base = f"{match['engine']}:{match['name']}" if match["engine"] else match["name"]
    params: dict[str, str] = {}
    for i, part in enumerate(filter(None, (match["args"] or "").split(","))):
        key, eq, value = part.partition("=")
        params.update({key: value} if eq else {f"#{i}": part})
    if match["folder"]:
        params[FOLDER] = match["folder"]
    return base, params


def _abbreviation(key: str) -> str:
    if key in ABBREVIATIONS:
        return ABBREVIATIONS[key]
    return "".join(word[0] for word in key.split("_") if word) or key


def is_policy_file(policy: str | None) -> bool:
    return policy is not None and policy not in ("auto", "off") and policy.partition(":")[0] not in NAMED


def _part(key: str, value: str, files: int) -> str:
    """One differing parameter, short: ``k2``, ``auto``, ``shared4`` or ``policy`` (``files``: policy files among the
    labels)."""
    if key == POLICY:
        if not is_policy_file(value):
            return value.replace(":", "")
        return "policy" if files == 1 else PurePosixPath(value).stem
    if key == FOLDER or key.startswith("#"):
        return PurePosixPath(value).name or value
    if "/" in value:
        value = PurePosixPath(value).stem
    short = _abbreviation(key)
    return f"{short}{value}" if value[:1].isdigit() else f"{short}={value}"


def _group_labels(labels: list[str], params: dict[str, dict[str, str]], base: str) -> dict[str, str]:
    """Short forms of labels sharing ``base``: the base plus each differing parameter, in the order first seen."""
    keys = list(dict.fromkeys(k for lab in labels for k in params[lab]))
    differ = [k for k in keys if len({params[lab].get(k) for lab in labels}) > 1]
    files = len({params[lab][POLICY] for lab in labels if is_policy_file(params[lab].get(POLICY))})
    out = {}
    for lab in labels:
        parts = [_part(k, params[lab][k], files) for k in differ if params[lab].get(k) is not None]
        out[lab] = "-".join([base, *parts])
    return out


def short_labels(labels: list[str]) -> dict[str, str]:
    """{label: short label} for the labels of one run; the same for any order of the same labels."""
    ordered = sorted(set(labels))
    parsed = {lab: parse_label(lab) for lab in ordered}
    short: dict[str, str] = {}
    groups: dict[str, list[str]] = {}
    for lab in ordered:
        found = parsed[lab]
        if found is None or not found[1] and len(lab) <= SHORT_ENOUGH:
            short[lab] = lab
        else:
            groups.setdefault(found[0], []).append(lab)
    params = {lab: found[1] for lab, found in parsed.items() if found}
    for base, members in groups.items():
        short.update(_group_labels(members, params, base))
    taken: dict[str, int] = {}
    for lab in ordered:  # two labels of one short form (a label naming another's short form): numbered
        taken[short[lab]] = taken.get(short[lab], 0) + 1
    counts = {s: 0 for s, n in taken.items() if n > 1}
    for lab in ordered:
        if short[lab] in counts:
            counts[short[lab]] += 1
            short[lab] = f"{short[lab]}#{counts[short[lab]]}"
    return short
