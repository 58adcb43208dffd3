"""Every benchmark script imports against today's speculab and answers --help, each subcommand too: a rename in the
package that a script still uses fails here, not on the day someone reruns a figure."""

import argparse
import importlib.util
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
SCRIPTS = sorted(p for p in BENCHMARKS.glob("*.py") if p.name not in ("common.py", "reference.py"))


def load(path: Path):
    sys.path.insert(0, str(BENCHMARKS))  # the scripts import common.py beside them
    try:
        spec = importlib.util.spec_from_file_location(f"benchmark_{path.stem}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(BENCHMARKS))


def parser_of(module) -> argparse.ArgumentParser:
    """The parser ``main`` builds, caught where it would parse the command line."""
    built = []
    module.run_subcommand = built.append
    module.main()
    return built[0]


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: p.name)
def test_a_script_imports_and_every_subcommand_answers_help(path, capsys):
    parser = parser_of(load(path))
    (commands,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    assert commands.choices, path.name
    for argv in (["--help"], *([name, "--help"] for name in commands.choices)):
        with pytest.raises(SystemExit) as done:
            parser.parse_args(argv)
        assert done.value.code == 0, (path.name, argv)
    assert "usage" in capsys.readouterr().out


def test_a_filled_cache_holds_the_context_in_every_slot_and_forwards_time_after_it():
    sys.path.insert(0, str(BENCHMARKS))
    try:
        import common
    finally:
        sys.path.remove(str(BENCHMARKS))
    from tests.helpers import tiny_model

    model = tiny_model()
    cache = common.filled_cache(model, 3, 40, 64)
    assert cache.lengths == [40, 40, 40]
    assert cache.kv[:, 0, :, :40].abs().sum() > 0
    assert all(cache.kv[:, s].equal(cache.kv[:, 0]) for s in (1, 2))
    runs = common.measure_runs(model, 2, [1, 3], repeats=2, context=40)
    assert sorted(runs) == [1, 3] and all(len(t) == 2 and min(t) > 0 for t in runs.values())
