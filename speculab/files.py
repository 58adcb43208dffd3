"""Files on disk: speculab's cache folder and checksums.

Knows: where the cache lives (``$SPECULAB_CACHE``, else the XDG cache) and how a file's sha256 is computed.
Does not know: what is cached (the embedded model, corpora, self-distilled data, vLLM's environment).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path


def cache_dir() -> Path:
    """``$SPECULAB_CACHE``, else ``$XDG_CACHE_HOME/speculab``, else ``~/.cache/speculab``."""
    if os.environ.get("SPECULAB_CACHE"):
        return Path(os.environ["SPECULAB_CACHE"])
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "speculab"


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()
