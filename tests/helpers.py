"""Tiny random-weight Llama-family checkpoints built in-test (no downloads)."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from speculab.models.config import ModelConfig
from speculab.models.llama import Transformer
from speculab.models.loading import build_model, to_speculab_state
from speculab.speculative.proposer import Proposer
from speculab.speculative.tree import Draft

TINY_HF = dict(
    vocab_size=256,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=3,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=512,
    rms_norm_eps=1e-5,
    bos_token_id=1,
    eos_token_id=2,
)


KERNELS = ("pytorch", "native")  # the linear layers a target runs on: oneDNN/BLAS fp32, or native/bf16_linear.cpp


def tiny_hf_model(kind: str = "llama", seed: int = 0, bf16_weights: bool = False, **overrides):
    """A transformers model with random weights (norms and biases randomised too).

    ``bf16_weights`` rounds every weight to a bf16 number (still stored in fp32), as in any bf16
    checkpoint: speculab then runs the model on its native kernels.
    """
    import transformers

    cls_cfg, cls_model = {
        "llama": (transformers.LlamaConfig, transformers.LlamaForCausalLM),
        "qwen2": (transformers.Qwen2Config, transformers.Qwen2ForCausalLM),
        "mistral": (transformers.MistralConfig, transformers.MistralForCausalLM),
    }[kind]
    torch.manual_seed(seed)
    model = cls_model(cls_cfg(**{**TINY_HF, **overrides})).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.normal_(1.0, 0.1)
            elif "bias" in name:
                p.normal_(0.0, 0.1)
            else:
                p.normal_(0.0, 0.08)
            if bf16_weights:
                p.copy_(p.to(torch.bfloat16))
    return model


def bigram_hf_model(seed: int = 1, **overrides):
    """A tiny model whose next token depends on the current token only (attention and MLP write nothing):
    its greedy continuation applies one fixed map again and again, so it soon cycles, and a drafter can be
    right about it by construction (n-gram lookup once a cycle repeats, a trained head by learning the map)."""
    hf = tiny_hf_model("llama", seed, **overrides)
    with torch.no_grad():
        for layer in hf.model.layers:
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
    return hf


def speculab_from_hf(hf_model, prepack: bool = True) -> Transformer:
    config = ModelConfig.from_hf_dict(hf_model.config.to_dict())
    state = {k: v.detach().clone() for k, v in hf_model.state_dict().items()}
    return build_model(config, to_speculab_state(state, config), prepack=prepack)


def tiny_model(seed: int = 0, kind: str = "llama", **overrides) -> Transformer:
    return speculab_from_hf(tiny_hf_model(kind, seed, **overrides))


def bf16_kv_target(seed: int) -> tuple:
    """A tiny target (transformers twin, speculab model) on the native kernels with a bf16 KV cache and head_dim 32
    (what the AMX attention takes: on a CPU with AMX its attention runs on the tiles, elsewhere on the widened cache)."""
    hf = tiny_hf_model("llama", seed, bf16_weights=True, num_attention_heads=2, num_key_value_heads=1)
    model = speculab_from_hf(hf)
    assert model.native_layers is not None, "native kernels not built: run `make setup` (python -m speculab.native)"
    model.kv_dtype = torch.bfloat16
    return hf, model


def tiny_target(kernels: str, seed: int) -> tuple:
    """A tiny target (transformers twin, speculab model) that runs on ``kernels`` (one of KERNELS), checked."""
    from speculab.models.linear import NativeLinear

    hf = tiny_hf_model("llama", seed, bf16_weights=kernels == "native")
    model = speculab_from_hf(hf)
    native = isinstance(model.layers[0].self_attn.qkv_proj, NativeLinear)
    assert native == (kernels == "native"), "native kernels not built: run `make setup` (python -m speculab.native)"
    return hf, model


def save_tiny_checkpoint(
    folder: Path, kind: str = "llama", seed: int = 0, safe: bool = True, shard: str | None = None, **overrides
) -> Path:
    """Write a tiny HF checkpoint folder with a word-level tokenizer.json."""
    model = tiny_hf_model(kind, seed, **overrides)
    if safe:
        model.save_pretrained(folder, max_shard_size=shard or "10GB")
    else:  # transformers 5 writes safetensors only; write the legacy pickle layout by hand
        folder.mkdir(parents=True, exist_ok=True)
        model.config.save_pretrained(folder)
        state = {k: v.contiguous() for k, v in model.state_dict().items() if k != "lm_head.weight" or not model.config.tie_word_embeddings}
        if shard is None:
            torch.save(state, folder / "pytorch_model.bin")
        else:
            names = sorted(state)
            halves = {
                "pytorch_model-00001-of-00002.bin": names[: len(names) // 2],
                "pytorch_model-00002-of-00002.bin": names[len(names) // 2 :],
            }
            for file, keys in halves.items():
                torch.save({k: state[k] for k in keys}, folder / file)
            weight_map = {k: file for file, keys in halves.items() for k in keys}
            (folder / "pytorch_model.bin.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    write_tiny_tokenizer(folder, model.config.vocab_size)
    return folder


def write_tiny_tokenizer(folder: Path, vocab_size: int) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    vocab |= {f"w{i}": i for i in range(3, vocab_size)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.WordPiece(prefix="##")
    tok.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "bos_token": "<s>",
                "eos_token": "</s>",
                "chat_template": "{% for m in messages %}{{ m['role'] }} {{ m['content'] }} {% endfor %}{% if add_generation_prompt %}w3{% endif %}",
            }
        )
    )


def write_eagle_head(
    folder: Path,
    target_hf_config,
    seed: int = 0,
    fmt: str = "safetensors",
    bias: bool | None = True,
    own_embedding: bool = False,
    bf16_weights: bool = False,
) -> Path:
    """An EAGLE-1 head with random weights, written in the published layout.

    ``bf16_weights`` rounds every weight to a bf16 number (stored in fp32): on a native-kernel target the head's
    linears are then native too, and its layer runs in the C++ loop (``models/native_layers.py``).
    """
    from safetensors.torch import save_file

    g = torch.Generator().manual_seed(seed)
    c = target_hf_config
    h, inter = c.hidden_size, c.intermediate_size
    d = h // c.num_attention_heads
    q, kv = c.num_attention_heads * d, c.num_key_value_heads * d
    dtype = torch.bfloat16 if bf16_weights else torch.float32
    rnd = lambda *shape: (torch.randn(*shape, generator=g) * 0.08).to(dtype).float()  # noqa: E731
    state = {
        "fc.weight": rnd(h, 2 * h),
        "layers.0.self_attn.q_proj.weight": rnd(q, h),
        "layers.0.self_attn.k_proj.weight": rnd(kv, h),
        "layers.0.self_attn.v_proj.weight": rnd(kv, h),
        "layers.0.self_attn.o_proj.weight": rnd(h, q),
        "layers.0.mlp.gate_proj.weight": rnd(inter, h),
        "layers.0.mlp.up_proj.weight": rnd(inter, h),
        "layers.0.mlp.down_proj.weight": rnd(h, inter),
        "layers.0.post_attention_layernorm.weight": 1 + rnd(h),
    }
    if bias is not False:
        state["fc.bias"] = rnd(h)
    if own_embedding:
        state["embed_tokens.weight"] = rnd(c.vocab_size, h)
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": h,
        "intermediate_size": inter,
        "num_attention_heads": c.num_attention_heads,
        "num_key_value_heads": c.num_key_value_heads,
        "num_hidden_layers": 1,
        "vocab_size": c.vocab_size,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "max_position_embeddings": 512,
    }
    if bias is not None:
        config["bias"] = bias
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config))
    if fmt == "safetensors":
        save_file(state, str(folder / "model.safetensors"))
    else:
        torch.save(state, folder / "pytorch_model.bin")
    return folder


def write_eagle3_head(folder: Path, target_hf_config, seed: int = 0, draft_vocab_size: int = 128) -> Path:
    """An EAGLE-3 head with random weights in the published layout; the draft vocabulary is every other token."""
    from safetensors.torch import save_file

    g = torch.Generator().manual_seed(seed)
    c = target_hf_config
    h, inter, vocab = c.hidden_size, c.intermediate_size, c.vocab_size
    d = h // c.num_attention_heads
    q, kv = c.num_attention_heads * d, c.num_key_value_heads * d
    rnd = lambda *shape: torch.randn(*shape, generator=g) * 0.08  # noqa: E731
    draft_ids = torch.arange(0, 2 * draft_vocab_size, 2)  # target ids of the draft vocabulary
    t2d = torch.zeros(vocab, dtype=torch.bool)
    t2d[draft_ids] = True
    m = "midlayer."
    state = {
        "fc.weight": rnd(h, 3 * h),
        "norm.weight": 1 + rnd(h),
        "lm_head.weight": rnd(draft_vocab_size, h),
        "d2t": draft_ids - torch.arange(draft_vocab_size),
        "t2d": t2d,
        m + "hidden_norm.weight": 1 + rnd(h),
        m + "input_layernorm.weight": 1 + rnd(h),
        m + "post_attention_layernorm.weight": 1 + rnd(h),
        m + "self_attn.q_proj.weight": rnd(q, 2 * h),
        m + "self_attn.k_proj.weight": rnd(kv, 2 * h),
        m + "self_attn.v_proj.weight": rnd(kv, 2 * h),
        m + "self_attn.o_proj.weight": rnd(h, q),
        m + "mlp.gate_proj.weight": rnd(inter, h),
        m + "mlp.up_proj.weight": rnd(inter, h),
        m + "mlp.down_proj.weight": rnd(h, inter),
    }
    config = {
        "architectures": ["LlamaForCausalLMEagle3"],
        "model_type": "llama",
        "hidden_size": h,
        "intermediate_size": inter,
        "num_attention_heads": c.num_attention_heads,
        "num_key_value_heads": c.num_key_value_heads,
        "num_hidden_layers": 1,
        "vocab_size": vocab,
        "draft_vocab_size": draft_vocab_size,
        "target_hidden_size": h,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "max_position_embeddings": 512,
    }
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config))
    save_file(state, str(folder / "model.safetensors"))
    return folder


def require_peer_env(env_dir: Path, make_target: str, stamp: str = ".installed") -> None:
    """A heavy peer's environment (vLLM, llama.cpp; ``stamp``: the file that says a part of it is complete) must exist
    under `make test` (SPECULAB_REQUIRE_PEERS=1): missing, the test fails there and skips elsewhere."""
    import os

    import pytest

    if not (env_dir / stamp).exists():
        if os.environ.get("SPECULAB_REQUIRE_PEERS"):
            pytest.fail(f"no environment at {env_dir}: `make test` makes it with `make {make_target}`")
        pytest.skip(f"no environment at {env_dir}: run `make {make_target}`")


class Oracle(Proposer):
    """Drafts the next ``k`` tokens of a known continuation; with ``decoys``, each depth also carries wrong siblings
    (placed before the right node, so the verifier must find it)."""

    name = "oracle"

    def __init__(self, futures: dict[tuple, list[int]], k: int, decoys: int = 0):
        self.futures, self.k, self.decoys = futures, k, decoys
        self.max_draft_tokens = k * (1 + decoys)

    def propose(self, state):
        return [self._draft(r) for r in state.requests]

    def _draft(self, request) -> Draft:
        future = self.futures[tuple(request.prompt_ids)]
        done = len(request.output_ids)
        right = future[done : done + self.k]
        tokens, parents, parent = [], [], -1
        for token in right:
            for d in range(self.decoys):
                tokens.append((token + 1 + d) % 256)  # a wrong sibling under the same parent
                parents.append(parent)
            tokens.append(token)
            parents.append(parent)
            parent = len(tokens) - 1
        return Draft(torch.tensor(tokens, dtype=torch.long), torch.tensor(parents, dtype=torch.long))
