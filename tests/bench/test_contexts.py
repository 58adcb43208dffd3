"""The context axis: --contexts values, the model's limit, and requests lengthened with repository files."""

import pytest

from speculab.bench.contexts import (
    MAX,
    Lengthener,
    PromptsByContext,
    parse_context,
    parse_context_spec,
    profile_contexts,
    resolve_contexts,
)
from speculab.bench.settings import BenchConfig
from speculab.bench.workload import WorkloadItem
from speculab.cli import main
from speculab.corpora.context_files import ContextFile
from speculab.models.tokenizer import Tokenizer
from tests.bench.test_runner import bench_args, cells, records, tiny_bench_files
from tests.helpers import save_tiny_checkpoint


def test_context_values_read_as_tokens_and_bad_ones_name_the_flag():
    assert parse_context("workload") is None
    assert parse_context("4k") == 4096 and parse_context("6000") == 6000 and parse_context("MAX") == MAX
    for bad in ("long", "0", "-5", "4kk"):
        with pytest.raises(ValueError, match="--contexts"):
            parse_context(bad)
    assert parse_context_spec("4k@1,4,16") == (4096, (1, 4, 16)) and parse_context_spec("max") == (MAX, None)
    for bad in ("4k@", "4k@0", "4k@a,b"):
        with pytest.raises(ValueError, match="batch sizes"):
            parse_context_spec(bad)


def test_max_is_the_models_positions_less_the_room_after_a_prompt_and_longer_is_refused():
    assert resolve_contexts((None, MAX, 4096, 4096), positions=8192, room=80) == (None, 8112, 4096)
    with pytest.raises(ValueError, match="at most 8112 tokens"):
        resolve_contexts((9000,), positions=8192, room=80)


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    return Tokenizer(save_tiny_checkpoint(tmp_path_factory.mktemp("tok") / "model"))


def _pool() -> dict[str, list[ContextFile]]:
    def file(domain: str, i: int, lines: int) -> ContextFile:
        text = "".join(f"{domain}{i} line {n} w5 w6 w7\n" for n in range(lines))
        return ContextFile(f"{domain}-{i:03d}", domain, f"src/{domain}_{i}.txt", "pkg@1.0", "MIT", lines * 6, text)

    return {d: [file(d, i, 20 + 7 * i) for i in range(8)] for d in ("python", "sql")}


def _item(i: int, domain: str = "python", language: str = "") -> WorkloadItem:
    return WorkloadItem(f"{domain}-{i}", domain, "refactor", (("user", f"Refactor this w{i + 3} please"),), language or domain)


def test_a_request_after_files_of_its_language_up_to_the_context(tokenizer):
    lengthen = Lengthener(tokenizer, _pool())
    for i in range(6):
        item = _item(i, "sql" if i % 2 else "python")
        longer = lengthen.at(item, 500)
        tokens = lengthen.tokens(longer)
        assert 500 - 16 <= tokens <= 500  # the last file cut at a line: within a line and a file's heading of it
        content = longer.messages[0][1]
        assert content.endswith(item.messages[0][1])  # the request stays last, as an agent sends it
        other = "python" if item.domain == "sql" else "sql"
        assert f"src/{item.domain}_" in content and f"src/{other}_" not in content


def test_requests_of_a_language_share_their_files_and_the_workloads_own_stays_as_it_is(tokenizer):
    """As a team's agents in one repository: the same files, then each its request (the prompts share a head)."""
    lengthen = Lengthener(tokenizer, _pool())
    heads = {lengthen.at(_item(i), 400).messages[0][1].split("lines 1-")[0] for i in range(12)}
    assert len(heads) == 1 and "src/python_0.txt" in heads.pop()
    item = _item(1)
    assert lengthen.at(item, None) is item and lengthen.at(item, 3) is item  # already that long: as it is


def test_an_agentic_item_takes_files_of_its_language(tokenizer):
    lengthen = Lengthener(tokenizer, _pool())
    item = _item(2, domain="agentic", language="sql")
    assert "src/sql_" in lengthen.at(item, 300).messages[0][1]


def test_prompts_by_context_resolve_max_and_give_medians(tokenizer, tmp_path):
    class Loaded:  # what PromptsByContext reads of a loaded target
        class model:  # noqa: N801
            class config:  # noqa: N801
                max_position_embeddings = 512

    Loaded.tokenizer = tokenizer
    items = [_item(i) for i in range(4)]
    cfg = BenchConfig(methods=(), batch_sizes=(1, 2, 8), contexts=(None, MAX), context_batch_sizes={MAX: (1, 8)})
    prompts = PromptsByContext.build(cfg, items, Loaded, room=40)
    assert prompts.contexts == (None, 472) and prompts.batch_sizes == {None: (1, 2, 8), 472: (1, 8)}
    assert 472 - 16 <= prompts.median_of(472) <= 472
    assert prompts.median_of(None) == sorted(len(p) for p in prompts.ids[None])[2]
    assert prompts.record() == {"context_tokens": {"workload": prompts.median_of(None), "472": prompts.median_of(472)}}
    assert PromptsByContext.build(BenchConfig(methods=()), items, None, room=40).contexts == (None,)  # no tokenizer needed


# -- the axis end to end, on tiny checkpoints -------------------------------------------------------------------------
@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    return tiny_bench_files(tmp_path_factory.mktemp("bench"))


def test_the_matrix_runs_each_method_and_batch_at_each_context_and_resumes(setup, tmp_path, capsys):
    """Cells at the workload's own prompts and at 300 tokens, each greedy-identical to its own context's baseline; a
    resumed run skips every cell measured at either context, and the run record keeps each context's sizing."""
    out = tmp_path / "run"
    assert main(bench_args(setup, out, "--contexts", "workload", "300@2", "--repeats", "1")) == 0
    rows = cells(out)
    assert {(c["batch_size"], c["context"]) for c in rows} == {(1, None), (2, None), (2, 300)}  # 300 at its own batch size
    assert len(rows) == 3 * 3
    for c in rows:
        assert c["greedy_identical"] is True
        assert c["context_tokens"] <= 300 if c["context"] else c["context_tokens"] < 100
        assert c["context_tokens"] >= 300 - 40 or c["context"] is None
    run = records(out, "run")[0]
    assert run["config"]["contexts"] == [None, 300] and run["config"]["context_batch_sizes"] == {"300": [2]}
    assert set(run["prompts_per_cell"]) == {"workload", "300"}
    assert set(run["context_tokens"]) == {"workload", "300"}
    report = (out / "report.md").read_text()
    assert "Where speculation stops paying" in report and (out / "speedup_heatmap.png").is_file()
    capsys.readouterr()
    assert main(bench_args(setup, out, "--contexts", "workload", "300@2", "--repeats", "1", "--resume")) == 0
    assert len(cells(out)) == len(rows)  # nothing left to measure at either context
    assert main(bench_args(setup, out, "--contexts", "workload", "--repeats", "1", "--resume")) == 2
    assert "--contexts" in capsys.readouterr().err


def test_a_context_beyond_the_models_positions_is_refused_before_any_cell(setup, tmp_path, capsys):
    out = tmp_path / "run"
    assert main(bench_args(setup, out, "--contexts", "600")) == 2
    assert "holds 512 positions" in capsys.readouterr().err
    assert not (out / "results.jsonl").exists() or not records(out, "cell")


def test_the_profiles_long_context_is_left_out_where_the_target_cannot_hold_it_or_servers_are_measured(tmp_path, capsys):
    short = save_tiny_checkpoint(tmp_path / "short")  # 512 positions
    long = save_tiny_checkpoint(tmp_path / "long", max_position_embeddings=8192)
    assert profile_contexts((None, 4096), str(long), 32, endpoints=False) == (None, 4096)
    assert profile_contexts((None, 4096), str(long), 32, endpoints=True) == (None,)  # a server's limit is its own
    assert profile_contexts((None, 4096), str(short), 32, endpoints=False) == (None,)
    assert "4096-token context is left out: the target holds 512 positions" in capsys.readouterr().err
