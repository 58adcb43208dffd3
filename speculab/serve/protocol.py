"""The OpenAI-compatible request bodies ``speculab serve`` accepts, and what each field may hold.

Knows: the fields of ``/v1/completions`` and ``/v1/chat/completions`` that a
client of ``vllm serve`` sends (OpenAI's, plus vLLM's ``top_k`` and
``ignore_eos``), their ranges,
and how a valid request becomes :class:`SamplingParams`. Unknown fields are
ignored, as vLLM does; a field that asks for something speculab does not do
(``n`` > 1, ``logprobs``, ``echo``, tools) is refused by name rather than
silently dropped.

Does not know: tokenizers, the engine, or HTTP status codes (``app.py``).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from speculab.sampling import SamplingParams

ROLES = ("system", "developer", "user", "assistant")


class Unsupported(ValueError):
    """A well-formed request asking for something this server does not do."""


class StreamOptions(BaseModel):
    include_usage: bool = False


class _Sampling(BaseModel):
    """Fields both endpoints share."""

    model_config = ConfigDict(extra="ignore")

    model: str
    max_tokens: Annotated[int, Field(gt=0)] | None = None
    temperature: Annotated[float, Field(ge=0)] = 1.0
    top_p: Annotated[float, Field(gt=0, le=1)] = 1.0
    top_k: Annotated[int, Field(ge=-1)] = 0  # vLLM's extra; -1 and 0 both mean "off"
    seed: int | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    stop: list[str] = Field(default_factory=list)  # a single string is taken as a list of one
    ignore_eos: bool = False
    n: Annotated[int, Field(ge=1)] = 1
    logprobs: bool | int | None = None
    best_of: int | None = None

    @field_validator("stop", mode="before")
    @classmethod
    def _stops(cls, stop):
        stops = [stop] if isinstance(stop, str) else [] if stop is None else stop
        if not isinstance(stops, list) or not all(isinstance(s, str) for s in stops):
            raise ValueError("stop must be a string or a list of strings")
        if any(s == "" for s in stops):
            raise ValueError("stop strings must not be empty")
        if len(stops) > 4:
            raise ValueError("at most 4 stop strings")
        return stops

    def refuse_unsupported(self) -> None:
        if self.n != 1 or (self.best_of or 1) != 1:
            raise Unsupported("n > 1 (several choices per request) is not supported; send n separate requests")
        if self.logprobs not in (None, False, 0):
            raise Unsupported("logprobs are not supported by speculab serve")

    def sampling(self, max_tokens: int) -> SamplingParams:
        return SamplingParams(
            max_tokens=max_tokens,
            temperature=self.temperature,
            top_p=self.top_p,
            top_k=max(self.top_k, 0),
            seed=self.seed,
            ignore_eos=self.ignore_eos,
        )

    @property
    def include_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.include_usage)


class CompletionRequest(_Sampling):
    prompt: str | list[str] | list[int] | list[list[int]]
    echo: bool = False
    suffix: str | None = None

    @field_validator("prompt")
    @classmethod
    def _one_prompt(cls, prompt):
        if isinstance(prompt, list):
            if not prompt:
                raise ValueError("prompt must not be empty")
            if isinstance(prompt[0], str | list):  # a batch of prompts
                if len(prompt) != 1:
                    raise ValueError("send one prompt per request (a list of several prompts is not supported)")
                prompt = prompt[0]
        if isinstance(prompt, str | list) and len(prompt) == 0:
            raise ValueError("prompt must not be empty")
        return prompt

    def refuse_unsupported(self) -> None:
        super().refuse_unsupported()
        if self.echo:
            raise Unsupported("echo is not supported by speculab serve")
        if self.suffix:
            raise Unsupported("suffix is not supported by speculab serve")


class TextPart(BaseModel):
    type: Literal["text"]
    text: str


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="ignore")

    role: str
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
    messages: list[ChatMessage]
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
            raise Unsupported("tools are not supported by speculab serve")

    @property
    def requested_max_tokens(self) -> int | None:
        return self.max_completion_tokens or self.max_tokens
