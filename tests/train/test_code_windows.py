"""Code windows: training data that costs the target a prefill only (tiny target, made-up source files)."""

import pytest
import torch

from speculab import runtime
from speculab.corpora.sources import Source, SourceFile
from speculab.models.llama import prefill
from speculab.train import training_prompts
from speculab.train.distill_data import data_manifest, load_features, record_code_windows
from speculab.train.training_prompts import CodeSpec
from tests.helpers import save_tiny_checkpoint

SPEC = CodeSpec(num_windows=6, window_tokens=(20, 40))


def made_up_files(domain: str) -> list[SourceFile]:
    source = Source(f"made-up-{domain}", domain, "npm", "1.0", "MIT", ("*",))
    g = torch.Generator().manual_seed(len(domain))
    files = []
    for i in range(5):
        blocks = ["def " + " ".join(f"w{t}" for t in torch.randint(4, 200, (9,), generator=g).tolist()) for _ in range(8)]
        files.append(SourceFile(source, f"f{i}.txt", "\n\n".join(blocks) + "\n"))
    return files


@pytest.fixture()
def loaded(tmp_path, monkeypatch):
    monkeypatch.setattr(training_prompts, "training_files", made_up_files)
    return runtime.load(save_tiny_checkpoint(tmp_path / "target", seed=2), dtype="float32")


def test_windows_are_assistant_turns_with_the_targets_features(loaded, tmp_path):
    windows = record_code_windows(loaded, SPEC, tmp_path / "d", batch_size=2)
    assert [w["domain"] for w in windows].count("python") == round(6 * training_prompts.DOMAIN_SHARE["python"])
    assert len({w["source"] for w in windows}) == len(windows)
    features = load_features(tmp_path / "d", windows)
    request = loaded.tokenizer.encode_chat([{"role": "user", "content": "x"}])
    for w in windows:
        ids = w["prompt_ids"] + w["response_ids"]
        assert len(w["response_ids"]) <= 1
        assert 20 <= len(w["prompt_ids"]) - len(request) <= 60  # the request, then the window
        assert features[w["id"]].shape == (len(ids) - 1, loaded.model.config.hidden_size)
    w = windows[0]
    ids = w["prompt_ids"] + w["response_ids"]
    cache = loaded.model.new_cache(1, len(ids))
    plain = torch.cat([o.hidden[0] for o in prefill(loaded.model, cache, 0, ids[:-1])])
    torch.testing.assert_close(features[w["id"]], plain, rtol=1e-4, atol=1e-4)


def test_skipped_files_stay_out_and_the_manifest_counts_windows(loaded, tmp_path):
    skip = {f.file_id for f in made_up_files("python")[:3]}
    windows = record_code_windows(loaded, SPEC, tmp_path / "d", skip_files=skip)
    assert windows and not skip & {w["source"] for w in windows}
    manifest = data_manifest([], [training_prompts.DataSpec(num_prompts=0)], windows, SPEC)
    assert manifest["code_windows"] == len(windows)
    assert manifest["code_window_tokens"] == sum(len(w["prompt_ids"]) + len(w["response_ids"]) for w in windows)
    assert set(manifest["files"]) == {w["source"] for w in windows}


def test_a_killed_run_resumes_and_other_settings_are_refused(loaded, tmp_path):
    out = tmp_path / "d"
    first = record_code_windows(loaded, CodeSpec(num_windows=6, window_tokens=(20, 40)), out, batch_size=2)
    lines = (out / "code_windows.jsonl").read_text().splitlines(keepends=True)
    (out / "code_windows.jsonl").write_text("".join(lines[:3]) + lines[3][:10])  # cut mid-line, as a kill leaves it
    again = record_code_windows(loaded, SPEC, out, batch_size=2)
    fields = lambda ws: [(w["id"], w["source"], w["prompt_ids"], w["response_ids"]) for w in ws]  # noqa: E731
    assert fields(again) == fields(first)
    before, after = load_features(out, first[:3]), load_features(out, again)
    assert all(torch.equal(before[k], after[k]) for k in before)
    with pytest.raises(ValueError, match="other settings"):
        record_code_windows(loaded, CodeSpec(num_windows=6, window_tokens=(20, 40), seed=5), out)
    assert record_code_windows(loaded, CodeSpec(num_windows=0), out) == []
