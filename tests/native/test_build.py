"""Where a native build lives: one folder per sources, flags, torch, checkout and environment."""

import sys

from speculab import native


def test_another_checkout_or_environment_gets_its_own_build_folder(monkeypatch, tmp_path):
    """ninja rebuilds when a compile command changes, and the commands name the checkout and the environment: two
    checkouts sharing a folder would rebuild each other's build on every `make setup`."""
    here = native.build_dir()
    assert native.build_dir() == here  # the same checkout finds its build again
    monkeypatch.setattr(sys, "prefix", str(tmp_path / "other-venv"))
    other_env = native.build_dir()
    monkeypatch.setattr(native, "HERE", tmp_path / "other-checkout")
    assert len({here, other_env, native.build_dir()}) == 3
    assert here.parent == other_env.parent  # all under the cache's native/ folder, named by torch's version
