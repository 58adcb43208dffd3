"""speculab's dtype choice: fp32 for a bf16 checkpoint wherever the native kernels run, else the CPU's native dtype."""

import json

import pytest

from speculab import native, runtime


def checkpoint(tmp_path, **config):
    (tmp_path / "config.json").write_text(json.dumps(config))
    return tmp_path


@pytest.mark.parametrize(
    "config,expected",
    [({"dtype": "bfloat16"}, True), ({"torch_dtype": "bfloat16"}, True), ({"torch_dtype": "float32"}, False), ({}, False)],
)
def test_the_stored_dtype_is_read_from_the_config(tmp_path, config, expected):
    assert runtime.stored_in_bf16(checkpoint(tmp_path, **config)) is expected


def test_an_unreadable_config_is_not_bf16(tmp_path):
    assert not runtime.stored_in_bf16(tmp_path)  # no config.json
    (tmp_path / "config.json").write_text("{not json")
    assert not runtime.stored_in_bf16(tmp_path)


def test_a_bf16_checkpoint_runs_in_fp32_on_the_native_kernels(tmp_path, monkeypatch):
    bf16 = checkpoint(tmp_path, dtype="bfloat16")
    monkeypatch.setattr(native, "kernels", lambda: object())  # built, whatever this CPU is
    assert runtime.default_dtype("cpu", bf16) == "float32"
    monkeypatch.setattr(native, "kernels", lambda: None)  # not built: what the CPU computes natively
    assert runtime.default_dtype("cpu", bf16) == runtime.hardware_dtype("cpu")


def test_an_fp32_checkpoint_keeps_the_cpus_native_dtype(tmp_path, monkeypatch):
    monkeypatch.setattr(native, "kernels", lambda: object())
    assert runtime.default_dtype("cpu", checkpoint(tmp_path, torch_dtype="float32")) == runtime.hardware_dtype("cpu")


def test_hardware_dtype_follows_the_cpu(monkeypatch):
    monkeypatch.setattr(runtime, "cpu_has_native_bf16", lambda: True)
    assert runtime.hardware_dtype("cpu") == "bfloat16"
    monkeypatch.setattr(runtime, "cpu_has_native_bf16", lambda: False)
    assert runtime.hardware_dtype("cpu") == "float32"
    assert runtime.hardware_dtype("cuda") == "bfloat16"


def test_kv_dtype_sets_every_cache_the_model_makes(tmp_path):
    import torch

    from tests.helpers import save_tiny_checkpoint

    path = save_tiny_checkpoint(tmp_path / "m", seed=1)
    loaded = runtime.load(path, "float32", "cpu", kv_dtype="bfloat16")
    assert loaded.kv_dtype == "bfloat16" and loaded.model.new_cache(2, 16).kv.dtype == torch.bfloat16
    plain = runtime.load(path, "float32", "cpu")
    assert plain.kv_dtype == "float32" and plain.model.new_cache(2, 16).kv.dtype == torch.float32


def test_an_unknown_kv_dtype_is_a_clear_error(tmp_path):
    from tests.helpers import save_tiny_checkpoint

    with pytest.raises(ValueError, match="unknown KV cache dtype 'float16'; choose one of float32, bfloat16"):
        runtime.load(save_tiny_checkpoint(tmp_path / "m", seed=1), "float32", "cpu", kv_dtype="float16")


def test_every_command_that_picks_a_dtype_takes_kv_dtype():
    import argparse

    parser = argparse.ArgumentParser()
    runtime.add_model_flags(parser)
    assert parser.parse_args(["--kv-dtype", "bfloat16"]).kv_dtype == "bfloat16"
    assert parser.parse_args([]).kv_dtype is None  # the model's dtype
    with pytest.raises(SystemExit):
        parser.parse_args(["--kv-dtype", "int8"])
