"""The report as typed blocks, rendered to Markdown and to self-contained HTML.

Knows: headings, paragraphs (with `code` and **bold**), tables with the fields they come from, and
images; in HTML, a page that reads at any width: a table scrolls sideways rather than widening the page, a wide one
is set smaller, short cells (figures) stay on one line and long code (paths, hashes) breaks. Does not know: what the
blocks say (``sections.py``).
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Heading:
    level: int
    text: str


@dataclass(frozen=True)
class Paragraph:
    text: str


@dataclass
class Table:
    headers: list[str]
    rows: list[list[str]]
    source: str  # the results.jsonl fields the numbers come from


@dataclass(frozen=True)
class Image:
    path: str
    alt: str


Block = Heading | Paragraph | Table | Image


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def to_markdown(blocks: list[Block]) -> str:
    out: list[str] = []
    for block in blocks:
        match block:
            case Heading(level, text):
                out.append(f"{'#' * level} {text}")
            case Paragraph(text):
                out.append(text)
            case Image(path, alt):
                out.append(f"![{alt}]({path})")
            case Table() as t:
                lines = ["| " + " | ".join(map(_md_cell, t.headers)) + " |", "|" + "---|" * len(t.headers)]
                lines += ["| " + " | ".join(map(_md_cell, row)) + " |" for row in t.rows]
                out.append("\n".join(lines) + f"\n\n*Source: {t.source}.*")
    return "\n\n".join(out) + "\n"


def _inline_html(text: str) -> str:
    escaped = html.escape(text)
    escaped = re.sub(r"`([^`]+)`", r"<code>\1</code>", escaped)
    return re.sub(r"\*\*([^*]+)\*\*", r"<strong>\1</strong>", escaped)


HTML_STYLE = (
    "body{font-family:system-ui,sans-serif;max-width:72rem;margin:2rem auto;padding:0 1rem;color:#222;line-height:1.45}"
    ".table{overflow-x:auto;max-width:100%}"
    "table{border-collapse:collapse;margin:.5rem 0;font-size:.9rem}th,td{border:1px solid #ccc;padding:.25rem .5rem;text-align:left;vertical-align:top}"
    "th{background:#f3f3f3}tbody tr:nth-child(even){background:#fafafa}td code{overflow-wrap:anywhere}td.nw{white-space:nowrap}table.wide{font-size:.75rem}table.wide td,table.wide th{padding:.2rem .3rem}"
    ".source{color:#666;font-size:.85rem;margin-top:.25rem}img{max-width:100%;display:block;margin:1rem 0}code{background:#f3f3f3}"
)


WIDE_COLUMNS = 12  # a table with more columns is set smaller, to fit the page
NOWRAP_CHARS = 28  # a table cell this short (a figure, a speedup with its range) is kept on one line


def _html_cell(text: str) -> str:
    short = len(text) <= NOWRAP_CHARS and "`" not in text
    return f'<td class="nw">{_inline_html(text)}</td>' if short else f"<td>{_inline_html(text)}</td>"


def to_html(blocks: list[Block], title: str) -> str:
    body: list[str] = []
    for block in blocks:
        match block:
            case Heading(level, text):
                body.append(f"<h{level}>{_inline_html(text)}</h{level}>")
            case Paragraph(text):
                body.append(f"<p>{_inline_html(text)}</p>")
            case Image(path, alt):
                body.append(f'<img src="{html.escape(path)}" alt="{html.escape(alt)}">')
            case Table() as t:
                head = "".join(f"<th>{_inline_html(h)}</th>" for h in t.headers)
                rows = "".join("<tr>" + "".join(_html_cell(c) for c in row) + "</tr>" for row in t.rows)
                wide = ' class="wide"' if len(t.headers) > WIDE_COLUMNS else ""
                body.append(
                    f'<div class="table"><table{wide}><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table></div>'
                    f'<p class="source">Source: {_inline_html(t.source)}.</p>'
                )
    return (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
        f"<style>{HTML_STYLE}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n"
    )
