"""Divergences between greedy outputs: located at the first differing token, and the target's gap there measured
against transformers' own forward of the same checkpoint."""

from __future__ import annotations

import torch
import transformers

from speculab import runtime
from speculab.bench.divergence import NEAR_TIE, divergence_fields, divergences, first_difference
from tests.helpers import save_tiny_checkpoint


def test_first_difference():
    assert first_difference([1, 2, 3], [1, 2, 3]) is None
    assert first_difference([1, 2, 3], [1, 5, 3]) == 1
    assert first_difference([1, 2], [1, 2, 3]) == 2


def test_the_gap_is_the_targets_logprob_difference_at_the_first_differing_token(tmp_path):
    folder = save_tiny_checkpoint(tmp_path / "tiny")
    loaded = runtime.load(folder, "float32")
    hf = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    tok = loaded.tokenizer
    prompt = tok.encode("w5 w6 w7")
    reference, other = "w10 w11 w12 w13", "w10 w11 w40 w13"
    found = divergences(loaded, [prompt, prompt], [reference, other], [reference, reference])
    assert len(found) == 1  # the identical output has none
    d = found[0]
    ref_ids = tok.encode(reference, add_bos=False)
    assert (d.prompt, d.token_index, d.tokens) == (1, 2, (ref_ids[2], tok.encode("w40", add_bos=False)[0]))
    with torch.no_grad():
        logits = hf(torch.tensor([prompt + ref_ids[:2]])).logits[0, -1]
    logprobs = torch.log_softmax(logits, dim=-1)
    assert abs(d.logprob_gap - float(logprobs[d.tokens[0]] - logprobs[d.tokens[1]])) < 1e-4
    assert d.near_tie == (abs(d.logprob_gap) < NEAR_TIE)
    fields = divergence_fields(found)
    assert fields["max_logprob_gap"] == abs(d.logprob_gap) and fields["all_near_ties"] == d.near_tie


def test_a_length_difference_is_not_a_token_choice(tmp_path):
    loaded = runtime.load(save_tiny_checkpoint(tmp_path / "tiny"), "float32")
    prompt = loaded.tokenizer.encode("w5")
    assert divergences(loaded, [prompt], ["w10 w11"], ["w10 w11 w12"]) == []


def test_token_ids_give_the_same_divergence_as_texts(tmp_path):
    from speculab.bench.divergence import token_divergences

    loaded = runtime.load(save_tiny_checkpoint(tmp_path / "tiny"), "float32")
    tok = loaded.tokenizer
    prompt = tok.encode("w5 w6")
    ref, out = "w10 w11 w12", "w10 w30 w12"
    by_text = divergences(loaded, [prompt], [out], [ref])
    by_ids = token_divergences(loaded, [prompt], [tok.encode(out, add_bos=False)], [tok.encode(ref, add_bos=False)])
    assert by_ids == by_text and by_ids[0].token_index == 1
