import pytest
import torch

from speculab.sampling import SamplingParams, sample_rows, target_probs


def test_greedy_is_one_hot_argmax():
    logits = torch.randn(3, 50)
    probs = target_probs(logits, SamplingParams())
    assert torch.equal(probs.argmax(-1), logits.argmax(-1)) and torch.equal(probs.sum(-1), torch.ones(3))


def test_top_k_and_top_p_restrict_support():
    logits = torch.tensor([[4.0, 3.0, 2.0, 1.0, 0.0]])
    k2 = target_probs(logits, SamplingParams(temperature=1.0, top_k=2))
    assert (k2[0, 2:] == 0).all() and torch.isclose(k2.sum(), torch.tensor(1.0))
    full = logits.softmax(-1)[0]
    p = target_probs(logits, SamplingParams(temperature=1.0, top_p=float(full[0] + full[1]) - 1e-4))
    assert (p[0, 2:] == 0).all() and (p[0, :2] > 0).all()
    first_only = target_probs(logits, SamplingParams(temperature=1.0, top_p=0.01))
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
