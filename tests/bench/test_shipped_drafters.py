"""The shipped drafters on the real embedded model, as the benchmark builds them: lossless in fp32."""

import pytest

from speculab.bench.workload import interleave_domains, load_workload
from speculab.engine import Engine
from speculab.methods import new_proposer, parse_method, proposer_options
from speculab.sampling import SamplingParams


@pytest.mark.slow
@pytest.mark.parametrize("method", ["eagle", "eagle3", "draft", "ngram", "eagle:policy=plain_above:1"])
def test_default_methods_on_the_embedded_model_match_the_baseline(method):
    from speculab import runtime

    loaded = runtime.load(None, "float32")
    items = interleave_domains(load_workload(None), 3)
    prompts = [loaded.tokenizer.encode_chat(item.message_dicts())[-300:] for item in items]
    params = SamplingParams(max_tokens=24, ignore_eos=True)
    base = Engine(loaded.model, 2, 512).generate(prompts, params)
    spec = parse_method(method)
    proposer = new_proposer(spec, proposer_options(spec, loaded))
    if spec.name in ("eagle", "draft"):
        assert len(getattr(proposer, "inner", proposer).reduced) == {"eagle": 4096, "draft": 8192}[spec.name]  # the shipped ranking
    out = Engine(loaded.model, 2, 512, proposer=proposer).generate(prompts, params)
    assert [r.output_ids for r in out] == [r.output_ids for r in base]
    assert sum(r.stats.accepted_tokens for r in out) > 0
