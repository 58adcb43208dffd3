"""The draft model as llama.cpp reads it: llama.cpp's own converter on the shipped draft model, its cache, its errors.

The conversion needs the llama.cpp tree that `make llamacpp` unpacks: under `make test` it runs, never skips.
"""

import shutil

import numpy as np
import pytest
from safetensors.torch import load_file

from speculab.compare.gguf_draft import draft_gguf, drafter_digest
from speculab.launch.environments import LLAMA_SERVER_STAMP, llamacpp_env_dir, llamacpp_tree
from speculab.methods import DEFAULT_DRAFT
from tests.helpers import require_peer_env


def test_the_digest_follows_the_weights_and_a_missing_file_is_named(tmp_path):
    folder = tmp_path / "draft"
    shutil.copytree(DEFAULT_DRAFT, folder)
    before = drafter_digest(folder)
    assert before == drafter_digest(DEFAULT_DRAFT)
    (folder / "config.json").write_text((folder / "config.json").read_text() + " ")
    assert drafter_digest(folder) != before
    (folder / "tokenizer.json").unlink()
    with pytest.raises(FileNotFoundError, match="tokenizer.json"):
        drafter_digest(folder)


def test_an_unknown_type_is_refused():
    with pytest.raises(ValueError, match="f32, bf16, f16"):
        draft_gguf(DEFAULT_DRAFT, "q4_0")


@pytest.mark.slow
def test_the_shipped_draft_converts_to_its_own_weights_and_the_targets_tokenizer(tmp_path, monkeypatch):
    require_peer_env(llamacpp_env_dir(), "llamacpp", LLAMA_SERVER_STAMP)
    tree = llamacpp_tree()  # before the cache moves: the environment stays where it is
    monkeypatch.setenv("SPECULAB_CACHE", str(tmp_path))
    from gguf import GGUFReader

    out = draft_gguf(DEFAULT_DRAFT, "f32", tree)
    assert out.parent == tmp_path / "gguf" / "drafts" and out.name.endswith(".F32.gguf")
    reader = GGUFReader(out)
    assert reader.fields["tokenizer.ggml.pre"].contents() == "smollm"  # what llama-server checks against the target's
    assert reader.fields["general.architecture"].contents() == "llama"
    tensors = {t.name: t for t in reader.tensors}
    embedding = load_file(DEFAULT_DRAFT / "model.safetensors")["model.embed_tokens.weight"].float().numpy()
    converted = np.asarray(tensors["token_embd.weight"].data).reshape(embedding.shape)
    assert np.array_equal(converted, embedding)  # bf16 -> f32 is exact
    stamp = out.stat().st_mtime_ns
    assert draft_gguf(DEFAULT_DRAFT, "f32", tree) == out and out.stat().st_mtime_ns == stamp  # cached, not converted again
    assert not list(out.parent.glob("*.partial*"))
