"""llama-server's command for each way of decoding: the flags that choose the speculation, loopback and the threads."""

from pathlib import Path

import pytest

from speculab.compare.llama_server import LlamaServerSpec, llama_server_command


def spec(**kw) -> LlamaServerSpec:
    return LlamaServerSpec(binary=Path("/opt/llama-server"), target=Path("/m/target.gguf"), threads=2, port=8123, **kw)


def flags(command) -> dict[str, str | None]:
    return {f.name: f.value for f in command.flags}


def test_plain_decoding_speculates_with_nothing_and_listens_on_loopback_only():
    command = llama_server_command(spec())
    got = flags(command)
    assert command.argv[0] == "/opt/llama-server" and command.url == "http://127.0.0.1:8123"
    assert got["--host"] == "127.0.0.1" and got["-m"] == "/m/target.gguf" and got["-np"] == "1"
    assert got["-t"] == got["-tb"] == "2"
    assert not any(name.startswith("--spec") or name == "-md" for name in got)


def test_the_draft_model_drafts_the_given_length_on_the_targets_threads():
    got = flags(llama_server_command(spec(spec_type="draft-simple", draft=Path("/m/draft.gguf"), draft_max=5)))
    assert got["--spec-type"] == "draft-simple" and got["-md"] == "/m/draft.gguf" and got["--spec-draft-n-max"] == "5"
    assert got["-td"] == got["-tbd"] == "2"


def test_lookup_uses_a_fixed_ngram_and_drafts_the_given_length():
    got = flags(llama_server_command(spec(spec_type="ngram-simple", ngram_size=4, draft_max=6)))
    assert got["--spec-type"] == "ngram-simple"
    assert got["--spec-ngram-simple-size-n"] == "4" and got["--spec-ngram-simple-size-m"] == "6"
    assert "-md" not in got


def test_a_draft_model_without_a_draft_lookup_without_its_size_and_an_unknown_type_are_refused():
    with pytest.raises(ValueError, match="draft GGUF"):
        llama_server_command(spec(spec_type="draft-simple"))
    with pytest.raises(ValueError, match="n-gram's size"):
        llama_server_command(spec(spec_type="ngram-simple"))
    with pytest.raises(ValueError, match="draft-simple or ngram-simple here, not 'eagle'"):
        llama_server_command(spec(spec_type="eagle"))


def test_every_flag_says_why_it_is_there():
    command = llama_server_command(spec(spec_type="draft-simple", draft=Path("/m/d.gguf")))
    assert all(f.why for f in command.flags)
    assert "--spec-type draft-simple" in command.shell()
