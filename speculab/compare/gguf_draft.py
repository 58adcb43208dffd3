"""A draft model as llama.cpp reads it: a speculab drafter folder converted to GGUF by llama.cpp's own converter.

Knows: where the converter is (``convert_hf_to_gguf.py`` in the llama.cpp tree that the llama.cpp environment
unpacks, ``launch.environments.llamacpp_tree``, so the file matches the llama-server built from that tree); that it
runs in speculab's Python, which has what it imports (torch, transformers, sentencepiece) with the tree's own
``gguf-py`` first on the path; and where its output is cached: one file per drafter content (the sha256 of its
config, weights and tokenizer) and type, written to a temporary name and renamed, so an interrupted conversion
leaves nothing half-written.

Does not know: llama.cpp's runtime, whether the draft shares the target's vocabulary (llama-server checks that when
it loads both), or what is measured.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

from speculab.files import cache_dir
from speculab.launch.environments import llamacpp_tree

OUTTYPES = ("f32", "bf16", "f16")
HASHED = ("config.json", "model.safetensors", "tokenizer.json")  # what decides the GGUF's content


def drafter_digest(folder: Path) -> str:
    """The first 12 hex digits of the sha256 over the drafter's config, weights and tokenizer."""
    digest = hashlib.sha256()
    for name in HASHED:
        path = folder / name
        if not path.is_file():
            raise FileNotFoundError(f"{path}: missing; a draft model folder needs {', '.join(HASHED)}")
        digest.update(name.encode())
        with path.open("rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()[:12]


def draft_gguf(folder: str | Path, outtype: str = "f32", tree: Path | None = None) -> Path:
    """The drafter in ``folder`` as a ``outtype`` GGUF under speculab's cache, converted on first use."""
    if outtype not in OUTTYPES:
        raise ValueError(f"outtype must be one of {', '.join(OUTTYPES)}, not {outtype!r}")
    folder = Path(folder)
    out = cache_dir() / "gguf" / "drafts" / f"{folder.name}-{drafter_digest(folder)}.{outtype.upper()}.gguf"
    if out.exists():
        return out
    tree = tree or llamacpp_tree()
    converter = tree / "convert_hf_to_gguf.py"
    if not converter.is_file():
        raise FileNotFoundError(f"{converter}: llama.cpp's converter is missing; run `make llamacpp`")
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(f"{out.name}.partial{os.getpid()}")
    argv = [sys.executable, str(converter), str(folder), "--outtype", outtype, "--outfile", str(partial)]
    env = os.environ | {"PYTHONPATH": os.pathsep.join(filter(None, [str(tree / "gguf-py"), os.environ.get("PYTHONPATH")]))}
    try:
        done = subprocess.run(argv, capture_output=True, text=True, env=env)
        if done.returncode != 0:
            raise RuntimeError(f"llama.cpp's converter failed on {folder}:\n{done.stderr[-3000:]}")
        os.replace(partial, out)
    finally:
        partial.unlink(missing_ok=True)
    return out
