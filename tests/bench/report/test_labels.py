"""Short labels: a method's name, plus what differs between side-by-side settings of one method."""

import itertools

from speculab.bench.report.labels import parse_label, short_labels

MAKE_BENCH = [
    "baseline",
    "draft(num_speculative_tokens=3,draft_vocab=auto)",
    "eagle(num_steps=3,topk=2,num_draft_tokens=4,batch_budget=4,draft_vocab=auto)",
    "ngram(num_speculative_tokens=4,prompt_lookup_min=2,prompt_lookup_max=5)",
    "suffix(num_speculative_tokens=4,max_tree_depth=24,max_cached_requests=128,max_spec_factor=1.0,min_token_prob=0.1)",
]
EAGLE = "eagle(num_steps=3,topk=2,num_draft_tokens=4,batch_budget=4,draft_vocab=auto)"


def test_one_setting_per_method_is_its_name():
    assert short_labels(MAKE_BENCH) == dict(zip(MAKE_BENCH, ["baseline", "draft", "eagle", "ngram", "suffix"]))


def test_settings_side_by_side_add_what_differs():
    policy = "draft(num_speculative_tokens=3,draft_vocab=auto,policy=benchmarks/policies/draft-break-even.json)"
    auto = EAGLE[:-1] + ",policy=auto)"
    k4 = EAGLE.replace("topk=2", "topk=4")
    n8 = MAKE_BENCH[4].replace("num_speculative_tokens=4", "num_speculative_tokens=8")
    short = short_labels([*MAKE_BENCH, policy, auto, k4, n8])
    assert short[MAKE_BENCH[1]] == "draft" and short[policy] == "draft-policy"
    assert (short[EAGLE], short[auto], short[k4]) == ("eagle-k2", "eagle-k2-auto", "eagle-k4")
    assert (short[MAKE_BENCH[4]], short[n8]) == ("suffix-n4", "suffix-n8")
    assert short[MAKE_BENCH[3]] == "ngram"


def test_policy_auto_and_two_policy_files():
    files = [EAGLE[:-1] + f",policy=benchmarks/policies/{name}.json)" for name in ("floor", "break-even")]
    short = short_labels([EAGLE, EAGLE[:-1] + ",policy=auto)", *files])
    assert sorted(short.values()) == ["eagle", "eagle-auto", "eagle-break-even", "eagle-floor"]


def test_deterministic_in_the_set_of_labels():
    labels = [*MAKE_BENCH, EAGLE.replace("topk=2", "topk=4"), "vllm:" + EAGLE]
    expected = short_labels(labels)
    for order in itertools.islice(itertools.permutations(labels), 50):
        assert short_labels(list(order)) == expected
    assert len(set(expected.values())) == len(labels)


def test_engines_folders_old_positional_labels_and_named_endpoints():
    short = short_labels(["vllm:baseline", "vllm:" + EAGLE, "baseline", EAGLE, "eagle-http"])
    assert short == {
        "vllm:baseline": "vllm:baseline",
        "vllm:" + EAGLE: "vllm:eagle",
        "baseline": "baseline",
        EAGLE: "eagle",
        "eagle-http": "eagle-http",
    }
    assert short_labels(["draft(3,auto)", "draft(4,auto)"]) == {"draft(3,auto)": "draft-3", "draft(4,auto)": "draft-4"}
    mine = EAGLE + "@my-head"
    assert short_labels([EAGLE, mine]) == {EAGLE: "eagle", mine: "eagle-my-head"}
    assert parse_label("vllm:" + EAGLE + "@127.0.0.1:8001") == ("vllm:eagle", {**parse_label(EAGLE)[1], "@": "127.0.0.1:8001"})


def test_two_labels_never_share_a_short_form():
    short = short_labels(["eagle", EAGLE, "odd label (not a spec)"])
    assert len(set(short.values())) == 3
    assert short["odd label (not a spec)"] == "odd label (not a spec)"


def test_named_policies_read_as_their_names_beside_a_file_and_auto():
    default = "eagle(num_steps=3,topk=2,num_draft_tokens=4,draft_vocab=auto,policy=shared:4)"  # today's default
    auto, off = default.replace("shared:4", "auto"), default.replace(",policy=shared:4", "")
    plain = default.replace("shared:4", "plain_above:8")
    short = short_labels([default, auto, off, plain, default.replace("shared:4", "benchmarks/policies/floor.json")])
    assert (short[default], short[auto], short[off], short[plain]) == ("eagle-shared4", "eagle-auto", "eagle", "eagle-plain_above8")
    assert short[default.replace("shared:4", "benchmarks/policies/floor.json")] == "eagle-policy"  # the one file among them
