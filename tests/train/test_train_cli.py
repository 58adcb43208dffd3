"""``speculab train eagle|draft`` end to end on a tiny target with a ready data cache (no sources needed)."""

import json
import re
import shutil
from collections import Counter

import pytest
import torch
from safetensors.torch import load_file, save_file

from speculab.cli import main
from speculab.models.draft_vocab import load_token_ranking
from speculab.models.eagle3_head import load_eagle3_head
from speculab.models.eagle_head import load_eagle_head
from speculab.models.loading import load_model
from speculab.train.training_prompts import DataSpec, long_context
from tests.helpers import save_tiny_checkpoint
from tests.train.test_eagle_train import sequences_with_features


@pytest.fixture(scope="module")
def target_and_data(tmp_path_factory):
    root = tmp_path_factory.mktemp("train")
    target = save_tiny_checkpoint(root / "target", seed=1)
    data = root / "data"
    data.mkdir()
    items = sequences_with_features(load_model(target), n=4)
    records, tensors = [], {}
    for i, (ids, feats) in enumerate(items):
        records.append(
            {
                "id": f"train-{i:05d}",
                "domain": "python",
                "task": "refactor",
                "source": f"cpython-stdlib@3.11.7:x{i}.py",
                "prompt_ids": ids[:40],
                "response_ids": ids[40:],
                "temperature": 0.0,
                "features_file": "f.safetensors",
            }
        )
        tensors[f"train-{i:05d}"] = feats.contiguous()
    save_file(tensors, data / "f.safetensors")
    (data / "sequences.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    spec = DataSpec(num_prompts=4, response_tokens=24)
    (data / "spec.json").write_text(json.dumps(spec.__dict__))
    return target, data


@pytest.mark.parametrize("kind", ["eagle", "eagle3", "draft"])
def test_train_writes_a_loadable_drafter_card_and_manifest(target_and_data, tmp_path, capsys, kind):
    target, data = target_and_data
    out = tmp_path / kind
    extra = {
        "draft": ["--hidden-size", "32", "--layers", "1", "--intermediate-size", "64"],
        "eagle": ["--ranking-source-chars", "0"],
        "eagle3": [
            "--ranking-source-chars",
            "0",
            "--draft-vocab",
            "64",
            "--ttt-steps",
            "3",
            "--train-on",
            "answers",
            "--feature-noise",
            "0.05",
        ],
    }[kind]
    args = [
        "train",
        kind,
        "--target",
        str(target),
        "--out",
        str(out),
        "--data-dir",
        str(data),
        "--num-prompts",
        "4",
        "--response-tokens",
        "24",
        "--steps",
        "4",
        "--checkpoint-every",
        "2",
        "--batch-tokens",
        "256",
        "--eval-prompts",
        "0",
        *extra,
    ]
    assert main(args) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["steps"] == 4
    for name in ("README.md", "loss.png", "manifest.json", "training_files.json", "model.safetensors", "config.json"):
        assert (out / name).exists(), name
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["command"].startswith(f"speculab train {kind}") and "model.safetensors" in manifest["files"]
    assert manifest["data"]["num_sequences"] == 4
    assert json.loads((out / "training_files.json").read_text()) == [f"cpython-stdlib@3.11.7:x{i}.py" for i in range(4)]
    if kind == "eagle":
        target_model = load_model(target)
        load_eagle_head(out, target_model)
        ranking = load_token_ranking(out, target_model.config.vocab_size)
        counts = Counter(
            t for r in map(json.loads, (data / "sequences.jsonl").read_text().splitlines()) for t in r["prompt_ids"] + r["response_ids"]
        )
        assert ranking.tolist() == sorted(counts, key=lambda t: (-counts[t], t))  # the data's tokens by falling frequency
        assert "draft_vocab.safetensors" in manifest["files"]
    elif kind == "eagle3":
        assert load_eagle3_head(out, load_model(target), prepack=False).lm_head.weight.shape[0] == 64
        assert (data / "eagle3-features" / "f.safetensors").exists()  # trained on cached features, the default
        assert (manifest["settings"]["feature_noise"], manifest["settings"]["features"]) == (0.05, "cached")
    else:
        assert load_model(out).config.num_layers == 1
    # a resumed run with a larger step budget continues from the saved step
    assert main([*args[: args.index("--steps") + 1], "6", *args[args.index("--steps") + 2 :], "--resume"]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["steps"] == 6
    commands = json.loads((out / "manifest.json").read_text())["commands"]
    assert len(commands) == 2 and commands[1].endswith("--resume") and not commands[0].endswith("--resume")
    assert f"Earlier run, continued by the next: `{commands[0]}`" in (out / "README.md").read_text()


def _train_args(kind, target, data, out, steps="4", *extra):
    sizes = ["--hidden-size", "32", "--layers", "1", "--intermediate-size", "64"] if kind == "draft" else ["--ranking-source-chars", "0"]
    return [
        "train",
        kind,
        "--target",
        str(target),
        "--out",
        str(out),
        "--data-dir",
        str(data),
        "--num-prompts",
        "4",
        "--response-tokens",
        "24",
        "--steps",
        steps,
        "--batch-tokens",
        "256",
        "--eval-prompts",
        "0",
        *sizes,
        *extra,
    ]


def test_prompt_seeds_read_every_seeds_folder(target_and_data, tmp_path, capsys):
    """A second prompt seed's data sits in DATA_DIR-seed1; its ids repeat the first set's, its features differ."""
    target, data = target_and_data
    base = tmp_path / "data"
    shutil.copytree(data, base)
    other = tmp_path / "data-seed1"
    shutil.copytree(data, other)
    records = [json.loads(line) for line in (other / "sequences.jsonl").read_text().splitlines()]
    for r in records:
        r["source"] = r["source"].replace(".py", "_b.py")
    (other / "sequences.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    (other / "spec.json").write_text(json.dumps(DataSpec(num_prompts=4, response_tokens=24, seed=1).__dict__))
    out = tmp_path / "eagle"
    assert main(_train_args("eagle", target, base, out, "2", "--prompt-seeds", "0", "1")) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["data"]["num_sequences"] == 8 and manifest["data"]["prompt_seeds"] == [0, 1]
    assert len(json.loads((out / "training_files.json").read_text())) == 8  # both seeds' files
    assert manifest["settings"]["prompt_seeds"] == [0, 1] and manifest["data"]["spec"]["num_prompts"] == 4
    # a seed folder made with other settings is refused, naming it
    (other / "spec.json").write_text(json.dumps(DataSpec(num_prompts=5, response_tokens=24, seed=1).__dict__))
    capsys.readouterr()
    assert main(_train_args("eagle", target, base, tmp_path / "again", "2", "--prompt-seeds", "0", "1")) == 2
    assert "data-seed1 holds data made with other settings" in capsys.readouterr().err  # reported like any CLI error


def test_long_prompts_are_read_from_their_own_folder_with_the_files_they_quote(target_and_data, tmp_path, capsys):
    """Agent-length prompts sit in DATA_DIR-long, drawn up to what the target's positions hold after the answer."""
    target, data = target_and_data
    base = tmp_path / "data"
    shutil.copytree(data, base)
    long = tmp_path / "data-long"
    shutil.copytree(data, long)
    records = [json.loads(line) for line in (long / "sequences.jsonl").read_text().splitlines()]
    for n, r in enumerate(records):
        r["context_files"] = [f"cpython-stdlib@3.11.7:quoted{n}.py", "cpython-stdlib@3.11.7:shared.py"]
    (long / "sequences.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    spec = DataSpec(num_prompts=4, response_tokens=24, kind="long", context_tokens=long_context(512, 24))  # the tiny target's 512
    assert spec.context_tokens == (212, 424)
    (long / "spec.json").write_text(json.dumps(spec.__dict__))
    out = tmp_path / "draft"
    assert main(_train_args("draft", target, base, out, "2", "--long-prompts", "4")) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["data"]["num_sequences"] == 8 and manifest["data"]["long_prompts"] == 4
    files = json.loads((out / "training_files.json").read_text())
    assert len(files) == 4 + 5 and "cpython-stdlib@3.11.7:shared.py" in files  # the tasks' files and those quoted
    assert "- 4 of the sequences agent-length prompts" in (out / "README.md").read_text()
    (long / "spec.json").write_text(json.dumps({**spec.__dict__, "context_tokens": [100, 200]}))
    capsys.readouterr()
    assert main(_train_args("draft", target, base, tmp_path / "again", "2", "--long-prompts", "4")) == 2
    assert "data-long holds data made with other settings" in capsys.readouterr().err


@pytest.mark.parametrize("kind", ["eagle", "eagle3", "draft"])
def test_init_starts_from_a_trained_drafter(target_and_data, tmp_path, capsys, kind):
    target, data = target_and_data
    first = tmp_path / "first"
    # an EAGLE-3 head keeps the --init head's draft vocabulary, whatever --draft-vocab says
    vocab = ["--draft-vocab", "40", "--ttt-steps", "2"] if kind == "eagle3" else []
    assert main(_train_args(kind, target, data, first, "4", *vocab)) == 0
    # both EAGLE heads ship a token ranking for draft_vocab; this draft model's loss covers the whole vocabulary
    assert (first / "draft_vocab.safetensors").exists() == (kind != "draft")
    # one step at learning rate 0 changes nothing: the saved weights are the starting ones, bit for bit
    second = tmp_path / "second"
    assert main(_train_args(kind, target, data, second, "1", "--lr", "0", "--init", str(first), *vocab[2:])) == 0
    a, b = load_file(first / "model.safetensors"), load_file(second / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    manifest = json.loads((second / "manifest.json").read_text())
    assert len(manifest["commands"]) == 2 and "--init" in manifest["commands"][1]  # the first run's command comes first
    assert f"Started from the weights of `{first}`" in (second / "README.md").read_text()


def test_init_with_other_sizes_names_the_tensor(target_and_data, tmp_path, capsys):
    target, data = target_and_data
    first = tmp_path / "first"
    assert main(_train_args("draft", target, data, first, "1")) == 0
    args = _train_args("draft", target, data, tmp_path / "wider", "1", "--init", str(first))
    args[args.index("--hidden-size") + 1] = "48"
    capsys.readouterr()
    assert main(args) == 2
    assert re.search(r"speculab: error: --init .*first: tensor .* has shape", capsys.readouterr().err)


def test_a_reduced_draft_model_ships_its_ranking_and_the_benchmark_uses_it(target_and_data, tmp_path, capsys):
    from speculab import runtime
    from speculab.methods import parse_method, proposer_options

    target, data = target_and_data
    out = tmp_path / "draft"
    assert main(_train_args("draft", target, data, out, "2", "--draft-vocab", "32", "--negatives", "8", "--ranking-source-chars", "0")) == 0
    assert "draft_vocab.safetensors" in json.loads((out / "manifest.json").read_text())["files"]
    loaded = runtime.load(str(target), "float32")
    ranking = load_token_ranking(out, loaded.model.config.vocab_size)
    options = proposer_options(parse_method(f"draft:draft={out}"), loaded)  # draft_vocab=auto
    assert torch.equal(options["kept_token_ids"], ranking[:8192])
    assert "kept_token_ids" not in proposer_options(parse_method(f"draft:draft={out},draft_vocab=none"), loaded)


def test_eagle3_trains_online_without_a_feature_cache(target_and_data, tmp_path, capsys):
    target, shared = target_and_data
    data = tmp_path / "data"
    shutil.copytree(shared, data, ignore=shutil.ignore_patterns("eagle3-features"))
    out = tmp_path / "eagle3"
    assert main(_train_args("eagle3", target, data, out, "3", "--draft-vocab", "64", "--ttt-steps", "2", "--features", "online")) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["steps"] == 3
    assert not (data / "eagle3-features").exists()
    assert json.loads((out / "manifest.json").read_text())["settings"]["features"] == "online"


def test_card_notes_are_appended_to_the_card_as_given(target_and_data, tmp_path, capsys):
    target, data = target_and_data
    notes = tmp_path / "why.md"
    notes.write_text("## Why this shape\n\n| shape | c |\n|---|---|\n| 192 × 3 | 0.078 |\n")
    out = tmp_path / "draft"
    assert main(_train_args("draft", target, data, out, "1", "--card-notes", str(notes))) == 0
    card = (out / "README.md").read_text()
    assert "## Why this shape\n\n| shape | c |\n|---|---|\n| 192 × 3 | 0.078 |\n" in card
    assert card.index("## Why this shape") > card.index("## Acceptance")  # after what the trainer measured
    # a notes file that is not there is refused before any training, naming the flag and the file
    capsys.readouterr()
    assert main(_train_args("draft", target, data, tmp_path / "again", "1", "--card-notes", str(tmp_path / "nope.md"))) == 2
    assert f"--card-notes {tmp_path / 'nope.md'}: no such file" in capsys.readouterr().err
    assert not (tmp_path / "again").exists()
