"""The peers' environments: llama-server's build is asked for by name when missing, and only llama.cpp's vendored
tree is unpacked from llama-cpp-python's source distribution."""

import io
import tarfile

import pytest

from speculab.launch.environments import llama_server, unpack_vendored_tree


def sdist(path, files: dict[str, str]):
    with tarfile.open(path, "w:gz") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def test_only_the_vendored_tree_is_unpacked(tmp_path):
    top = "llama_cpp_python-0.3.36"
    archive = sdist(
        tmp_path / f"{top}.tar.gz",
        {
            f"{top}/vendor/llama.cpp/CMakeLists.txt": "project(llama)",
            f"{top}/vendor/llama.cpp/tools/a.cpp": "int a;",
            f"{top}/setup.py": "x",
        },
    )
    (tmp_path / "llama.cpp.partial").mkdir()  # left by an interrupted unpack: redone, not trusted
    tree = unpack_vendored_tree(archive, tmp_path / "llama.cpp")
    assert sorted(str(p.relative_to(tree)) for p in tree.rglob("*") if p.is_file()) == ["CMakeLists.txt", "tools/a.cpp"]
    assert not (tmp_path / "llama.cpp.partial").exists()


def test_a_source_distribution_without_the_tree_is_refused(tmp_path):
    archive = sdist(tmp_path / "llama_cpp_python-0.3.36.tar.gz", {"llama_cpp_python-0.3.36/setup.py": "x"})
    with pytest.raises(RuntimeError, match="vendor/llama.cpp"):
        unpack_vendored_tree(archive, tmp_path / "llama.cpp")


def test_a_missing_server_names_the_make_target(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECULAB_LLAMACPP_ENV", str(tmp_path / "env"))
    with pytest.raises(FileNotFoundError, match="make llamacpp"):
        llama_server(create=False)
