"""The blocks' Markdown and HTML: tables stay tables, figures stay on one line, wide tables fit the page."""

from speculab.bench.report.blocks import NOWRAP_CHARS, WIDE_COLUMNS, Heading, Image, Paragraph, Table, to_html, to_markdown


def test_markdown_escapes_table_cells():
    md = to_markdown([Heading(2, "T"), Table(["a", "b"], [["x|y", "two\nlines"]], "`f`"), Image("p.png", "alt")])
    assert md.splitlines()[2:5] == ["| a | b |", "|---|---|", "| x\\|y | two lines |"]
    assert "![alt](p.png)" in md


def test_html_keeps_short_cells_whole_and_sets_wide_tables_smaller():
    short, long = "74.8 (1.00× [0.99–1.02])", "all measured batch sizes (1–16); fastest at batch 4–16"
    assert len(short) <= NOWRAP_CHARS < len(long)
    page = to_html([Paragraph("**b** `c`"), Table(["x", "y"], [[short, long]], "s")], "t")
    assert f'<td class="nw">{short}</td>' in page and f"<td>{long}</td>" in page
    assert "<p><strong>b</strong> <code>c</code></p>" in page
    wide = to_html([Table([str(i) for i in range(WIDE_COLUMNS + 1)], [], "s")], "t")
    narrow = to_html([Table([str(i) for i in range(WIDE_COLUMNS)], [], "s")], "t")
    assert '<table class="wide">' in wide and '<table class="wide">' not in narrow
