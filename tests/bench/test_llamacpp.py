"""Smoke test for the llama.cpp baseline (needs llama-cpp-python and a GGUF).

Set SPECULAB_TEST_GGUF to a small GGUF, e.g. SmolLM2-135M-Instruct.Q4_1.gguf.
"""

import os
from pathlib import Path

import pytest

pytest.importorskip("llama_cpp")

from speculab.bench.llamacpp import measure_llamacpp  # noqa: E402


@pytest.fixture
def gguf() -> Path:
    path = os.environ.get("SPECULAB_TEST_GGUF")
    if not path or not Path(path).is_file():
        pytest.skip("SPECULAB_TEST_GGUF unset or not a file")
    return Path(path)


def test_measure_llamacpp_tiny(gguf: Path) -> None:
    prompt = list(range(100, 120))  # 20 ids, valid in any real vocab
    res = measure_llamacpp(gguf, prompt, max_new_tokens=4, repeats=1, n_threads=2)
    assert len(res["tokens"]) == 4
    assert all(isinstance(t, int) for t in res["tokens"])
    assert len(res["runs"]) == 1
    assert res["tok_s"] > 0
    assert res["prefill_s"] > 0
    assert res["gguf"] == str(gguf)
    assert res["n_threads"] == 2
