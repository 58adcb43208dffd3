"""The OpenAI-compatible request bodies ``speculab serve`` accepts, and what each field may hold.

Knows: the fields of ``/v1/completions`` and ``/v1/chat/completions`` that a
client of ``vllm serve`` sends (OpenAI's, plus vLLM's ``top_k``, ``ignore_eos``
and ``stop_token_ids``), their ranges (every number to what the engine can
honour: a seed torch can take, finite temperatures and top_p, at most
``MAX_STOPS`` stop strings of at most ``MAX_STOP_CHARS`` characters), and how
a valid request becomes :class:`SamplingParams`.

The accepted set, three kinds:
- honoured: ``model``, ``prompt`` / ``messages``, ``max_tokens`` /
  ``max_completion_tokens``, ``temperature``, ``top_p``, ``top_k``, ``seed``,
  ``stop``, ``stop_token_ids``, ``ignore_eos``, ``stream``,
  ``stream_options.include_usage`` (and vLLM's ``continuous_usage_stats``), ``logprobs`` (completions: 0-20 top
  tokens; chat: true, with ``top_logprobs`` 0-20), speculab's ``sampling_verify``, and ``n``, ``best_of``,
  ``echo``, ``suffix``, ``tools`` at their neutral values;
- refused by name (400) unless at their neutral value, because each would change
  what is generated and speculab does not do it: ``UNSUPPORTED``'s keys
  (``response_format``, ``logit_bias``, the penalties, ``min_p``, guided
  decoding, ...), and ``n`` > 1, ``echo``, ``suffix``, ``tools``;
- ignored, as vLLM does: every other field (informational ones such as
  ``user``, ``metadata``, ``store``, ``service_tier``, ``priority``).

Also vLLM's ``/tokenize`` and ``/detokenize`` bodies (``TokenizeRequest``, ``DetokenizeRequest``).

Does not know: tokenizers, the engine, or HTTP status codes (``app.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from speculab.sampling import MAX_TOP_LOGPROBS, SEED_MAX, SEED_MIN, SamplingParams

ROLES = ("system", "developer", "user", "assistant")
MAX_PROMPTS = 64  # prompts in one completion request, each its own engine request (``several_prompts.py``)
MAX_STOPS, MAX_STOP_CHARS = 4, 512  # OpenAI's four; a stop string's length is how much text is held back


class Unsupported(ValueError):
    """A well-formed request asking for something this server does not do; ``param`` names the field."""

    def __init__(self, message: str, param: str):
        super().__init__(message)
        self.param = param


def _absent(value) -> bool:
    return value is None or value == {} or value == [] or value is False


def _equals(neutral) -> Callable[[Any], bool]:
    return lambda value: value is None or value == neutral


# Fields that would change what is generated, which speculab does not implement: refused unless neutral.
UNSUPPORTED: dict[str, Callable[[Any], bool]] = {
    "response_format": lambda v: v is None or (isinstance(v, dict) and v.get("type") == "text"),
    "logit_bias": _absent,
    "presence_penalty": _equals(0),
    "frequency_penalty": _equals(0),
    "repetition_penalty": _equals(1),
    "length_penalty": _equals(1),
    "min_p": _equals(0),
    "min_tokens": _equals(0),
    "bad_words": _absent,
    "allowed_token_ids": _absent,
    "logits_processors": _absent,
    "guided_json": _absent,
    "guided_regex": _absent,
    "guided_choice": _absent,
    "guided_grammar": _absent,
    "structured_outputs": _absent,
    "use_beam_search": _absent,
    "prompt_logprobs": _absent,
    "truncate_prompt_tokens": _absent,
    "include_stop_str_in_output": _absent,
    "skip_special_tokens": _equals(True),
    "chat_template": _absent,
    "chat_template_kwargs": _absent,
    "continue_final_message": _absent,
    "add_generation_prompt": _equals(True),
    "tool_choice": _equals("none"),
    "functions": _absent,
    "function_call": _equals("none"),
    "prediction": _absent,
    "modalities": lambda v: v is None or v == ["text"],
    "audio": _absent,
}


class StreamOptions(BaseModel):
    include_usage: bool = False
    continuous_usage_stats: bool = False  # vLLM's: with include_usage, the usage so far in every chunk


class _Sampling(BaseModel):
    """Fields both endpoints share."""

    model_config = ConfigDict(extra="allow")  # kept to refuse UNSUPPORTED by name; other extras are ignored

    model: str
    max_tokens: Annotated[int, Field(gt=0)] | None = None
    temperature: Annotated[float, Field(ge=0, allow_inf_nan=False)] = 1.0
    top_p: Annotated[float, Field(gt=0, le=1, allow_inf_nan=False)] = 1.0
    top_k: Annotated[int, Field(ge=-1)] = 0  # vLLM's extra; -1 and 0 both mean "off"
    seed: Annotated[int, Field(ge=SEED_MIN, le=SEED_MAX)] | None = None
    stop_token_ids: list[Annotated[int, Field(ge=0)]] | None = None  # vLLM's extra: stop tokens besides the model's
    stream: bool = False
    stream_options: StreamOptions | None = None
    stop: Annotated[list[Annotated[str, Field(min_length=1, max_length=MAX_STOP_CHARS)]], Field(max_length=MAX_STOPS)] = Field(
        default_factory=list
    )  # a single string is taken as a list of one
    ignore_eos: bool = False
    # speculab's: how a sampled request is drawn and verified (None: the server's --sampling-verify); "coupled" keeps a
    # seeded request's text the same under any load and setting (sampling.SAMPLING_VERIFY)
    sampling_verify: Literal["auto", "coupled", "rejection"] | None = None
    n: Annotated[int, Field(ge=1, json_schema_extra={"maximum": 1})] = 1  # n > 1 is refused in words
    logprobs: bool | int | None = None  # completions: how many top tokens (0-20); chat: whether to report them
    top_logprobs: int | None = None  # chat: how many top tokens (0-20)
    best_of: int | None = None

    @field_validator("stop", mode="before")
    @classmethod
    def _stops(cls, stop):
        stops = [stop] if isinstance(stop, str) else [] if stop is None else stop
        if not isinstance(stops, list) or not all(isinstance(s, str) for s in stops):
            raise ValueError("stop must be a string or a list of strings")
        if any(s == "" for s in stops):
            raise ValueError("stop strings must not be empty")
        if len(stops) > MAX_STOPS:
            raise ValueError(f"at most {MAX_STOPS} stop strings")
        if any(len(s) > MAX_STOP_CHARS for s in stops):
            raise ValueError(f"a stop string may have at most {MAX_STOP_CHARS} characters")
        return stops

    def refuse_unsupported(self) -> None:
        if self.n != 1 or (self.best_of or 1) != 1:
            raise Unsupported("n > 1 (several choices per request) is not supported; send n separate requests", "n")
        self.logprob_count()  # refuses a count out of range, naming its field
        for name, value in (self.model_extra or {}).items():
            if name in UNSUPPORTED and not UNSUPPORTED[name](value):
                raise Unsupported(f"{name} is not supported by speculab serve (it would change the output); leave it out", name)

    def logprob_count(self) -> int | None:
        """How many top tokens each token's logprobs list (0: the token's alone); None: no logprobs."""
        if self.logprobs is None or self.logprobs is False:
            return None
        if self.logprobs is True or not 0 <= self.logprobs <= MAX_TOP_LOGPROBS:
            raise Unsupported(f"logprobs must be an integer in [0, {MAX_TOP_LOGPROBS}]", "logprobs")
        return self.logprobs

    def sampling(self, max_tokens: int, model_stop_ids: frozenset[int], sampling_verify: str = "auto") -> SamplingParams:
        """``model_stop_ids``: the model's own stop tokens, which ``stop_token_ids`` adds to (as vLLM does); ``sampling_verify``:
        the server's ``--sampling-verify``, where the request names none."""
        stops = None
        if self.stop_token_ids:  # ignore_eos drops the model's stop tokens, not the ones asked for
            stops = (frozenset() if self.ignore_eos else model_stop_ids) | frozenset(self.stop_token_ids)
        return SamplingParams(
            max_tokens=max_tokens,
            temperature=self.temperature,
            top_p=self.top_p,
            top_k=max(self.top_k, 0),
            seed=self.seed,
            stop_token_ids=stops,
            ignore_eos=self.ignore_eos and stops is None,
            sampling_verify=self.sampling_verify or sampling_verify,
            logprobs=self.logprob_count(),
        )

    @property
    def include_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.include_usage)

    @property
    def usage_in_every_chunk(self) -> bool:
        return self.include_usage and self.stream_options.continuous_usage_stats


class CompletionRequest(_Sampling):
    prompt: (
        Annotated[str, Field(min_length=1)]
        | Annotated[list[Annotated[str, Field(min_length=1)]], Field(min_length=1, max_length=MAX_PROMPTS)]
        | Annotated[list[Annotated[int, Field(ge=0)]], Field(min_length=1)]
        | Annotated[list[Annotated[list[Annotated[int, Field(ge=0)]], Field(min_length=1)]], Field(min_length=1, max_length=MAX_PROMPTS)]
    )
    echo: bool = False
    suffix: str | None = None

    @field_validator("prompt")
    @classmethod
    def _some_prompt(cls, prompt):
        if isinstance(prompt, str | list) and len(prompt) == 0:
            raise ValueError("prompt must not be empty")
        if isinstance(prompt, list) and len(prompt) > MAX_PROMPTS and isinstance(prompt[0], str | list):
            raise ValueError(f"at most {MAX_PROMPTS} prompts in one request")
        return prompt

    def prompts(self) -> list[str | list[int]]:
        """Each prompt of the request (a text or token ids): one, or a list of several (one choice each)."""
        several = isinstance(self.prompt, list) and isinstance(self.prompt[0], str | list)
        return list(self.prompt) if several else [self.prompt]

    def refuse_unsupported(self) -> None:
        super().refuse_unsupported()
        if self.echo:
            raise Unsupported("echo is not supported by speculab serve", "echo")
        if self.suffix:
            raise Unsupported("suffix is not supported by speculab serve", "suffix")


class TextPart(BaseModel):
    type: Literal["text"]
    text: str


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="ignore")

    role: Annotated[str, Field(json_schema_extra={"enum": list(ROLES)})]  # checked below, in words
    content: str | list[TextPart] | None = None

    @field_validator("role")
    @classmethod
    def _known_role(cls, role: str) -> str:
        if role not in ROLES:
            raise ValueError(f"unknown role {role!r}; known: {', '.join(ROLES)}")
        return role

    def as_dict(self) -> dict[str, str]:
        content = self.content if isinstance(self.content, str) else "".join(p.text for p in self.content or [])
        # The chat templates of Llama-family models know "system"; OpenAI's newer "developer" role is the same thing.
        return {"role": "system" if self.role == "developer" else self.role, "content": content}


class ChatCompletionRequest(_Sampling):
    messages: Annotated[list[ChatMessage], Field(json_schema_extra={"minItems": 1})]  # checked below, in words
    max_completion_tokens: Annotated[int, Field(gt=0)] | None = None
    tools: list | None = None

    @model_validator(mode="after")
    def _some_messages(self):
        if not self.messages:
            raise ValueError("messages must not be empty")
        return self

    def refuse_unsupported(self) -> None:
        super().refuse_unsupported()
        if self.tools:
            raise Unsupported("tools are not supported by speculab serve", "tools")

    def logprob_count(self) -> int | None:
        """OpenAI's chat form: ``logprobs`` true, and ``top_logprobs`` (0-20) top tokens beside each token's."""
        if self.logprobs not in (None, True, False):
            raise Unsupported("logprobs must be true or false in a chat request (top_logprobs says how many)", "logprobs")
        top = self.top_logprobs
        if top is not None and not 0 <= top <= MAX_TOP_LOGPROBS:
            raise Unsupported(f"top_logprobs must be in [0, {MAX_TOP_LOGPROBS}]", "top_logprobs")
        if not self.logprobs:
            if top:
                raise Unsupported("top_logprobs needs logprobs: true", "top_logprobs")
            return None
        return top or 0

    @property
    def requested_max_tokens(self) -> int | None:
        return self.max_completion_tokens or self.max_tokens


class TokenizeRequest(BaseModel):
    """vLLM's ``/tokenize`` body: a ``prompt``, or chat ``messages`` put through the model's chat template."""

    model_config = ConfigDict(extra="ignore")

    model: str | None = None
    prompt: str | None = None
    messages: list[ChatMessage] | None = None
    add_special_tokens: bool | None = None  # None: vLLM's defaults, True for a prompt (the BOS), False for messages
    add_generation_prompt: bool = True
    return_token_strs: bool = False

    @model_validator(mode="after")
    def _one_input(self):
        if (self.prompt is None) == (self.messages is None):
            raise ValueError("give either prompt or messages")
        return self

    @property
    def special_tokens(self) -> bool:
        return self.add_special_tokens if self.add_special_tokens is not None else self.messages is None


class DetokenizeRequest(BaseModel):
    """vLLM's ``/detokenize`` body: token ids back to text."""

    model_config = ConfigDict(extra="ignore")

    model: str | None = None
    tokens: list[Annotated[int, Field(ge=0)]]
