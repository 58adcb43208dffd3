"""What the benchmark ran on: OS, kernel, CPU, RAM, GPU, versions, and model checksums."""

from __future__ import annotations

import os
import platform
from importlib import metadata
from pathlib import Path

import torch

from speculab.cpu import reported_cpu_flags
from speculab.files import sha256_of


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def ram_bytes() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def testbed() -> dict:
    try:
        version = metadata.version("speculab")
    except metadata.PackageNotFoundError:
        version = "unknown"
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    return {
        "os": platform.platform(),
        "kernel": platform.release(),
        "cpu": cpu_name(),
        "cpu_flags": reported_cpu_flags(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "ram_bytes": ram_bytes(),
        "gpu": gpu,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "speculab": version,
    }


def model_record(path: Path) -> dict:
    """id (folder name), path, and the sha256 of its weights file(s)."""
    files = sorted(path.glob("*.safetensors")) or sorted(path.glob("*.bin"))
    digest = sha256_of(files[0]) if len(files) == 1 else {f.name: sha256_of(f) for f in files}
    return {"id": path.name, "path": str(path), "sha256": digest}
