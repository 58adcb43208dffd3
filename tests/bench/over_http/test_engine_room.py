"""A launched engine's room at a context: positions for the longest request, a KV cache for the largest batch of the
longest, the server's bytes against the memory free, and the batch sizes that do not fit recorded with their bytes."""

from speculab.bench.method_memory import memory_estimate
from speculab.bench.over_http.engine_room import ENGINE_PROCESS_BYTES, engine_room
from speculab.free_memory import usable_bytes
from speculab.launch.command import ServingRoom
from speculab.methods import parse_method
from speculab.models.config import CONFIGS

GIB = 1 << 30
SMOLLM = CONFIGS["smollm2-135m"]
FP32 = memory_estimate(parse_method("baseline"), SMOLLM, 4, 24 * GIB)


def test_the_workloads_own_prompts_keep_the_cpu_defaults():
    prompts = [1_400, *[1_200] * 15]  # the workload's 16 prompts: 19.4k tokens at once fit 1 GiB (46 kB a token)
    room = engine_room(FP32, prompts, [1, 16], max_tokens=32, available=20 * GIB)
    assert room.room == ServingRoom(2048, 1) and room.batch_sizes == (1, 16) and not room.skipped


def test_an_agent_length_context_gets_positions_and_a_cache_for_its_largest_batch():
    prompts = [4_100] * 16
    room = engine_room(FP32, prompts, [1, 4, 16], max_tokens=32, available=20 * GIB)
    assert room.room.max_model_len == 4_352  # 4,100 + 32 out + 16 proposed, rounded up to 256
    # 16 × 4,148 tokens × 46,080 bytes = 2.85 GiB
    assert room.room.kv_cache_gib == 3 and room.engine_bytes[16] == FP32["weights_bytes_per_device"] + ENGINE_PROCESS_BYTES + 3 * GIB
    assert engine_room(FP32, prompts, [1], max_tokens=32, available=20 * GIB).room.kv_cache_gib == 1


def test_a_drafters_cache_counts_and_each_rank_holds_its_own():
    draft = memory_estimate(parse_method("draft"), SMOLLM, 4, 24 * GIB)
    # 16 × 5,818 tokens × 46,080 bytes of the target's = 3.99 GiB; the draft model's own layers add theirs
    alone, with_drafter = (engine_room(e, [5_770] * 16, [16], 32, 40 * GIB) for e in (FP32, draft))
    assert (alone.room.kv_cache_gib, with_drafter.room.kv_cache_gib) == (4, 5)
    two = engine_room(FP32, [5_770] * 16, [16], 32, 40 * GIB, tp=2)
    assert two.engine_bytes[16] - alone.engine_bytes[16] == ENGINE_PROCESS_BYTES + alone.room.kv_cache_gib * GIB


def test_a_batch_the_memory_cannot_hold_is_skipped_with_its_bytes_and_the_rest_run():
    prompts = [8_000] * 16
    whole = engine_room(FP32, prompts, [1, 16], 32, 40 * GIB)
    available = int((whole.engine_bytes[16] - 1) / 0.9)  # one byte short of the batch of 16, the margin kept
    room = engine_room(FP32, prompts, [1, 16], 32, available)
    assert room.batch_sizes == (1,) and room.room.kv_cache_gib == 1 and set(room.skipped) == {16}
    assert usable_bytes(available) < room.engine_bytes[16]
    [record] = room.skipped_cells("vllm:baseline", "baseline")
    assert record["kind"] == "skipped" and record["batch_size"] == 16 and record["engine_bytes"] == room.engine_bytes[16]
    assert "GiB of KV cache for 16 requests of up to 8048 tokens" in record["reason"]
    nothing = engine_room(FP32, prompts, [1, 16], 32, 1 * GIB)
    assert nothing.batch_sizes == () and nothing.room.kv_cache_gib is None and set(nothing.skipped) == {1, 16}
