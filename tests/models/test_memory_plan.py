"""``speculab plan``: a 70B-class setup against hand arithmetic, the embedded model against the benchmark's own
memory figures, the quantised weight formats, and clear refusals."""

import json

import pytest

from speculab.bench.method_memory import memory_estimate
from speculab.cli import main
from speculab.methods import DEFAULT_DRAFT, DEFAULT_EAGLE, parse_method
from speculab.models.config import CONFIGS
from speculab.models.memory import ModelTensors, model_tensors, weights

GiB = 2**30


def run_plan(capsys, *args) -> dict:
    assert main(["plan", *args]) == 0
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])["setups"]


def test_llama_70b_bf16_on_four_80gb_devices_by_hand(capsys):
    setups = run_plan(capsys, "--model", "llama-3.3-70b", "--tp", "4", "--device-memory", "80GiB", "--overhead", "2GiB")
    plain = setups["plain"]
    # Llama 3.3 70B: hidden 8192, MLP 28672, 80 layers, 64 query and 8 KV heads of 128, vocab 128256, untied
    per_layer = 2 * 8192 * 8192 + 2 * 8192 * 1024 + 3 * 8192 * 28672  # q, o; k, v; gate, up, down
    sharded = 80 * per_layer + 2 * 128256 * 8192  # the linears, the embedding and the lm_head split over 4 ranks
    norms = 80 * 2 * 8192 + 8192  # replicated
    assert plain["target_parameters"] == sharded + norms == 70_553_706_496
    assert plain["weights_bytes_per_device"] == 2 * sharded // 4 + 2 * norms
    assert plain["kv_bytes_per_token_per_device"] == 2 * 80 * (8 // 4) * 128 * 2  # K and V, 2 of 8 KV heads a rank
    free = int(80 * GiB * 0.9) - plain["weights_bytes_per_device"] - 2 * GiB
    assert plain["kv_free_bytes_per_device"] == free
    assert plain["kv_capacity_tokens"] == free // 81920 and plain["kv_capacity_sessions"] == free // 81920 // 32768


def test_the_embedded_model_gets_the_benchmarks_own_memory_figures(capsys):
    device_bytes = 24 * GiB
    flags = ["--weights", "fp32", "--drafter-dtype", "fp32", "--kv-dtype", "fp32", "--gpu-memory-utilization", "1.0"]
    flags += ["--device-memory", str(device_bytes), "--drafter", f"draft:{DEFAULT_DRAFT}", "--drafter", f"eagle:{DEFAULT_EAGLE}"]
    setups = run_plan(capsys, *flags)
    target = CONFIGS["smollm2-135m"]
    for label, spec in [
        ("plain", "baseline"),
        (f"draft:{DEFAULT_DRAFT}", "draft:draft_vocab=none"),
        (f"eagle:{DEFAULT_EAGLE}", "eagle:draft_vocab=none"),
    ]:
        assert setups[label] == memory_estimate(parse_method(spec), target, 4, device_bytes), label


def test_quantised_linears_by_hand():
    one = ModelTensors(linears=((256, 64),), sharded_dense=10, replicated_dense=3, replicated_linears=())
    groups = 256 // 128
    awq = 256 * 64 // 2 + groups * 64 * 2.5  # 4-bit weights; per group and output an fp16 scale and a 4-bit zero
    assert weights(one, "awq-int4").sharded_bytes == awq + 2 * 10 == weights(one, "awq").sharded_bytes
    assert weights(one, "gptq-int4").sharded_bytes == awq + 4 * 256 + 2 * 10  # + g_idx, an int32 per input
    assert weights(one, "fp8").sharded_bytes == 256 * 64 + 4 * 64 + 2 * 10  # + an fp32 scale per output channel
    assert weights(one, "fp8").replicated_bytes == 2 * 3  # what is not a linear stays fp16
    assert weights(model_tensors(CONFIGS["llama-3.3-70b"]), "gptq-int4").weight_format == "gptq-int4-g128"
    with pytest.raises(ValueError, match="gptq-int4"):
        weights(one, "int3")


@pytest.mark.parametrize(
    "args,said",
    [
        (["--device-memory", "lots"], "--device-memory"),
        (["--drafter", "medusa"], "--drafter"),
        (["--drafter", "draft"], "draft:CONFIG"),
        (["--weights", "int2"], "--weights"),
    ],
)
def test_bad_flags_are_refused_by_name(capsys, args, said):
    with pytest.raises(SystemExit) as exit_info:
        main(["plan", *args])
    assert exit_info.value.code == 2 and said in capsys.readouterr().err


def test_a_missing_config_is_a_clear_error(capsys, tmp_path):
    assert main(["plan", "--model", str(tmp_path)]) == 2
    assert "no config.json there" in capsys.readouterr().err


def test_an_eagle3_heads_cut_vocabulary_is_what_its_estimate_weighs():
    target, device_bytes = CONFIGS["smollm2-135m"], 24 * GiB
    whole = memory_estimate(parse_method("eagle3:draft_vocab=none"), target, 4, device_bytes)
    cut = memory_estimate(parse_method("eagle3:draft_vocab=4096"), target, 4, device_bytes)
    assert whole["drafter_parameters"] - cut["drafter_parameters"] == (8192 - 4096) * target.hidden_size
    wider = memory_estimate(parse_method("eagle3:draft_vocab=20000"), target, 4, device_bytes)
    assert wider["drafter_parameters"] == whole["drafter_parameters"]  # no more rows than the head has
