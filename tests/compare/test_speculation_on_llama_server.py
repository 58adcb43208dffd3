"""`speculab compare llama.cpp --method draft|ngram` against a real llama-server (built by `make llamacpp`), on the
embedded model and its shipped draft model converted by llama.cpp's own converter.

Under `make test` (SPECULAB_REQUIRE_PEERS=1) these run, never skip. Nothing here is timed as a target: the figures
are measured by `speculab compare` itself, in BENCHMARKS.md.
"""

import json

import pytest

from speculab.cli import main
from speculab.launch.environments import LLAMA_SERVER_STAMP, llamacpp_env_dir
from tests.helpers import require_peer_env

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module", autouse=True)
def llama_server_built() -> None:
    require_peer_env(llamacpp_env_dir(), "llamacpp", LLAMA_SERVER_STAMP)


def compare(capsys, method: str) -> dict:
    argv = ["compare", "llama.cpp", "--method", method, "--quant", "f32", "--dtype", "float32", "--threads", "2"]
    argv += ["--prompts", "2", "--max-tokens", "24", "--repeats", "1", "--port", "8173"]
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


def test_lookup_decoding_side_by_side(capsys):
    result = compare(capsys, "ngram")
    assert result["method"] == "ngram" and result["prompts"] == 2 and result["draft_gguf"] is None
    assert "--spec-type ngram-simple" in result["llama_server"] and "127.0.0.1" in result["llama_server"]
    ours, theirs = result["speculab"], result["llama.cpp"]
    assert ours["output_agreement"] == 1.0  # speculab's speculation is lossless: greedy output unchanged
    for side in (ours, theirs):
        assert len(side["speedups"]) == 1 and side["plain_tok_s"] > 0 and side["speculating_tok_s"] > 0
    # the same dequantised weights on both sides, in fp32 (llama.cpp's KV cache in f16): they agree but for near-ties
    assert result["plain_agreement"] >= 0.5, result


def test_the_draft_model_side_by_side_drafts_on_both_engines(capsys):
    result = compare(capsys, "draft")
    assert result["draft_gguf"].startswith("smollm2-135m-draft-") and result["draft_gguf"].endswith(".F32.gguf")
    assert "-md" in result["llama_server"] and "--spec-draft-n-max 3" in result["llama_server"]
    ours, theirs = result["speculab"], result["llama.cpp"]
    assert ours["output_agreement"] == 1.0
    # llama-server accepted the converted draft beside the target (same vocabulary) and drafted with it
    assert theirs["draft_tokens"] > 0 and ours["draft_tokens"] > 0
    assert 0.0 <= theirs["acceptance_rate"] <= 1.0 and 0.0 <= ours["acceptance_rate"] <= 1.0
