"""The sweep's runs on a tiny model: budgets taking turns in blocks, only clean steps kept, output unchanged."""

from speculab.engine import Engine
from speculab.methods import new_proposer, parse_method, proposer_options
from speculab.sampling import SamplingParams
from speculab.tune.sweep import BLOCK, Run, TimedProposer, cycling_budgets, run_steps
from tests.helpers import tiny_model

PROMPTS = [[5, 9, 11, 5, 9, 11, 5, 9], [7, 3, 7, 3, 7, 3], [4, 4, 4, 4, 4], [8, 2, 6, 8, 2, 6, 8]]


def ngram():
    spec = parse_method("ngram:prompt_lookup_min=1,num_speculative_tokens=3")
    return new_proposer(spec, proposer_options(spec, None))


def test_caps_take_turns_and_each_step_keeps_within_its_cap():
    model = tiny_model()
    budgets = [0, 1, 3]
    run = Run(PROMPTS * 2, ["python", "sql", "python", "typescript"] * 2, 2, 24)
    steps = run_steps(model, frozenset(), TimedProposer(ngram()), run, None, cycling_budgets(budgets))
    assert steps and {s.budget for s in steps} == set(budgets)
    assert all(s.batch_size == 2 and len(s.emitted) == 2 for s in steps)  # only full batches, nobody admitted or finished
    assert all(max(s.emitted) <= s.budget + 1 for s in steps)
    assert any(max(s.emitted) > 1 for s in steps if s.budget == 3)  # the repetitive prompts are drafted and accepted
    assert all(max(s.drafted) <= s.budget for s in steps) and all(s.drafted == (0, 0) for s in steps if s.budget == 0)
    assert all(s.seconds > s.propose_seconds >= 0 for s in steps)


def test_blocks_of_caps():
    cap_of = cycling_budgets([0, 2])
    assert [cap_of(i) for i in range(3 * BLOCK)] == [0] * BLOCK + [2] * BLOCK + [0] * BLOCK


def test_a_sweep_leaves_greedy_output_as_plain_decoding_gives_it():
    model = tiny_model()
    params = SamplingParams(max_tokens=20, ignore_eos=True)
    plain = [r.output_ids for r in Engine(model, 2, 64, frozenset()).generate(PROMPTS, params)]
    proposer = TimedProposer(ngram())
    cap_of = cycling_budgets([3, 0, 1])
    engine = Engine(model, 2, 64, frozenset(), proposer)
    requests = [engine.add_request(p, params) for p in PROMPTS]
    step = 0
    while engine.has_work:
        proposer.budget = cap_of(step)
        engine.step()
        step += 1
    assert [r.output_ids for r in requests] == plain


def test_a_run_ends_once_its_batch_can_never_be_full_again(monkeypatch):
    before_each_step = []  # (running, waiting) as each engine step starts
    step = Engine.step

    def recording(engine):
        before_each_step.append((len(engine.running), len(engine.waiting)))
        return step(engine)

    monkeypatch.setattr(Engine, "step", recording)
    run = Run(PROMPTS[:3], ["python", "sql", "python"], 2, 24)  # the third request would run alone: never a clean step
    steps = run_steps(tiny_model(), frozenset(), TimedProposer(ngram()), run, None, cycling_budgets([3]))
    assert steps and before_each_step[0] == (0, 3) and (0, 1) in before_each_step
    assert all(waiting or running == 2 for running, waiting in before_each_step)
