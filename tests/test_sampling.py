import pytest
import torch

from speculab.sampling import SamplingParams, greedy_tokens, sample_rows, sampling_probs


def test_greedy_is_one_hot_argmax():
    logits = torch.randn(3, 50)
    probs = sampling_probs(logits, SamplingParams())
    assert torch.equal(probs.argmax(-1), logits.argmax(-1)) and torch.equal(probs.sum(-1), torch.ones(3))


def test_top_k_and_top_p_restrict_support():
    logits = torch.tensor([[4.0, 3.0, 2.0, 1.0, 0.0]])
    k2 = sampling_probs(logits, SamplingParams(temperature=1.0, top_k=2))
    assert (k2[0, 2:] == 0).all() and torch.isclose(k2.sum(), torch.tensor(1.0))
    full = logits.softmax(-1)[0]
    p = sampling_probs(logits, SamplingParams(temperature=1.0, top_p=float(full[0] + full[1]) - 1e-4))
    assert (p[0, 2:] == 0).all() and (p[0, :2] > 0).all()
    first_only = sampling_probs(logits, SamplingParams(temperature=1.0, top_p=0.01))
    assert first_only[0, 0] == 1.0


def test_seeded_sampling_is_reproducible_and_follows_probs():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.2]]))
    params = SamplingParams(temperature=1.0, seed=7)
    a = [sample_rows(logits, [params], [g])[0] for g in [params.generator()] for _ in range(1)]
    g1, g2 = params.generator(), params.generator()
    draws1 = [sample_rows(logits, [params], [g1])[0] for _ in range(4000)]
    draws2 = [sample_rows(logits, [params], [g2])[0] for _ in range(4000)]
    assert draws1 == draws2 and a[0] == draws1[0]
    freq = torch.bincount(torch.tensor(draws1), minlength=3).float() / 4000
    assert torch.allclose(freq, torch.tensor([0.5, 0.3, 0.2]), atol=0.03)


@pytest.mark.parametrize("bad", [dict(max_tokens=0), dict(temperature=-1), dict(top_p=0), dict(top_k=-2)])
def test_bad_params_are_rejected(bad):
    with pytest.raises(ValueError):
        SamplingParams(**bad)


@pytest.mark.parametrize("temperature", [1e-45, 5e-324, 1e-300, 1e-38, 0.7, 1e30, 1e300])
@pytest.mark.parametrize("top_p", [1.0, 0.5, 1e-300])
def test_every_positive_temperature_and_top_p_gives_a_distribution(temperature, top_p):
    """Tiny temperatures overflowed the scaled logits (inf - inf) and tiny top_p emptied the nucleus: NaN."""
    logits = torch.randn(4, 64, generator=torch.Generator().manual_seed(1))
    probs = sampling_probs(logits, SamplingParams(temperature=temperature, top_p=top_p, top_k=5))
    assert not probs.isnan().any() and torch.allclose(probs.sum(-1), torch.ones(4))
    assert ((probs > 0).sum(-1) <= 5).all()  # top-k holds at any temperature
    if temperature <= 1:  # (past that, top-p chooses among near-equal probabilities)
        assert (probs.gather(-1, logits.argmax(-1, keepdim=True)) > 0).all()  # the top token keeps its probability
    if temperature < 1e-30 or top_p < 1e-30:  # the limit: all mass on the top token
        assert torch.equal(probs.max(-1).values, torch.ones(4))
    if temperature > 1e29 and top_p == 1.0:  # the other limit: uniform over the top-k
        assert torch.allclose(probs.max(-1).values, torch.full((4,), 0.2))


@pytest.mark.parametrize("seed", [2**64, -(2**63) - 1])
def test_a_seed_torch_cannot_take_is_refused(seed):
    with pytest.raises(ValueError, match="seed"):
        SamplingParams(temperature=1.0, seed=seed)
    SamplingParams(temperature=1.0, seed=2**64 - 1).generator()  # the ends of the range work
    SamplingParams(temperature=1.0, seed=-(2**63)).generator()


@pytest.mark.parametrize("field", ["temperature", "top_p"])
def test_non_finite_numbers_are_refused(field):
    for value in (float("nan"), float("inf")):
        with pytest.raises(ValueError, match=field):
            SamplingParams(**{field: value})


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
def test_greedy_tokens_is_torch_argmax_with_ties_and_nans(dtype):
    g = torch.Generator().manual_seed(0)
    logits = torch.randint(-3, 4, (6, 7, 50), generator=g).to(dtype)  # small integers: many ties in every row
    logits[0, 1, 10] = float("nan")
    logits[0, 1, 30] = float("nan")  # two NaNs: the first one wins
    logits[1, 2] = float("-inf")  # a row that is all -inf
    logits[2, 3, 49] = float("inf")
    expected = logits.argmax(-1).tolist()
    assert greedy_tokens(logits) == expected
    assert greedy_tokens(logits[:, 2]) == logits[:, 2].argmax(-1).tolist()  # a strided view
    assert greedy_tokens(logits[0, 0]) == int(logits[0, 0].argmax())
