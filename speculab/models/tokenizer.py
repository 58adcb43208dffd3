"""Tokenizer and chat template of a local checkpoint folder.

Knows: ``tokenizer.json`` (through the ``tokenizers`` library), the chat
template (``chat_template.jinja`` or ``tokenizer_config.json``'s
``chat_template``, rendered with jinja2 in a sandbox the way transformers
does), and the stop tokens (``generation_config.json``, ``config.json`` and the
tokenizer's eos token). Does not know: slow (sentencepiece-only) tokenizers;
a folder without ``tokenizer.json`` gets a clear error.
"""

from __future__ import annotations

import json
from pathlib import Path

from jinja2.exceptions import TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment
from tokenizers import Tokenizer as HFTokenizer


def _raise(message: str) -> None:
    raise TemplateError(message)


def _read_json(path: Path) -> dict:
    return json.loads(path.read_text()) if path.exists() else {}


def _token_text(value: object) -> str | None:
    if isinstance(value, dict):  # older tokenizer_config files wrap special tokens
        return value.get("content")
    return value if isinstance(value, str) else None


class Tokenizer:
    def __init__(self, folder: str | Path):
        folder = Path(folder)
        path = folder / "tokenizer.json"
        if not path.exists():
            raise FileNotFoundError(f"{folder}: no tokenizer.json (speculab needs a fast tokenizer file)")
        self._tok = HFTokenizer.from_file(str(path))
        config = _read_json(folder / "tokenizer_config.json")
        template_file = folder / "chat_template.jinja"
        self.chat_template: str | None = template_file.read_text() if template_file.exists() else config.get("chat_template")
        self.bos_token = _token_text(config.get("bos_token"))
        self.eos_token = _token_text(config.get("eos_token"))
        self.add_bos = bool(config.get("add_bos_token", False))
        self.stop_ids = self._stop_ids(folder)

    def _stop_ids(self, folder: Path) -> frozenset[int]:
        ids: set[int] = set()
        for name in ("generation_config.json", "config.json"):
            eos = _read_json(folder / name).get("eos_token_id")
            ids.update(eos if isinstance(eos, list) else [] if eos is None else [eos])
        if self.eos_token is not None and (tid := self._tok.token_to_id(self.eos_token)) is not None:
            ids.add(tid)
        return frozenset(ids)

    @property
    def vocab_size(self) -> int:
        return self._tok.get_vocab_size(with_added_tokens=True)

    def encode(self, text: str, add_bos: bool = True) -> list[int]:
        """add_bos=False: text that continues a sequence (no BOS whatever the tokenizer's config says)."""
        ids = self._tok.encode(text, add_special_tokens=False).ids
        bos = self._tok.token_to_id(self.bos_token) if add_bos and self.add_bos and self.bos_token else None
        return ([bos] if bos is not None and ids[:1] != [bos] else []) + ids

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        return self._tok.decode(ids, skip_special_tokens=skip_special_tokens)

    def stream_decoder(self):
        """A function token_id -> new text (or None while a multi-token character is incomplete)."""
        from tokenizers.decoders import DecodeStream

        stream = DecodeStream(skip_special_tokens=True)
        return lambda token: stream.step(self._tok, token)

    def apply_chat_template(self, messages: list[dict[str, str]], add_generation_prompt: bool = True) -> str:
        if not self.chat_template:
            raise ValueError("this tokenizer has no chat template; pass a plain prompt instead")
        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
        env.globals["raise_exception"] = _raise
        template = env.from_string(self.chat_template)
        return template.render(
            messages=messages, add_generation_prompt=add_generation_prompt, bos_token=self.bos_token or "", eos_token=self.eos_token or ""
        )

    def encode_chat(self, messages: list[dict[str, str]]) -> list[int]:
        # The template already holds any special tokens, so no BOS is added on top.
        return self._tok.encode(self.apply_chat_template(messages), add_special_tokens=False).ids
