"""``speculab serve``'s start: an engine its memory cannot hold is refused, naming the flags and the bytes."""

from speculab import free_memory
from speculab.cli import main
from tests.helpers import save_tiny_checkpoint


def test_a_server_too_large_for_memory_is_refused_before_it_starts(tmp_path, capsys, monkeypatch):
    target = save_tiny_checkpoint(tmp_path / "target")
    monkeypatch.setattr(free_memory, "available_bytes", lambda device="cpu": 1 << 20)
    argv = ["serve", "--model", str(target), "--dtype", "float32", "--max-batch", "16", "--max-model-len", "512", "--port", "1"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert (
        "--max-batch 16 x --max-model-len 512 (baseline) + --prefix-cache-gib 2 needs" in err and "MiB" not in err and "1.00 MiB" not in err
    )


def test_the_step_budget_reaches_the_engine_and_a_negative_one_is_refused(tmp_path, capsys):
    from speculab.chunked_prefill import PacedChunks, TokenBudget
    from speculab.cli import build_parser
    from speculab.serve.cli import build_server

    target = save_tiny_checkpoint(tmp_path / "target")
    base = ["serve", "--model", str(target), "--dtype", "float32", "--max-batch", "2", "--max-model-len", "128"]
    engines = {}
    for name, flags in (("default", []), ("whole", ["--max-num-batched-tokens", "0"]), ("seven", ["--max-num-batched-tokens", "7"])):
        engines[name] = build_server(build_parser().parse_args(base + flags))[2].engine
    assert isinstance(engines["default"].chunked_prefill, PacedChunks)
    assert engines["whole"].chunked_prefill is None
    assert type(engines["seven"].chunked_prefill) is TokenBudget and engines["seven"].chunked_prefill.tokens == 7
    assert main([*base, "--max-num-batched-tokens", "-1", "--port", "1"]) == 2
    assert "--max-num-batched-tokens" in capsys.readouterr().err
