"""The plots, read back from their matplotlib Figures: legends by short label, nothing cut or overlapping, and the
acceptance plot from the untimed pass (prompt counts shown), else from the timed cells, saying so."""

import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg

from speculab.bench.report.plots import BASELINE_LINE, acceptance_figure, speedup_figure, tok_s_figure
from speculab.bench.report.results import load_results
from tests.bench.report.synthetic import BASE, BATCHES, DRAFT, EAGLE, acceptance_record, cell, run_record, write_results

NGRAM = "ngram(num_speculative_tokens=4,prompt_lookup_min=2,prompt_lookup_max=5)"
SUFFIX = "suffix(num_speculative_tokens={},max_tree_depth=24,max_cached_requests=128,max_spec_factor=1.0,min_token_prob=0.1)"
MANY = {  # label -> its short form: nine methods, settings side by side
    DRAFT: "draft",
    DRAFT[:-1] + ",policy=benchmarks/policies/draft-break-even.json)": "draft-policy",
    EAGLE: "eagle",
    EAGLE[:-1] + ",policy=auto)": "eagle-auto",
    NGRAM: "ngram",
    NGRAM[:-1] + ",policy=benchmarks/policies/ngram-break-even.json)": "ngram-policy",
    SUFFIX.format(4): "suffix-n4",
    SUFFIX.format(8): "suffix-n8",
}
DOMAINS = {"python": 12, "typescript": 12, "sql": 12, "agentic": 10}


def many_records(with_pass=True):
    records = [run_record(methods=[BASE, *MANY])] + [cell(BASE, b, 10.0 * b) for b in BATCHES]
    for i, label in enumerate(MANY):
        records += [cell(label, b, (12.0 - i) * b, acceptance_rate=0.5, acceptance_by_domain=dict.fromkeys(DOMAINS, 0.4)) for b in BATCHES]
        if with_pass:
            records.append(acceptance_record(label, {d: (n, 0.1 * (i + 1), 2.0) for d, n in DOMAINS.items()}))
    return records


@pytest.fixture(params=[True, False], ids=["pass", "no-pass"])
def results(request, tmp_path):
    return load_results(write_results(tmp_path / "results.jsonl", many_records(request.param)))


def legend_entries(fig):
    (legend,) = fig.legends
    return [t.get_text() for t in legend.get_texts()]


def test_legends_name_methods_by_short_label(results):
    assert legend_entries(tok_s_figure(results)) == [BASE, *MANY.values()]
    assert legend_entries(speedup_figure(results)) == [*MANY.values(), BASELINE_LINE]
    assert legend_entries(acceptance_figure(results)) == list(MANY.values())


def test_a_label_has_one_colour_in_every_plot(results):
    tok = {line.get_label(): line.get_color() for line in tok_s_figure(results).axes[0].get_lines()}
    bars = {c.get_label(): c.patches[0].get_facecolor() for c in acceptance_figure(results).axes[0].containers}
    from matplotlib.colors import to_rgba

    assert all(to_rgba(tok[label]) == bars[label] for label in MANY.values())


def test_nothing_is_cut_or_overlapping(results):
    for fig in (tok_s_figure(results), speedup_figure(results), acceptance_figure(results)):
        renderer = FigureCanvasAgg(fig).get_renderer()
        fig.draw(renderer)
        ax = fig.axes[0]
        page = fig.bbox
        (legend,) = fig.legends
        texts = [fig._suptitle, ax.title, ax.xaxis.label, ax.yaxis.label, legend, *ax.get_xticklabels()]
        for artist in texts:
            box = artist.get_window_extent(renderer)
            assert page.x0 - 1 <= box.x0 and box.x1 <= page.x1 + 1 and page.y0 - 1 <= box.y0 and box.y1 <= page.y1 + 1, artist
        assert not legend.get_window_extent(renderer).overlaps(ax.get_tightbbox(renderer))
        ticks = sorted((t.get_window_extent(renderer) for t in ax.get_xticklabels() if t.get_text()), key=lambda b: b.x0)
        assert all(left.x1 < right.x0 for left, right in zip(ticks, ticks[1:]))


def test_acceptance_from_the_untimed_pass_with_its_prompt_counts(tmp_path):
    fig = acceptance_figure(load_results(write_results(tmp_path / "r.jsonl", many_records())))
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == [*(f"{d}\n(n={n})" for d, n in DOMAINS.items()), "all\n(n=46)"]
    assert "untimed acceptance pass" in fig._suptitle.get_text()
    heights = {c.get_label(): [p.get_height() for p in c.patches] for c in ax.containers}
    assert heights["draft"][:4] == pytest.approx([10.0] * 4) and heights["eagle"][0] == pytest.approx(30.0)


def test_acceptance_falls_back_to_the_smallest_batch_and_says_so(tmp_path):
    fig = acceptance_figure(load_results(write_results(tmp_path / "r.jsonl", many_records(with_pass=False))))
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == [*DOMAINS, "all"]
    assert "no acceptance pass" in fig._suptitle.get_text() and "batch 1" in ax.get_title()
    heights = {c.get_label(): [p.get_height() for p in c.patches] for c in ax.containers}
    assert heights["draft"] == pytest.approx([40.0] * 4 + [50.0])


def test_prompt_counts_that_differ_between_methods_show_their_range(tmp_path):
    records = [run_record(), cell(BASE, 1, 10.0), cell(DRAFT, 1, 12.0), cell(EAGLE, 1, 14.0)]
    records += [acceptance_record(DRAFT, {"python": (12, 0.5, 2.0)}), acceptance_record(EAGLE, {"python": (9, 0.5, 2.0)})]
    ax = acceptance_figure(load_results(write_results(tmp_path / "r.jsonl", records))).axes[0]
    assert ax.get_xticklabels()[0].get_text() == "python\n(n=9–12)"
