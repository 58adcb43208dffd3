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
    assert "--max-batch 16 x --max-model-len 512 (baseline) needs" in err and "MiB" not in err and "1.00 MiB" not in err
