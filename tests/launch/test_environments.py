"""The peers' environments: llama-server's build is asked for by name when missing, and only llama.cpp's vendored
tree is unpacked from llama-cpp-python's source distribution."""

import io
import tarfile

import pytest

from speculab.launch.environments import link_libraries, llama_server, unpack_vendored_tree


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


def test_the_bindings_libraries_are_links_to_the_one_build(tmp_path):
    """The binding installed without a build of its own loads llama.cpp's libraries from its ``llama_cpp/lib``: links to
    the build llama-server comes from, so one library opened by path and by another's dependency is one object."""
    built = tmp_path / "llama-server-build" / "bin"
    built.mkdir(parents=True)
    for name in ("libllama.so", "libggml.so.0", "libmtmd.so", "llama-server"):
        (built / name).write_text(name)
    package = tmp_path / "lib" / "python3.11" / "site-packages" / "llama_cpp"
    package.mkdir(parents=True)
    (package / "lib").mkdir()
    (package / "lib" / "libllama.so").write_text("stale")  # a library left from an earlier install is replaced
    linked = link_libraries(tmp_path)
    assert sorted(p.name for p in linked) == ["libggml.so.0", "libllama.so", "libmtmd.so"]
    assert all(p.is_symlink() and p.resolve() == (built / p.name).resolve() for p in linked)
    assert (package / "lib" / "libllama.so").read_text() == "libllama.so"
