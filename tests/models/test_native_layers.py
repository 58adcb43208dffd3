"""The C++ layers' loop against the Python one: the same math, each row computed alone."""

import pytest
import torch

from speculab.models.llama import ForwardBatch, causal_batch
from speculab.models.native_layers import NativeLayers
from tests.helpers import bf16_kv_target, speculab_from_hf, tiny_hf_model


@pytest.fixture(scope="module")
def model():
    ours = speculab_from_hf(tiny_hf_model("qwen2", seed=2, bf16_weights=True))  # qkv bias too
    assert isinstance(ours.native_layers, NativeLayers), "native kernels not built: run `make setup`"
    return ours


def run(model, native_layers, tokens, batch_of, capture=(0, 2)):
    """Prefill 9 context tokens in slots 0..2, then one forward of ``tokens``; logits, captures and the cache."""
    saved = model.native_layers
    model.native_layers = native_layers
    try:
        cache = model.new_cache(4, 128)
        context = torch.arange(3, 30).view(3, 9)
        model(context, causal_batch(torch.arange(3), torch.zeros(3, dtype=torch.long), 9), cache)
        out = model(tokens, batch_of(), cache, capture_layers=capture)
        return out.logits, out.captured, cache.kv.clone()
    finally:
        model.native_layers = saved


def batches():
    """A chain over contiguous slots; a chain over gathered slots (2, 0); a tree of 4 nodes in slot 1."""
    tree = torch.zeros(1, 1, 4, 13, dtype=torch.bool)
    tree[..., :9] = True
    for i, ancestors in enumerate([[0], [0, 1], [0, 2], [0, 1, 3]]):
        tree[0, 0, i, [9 + a for a in ancestors]] = True
    return {
        "chain": (torch.randint(0, 256, (3, 5)), lambda: causal_batch(torch.arange(3), torch.full((3,), 9), 5)),
        "gathered": (torch.randint(0, 256, (2, 1)), lambda: causal_batch(torch.tensor([2, 0]), torch.full((2,), 9), 1)),
        "tree": (
            torch.randint(0, 256, (1, 4)),
            lambda: ForwardBatch(torch.tensor([1]), torch.tensor([[9, 10, 10, 11]]), torch.arange(9, 13)[None], tree),
        ),
    }


@pytest.mark.parametrize("shape", ["chain", "gathered", "tree"])
def test_the_loop_is_close_to_the_python_loop(model, shape):
    tokens, batch_of = batches()[shape]
    python = run(model, None, tokens, batch_of)
    native = run(model, model.native_layers, tokens, batch_of)
    torch.testing.assert_close(native[0], python[0], rtol=1e-5, atol=1e-5)
    assert native[1].keys() == python[1].keys()
    for i in python[1]:
        torch.testing.assert_close(native[1][i], python[1][i], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(native[2], python[2], rtol=1e-5, atol=1e-5)  # the same K/V written at the same places


def test_prefill_chunks_longer_than_the_native_attention_take_atens(model):
    """A forward of more tokens per row than the native attention takes (a prefill chunk) is still the Python loop's math."""
    q = model.native_layers.native_attention_max_q() + 5
    tokens = torch.randint(0, 256, (2, q))

    def batch_of():
        return causal_batch(torch.arange(2), torch.full((2,), 9), q)

    native, python = run(model, model.native_layers, tokens, batch_of), run(model, None, tokens, batch_of)
    torch.testing.assert_close(native[0], python[0], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("q", [5, 8, 16, 64])
def test_a_verify_gives_each_row_what_decoding_it_alone_gives(model, q):
    """Row independence end to end: q tokens in one forward == q one-token forwards, bit for bit, for every q the
    native attention takes (8 with the AVX2 kernels, 64 with the AVX512 ones); past it, close (ATen's attention)."""
    tokens = torch.randint(0, 256, (1, q))
    cache = model.new_cache(1, 80)
    model(torch.arange(3, 12)[None], causal_batch(torch.arange(1), torch.zeros(1, dtype=torch.long), 9), cache)
    verify = model(tokens, causal_batch(torch.arange(1), torch.tensor([9]), q), cache).logits
    steps = [model(tokens[:, t : t + 1], causal_batch(torch.arange(1), torch.tensor([9 + t]), 1), cache).logits for t in range(q)]
    if q <= model.native_layers.native_attention_max_q():
        assert torch.equal(torch.cat(steps, 1), verify)
    else:
        torch.testing.assert_close(torch.cat(steps, 1), verify, rtol=1e-5, atol=1e-5)


@pytest.fixture(scope="module")
def bf16_kv_model():
    return bf16_kv_target(seed=4)[1]


@pytest.mark.parametrize("shape", ["chain", "gathered", "tree"])
def test_on_a_bf16_cache_the_loop_is_close_to_the_python_loop(bf16_kv_model, shape):
    """Both loops write keys and values rounded to bf16 and attend over them in fp32 (the Python loop widens them)."""
    tokens, batch_of = batches()[shape]
    python = run(bf16_kv_model, None, tokens, batch_of)
    native = run(bf16_kv_model, bf16_kv_model.native_layers, tokens, batch_of)
    assert native[2].dtype == python[2].dtype == torch.bfloat16
    torch.testing.assert_close(native[0], python[0], rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(native[2].float(), python[2].float(), rtol=2**-7, atol=1e-6)  # at most one bf16 rounding apart


@pytest.mark.parametrize("q", [5, 16, 64])
def test_on_a_bf16_cache_a_verify_gives_each_row_what_decoding_it_alone_gives(bf16_kv_model, q):
    model = bf16_kv_model
    tokens = torch.randint(0, 256, (1, q))
    cache = model.new_cache(1, 80)
    assert cache.kv.dtype == torch.bfloat16
    model(torch.arange(3, 12)[None], causal_batch(torch.arange(1), torch.zeros(1, dtype=torch.long), 9), cache)
    verify = model(tokens, causal_batch(torch.arange(1), torch.tensor([9]), q), cache).logits
    steps = [model(tokens[:, t : t + 1], causal_batch(torch.arange(1), torch.tensor([9 + t]), 1), cache).logits for t in range(q)]
    assert torch.equal(torch.cat(steps, 1), verify)


def test_the_python_loop_runs_without_the_kernels(monkeypatch):
    from speculab import native

    monkeypatch.setenv("SPECULAB_NATIVE", "0")
    native.kernels.cache_clear()
    try:
        ours = speculab_from_hf(tiny_hf_model("llama", seed=2, bf16_weights=True))
        assert ours.native_layers is None
    finally:
        monkeypatch.undo()
        native.kernels.cache_clear()


def test_a_head_size_the_kernels_do_not_take_keeps_the_python_loop_on_native_linears():
    from speculab.models.linear import NativeLinear

    ours = speculab_from_hf(tiny_hf_model("llama", seed=2, bf16_weights=True, num_attention_heads=8, num_key_value_heads=2))
    assert ours.config.head_dim == 8 and ours.native_layers is None
    assert isinstance(ours.layers[0].self_attn.qkv_proj, NativeLinear), "native kernels not built: run `make setup`"


@pytest.mark.parametrize("chunk", [7, 70])  # on the native attention, and past it (ATen's)
def test_parts_in_one_forward_give_what_each_gives_alone(model, chunk):
    """A step's verify (a chain over slots 0..2) and a prompt's chunk (slot 3) in one pass: each part's logits,
    captures and K/V bit for bit what its own forward gives (the kernels compute every row alone)."""
    from speculab.models.llama import ForwardPart, prompt_part

    prompt = torch.randint(0, 256, (chunk + 4,)).tolist()
    verify_tokens = torch.randint(0, 256, (3, 5))

    def parts():
        return [
            ForwardPart(verify_tokens, causal_batch(torch.arange(3), torch.full((3,), 9), 5)),
            prompt_part(3, prompt, 4, 4 + chunk, "cpu"),
        ]

    def context():
        cache = model.new_cache(4, 128)
        model(torch.arange(3, 30).view(3, 9), causal_batch(torch.arange(3), torch.zeros(3, dtype=torch.long), 9), cache)
        model(torch.tensor([prompt[:4]]), causal_batch(torch.tensor([3]), torch.zeros(1, dtype=torch.long), 4), cache)
        return cache

    together_cache, alone_cache = context(), context()
    together = model.forward_parts(parts(), together_cache, capture_layers=(0, 2))
    alone = [model(p.tokens, p.batch, alone_cache, p.logits_at, capture_layers=(0, 2)) for p in parts()]
    for t, a in zip(together, alone):
        assert torch.equal(t.logits, a.logits) and torch.equal(t.hidden, a.hidden)
        assert t.captured.keys() == a.captured.keys() and all(torch.equal(t.captured[i], a.captured[i]) for i in a.captured)
    assert together[1].logits.shape[:2] == (1, 1)  # the chunk's logits at its last position only
    assert torch.equal(together_cache.kv, alone_cache.kv)
