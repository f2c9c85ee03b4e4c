"""The run config's [model] and [prompt] sections, and the shape of a tiny model built from a few numbers."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from swarmrl.configs.base import Section


class TinyModelSpec(BaseModel):
    """The few numbers that shape a tiny model; everything else takes the architecture's defaults."""

    model_config = ConfigDict(extra="forbid")  # a misspelt shape field is an error, not a silent default

    arch: Literal["qwen2", "qwen3", "llama"] = Field("qwen2", description="HF architecture family")
    hidden_size: int = Field(128, ge=8, description="width of the residual stream")
    num_layers: int = Field(4, ge=1, description="transformer blocks")
    num_heads: int = Field(4, ge=1, description="attention heads")
    num_kv_heads: int = Field(2, ge=1, description="key/value heads (grouped-query attention)")
    intermediate_size: int = Field(0, ge=0, description="MLP width; 0 means 4 × hidden_size")
    max_position_embeddings: int = Field(512, ge=16, description="longest sequence the rotary table covers")
    tie_word_embeddings: bool = Field(True, description="share the input embedding and the LM head")
    head_dim: int = Field(0, ge=0, description="width of one attention head; 0 means hidden_size / num_heads")
    vocab_size: int = Field(
        0,
        ge=0,
        description="rows of the embedding and LM head; 0 means the tokenizer's size. A published shape's "
        "larger vocabulary (Qwen: 151936) keeps the real LM-head cost; ids the tokenizer lacks decode to ''",
    )
    seed: int = Field(0, description="initialisation seed")


class ModelSection(Section):
    path: Path | None = Field(None, description="local HF model directory; when unset a tiny model is built")
    tiny: TinyModelSpec = Field(default_factory=TinyModelSpec, description="shape of the tiny model")
    tokenizer_vocab_size: int = Field(
        384, ge=260, description="vocabulary of the tokenizer trained on task text"
    )
    dtype: Literal["float32", "bfloat16"] = Field("float32", description="training and inference dtype")
    attn_implementation: Literal["sdpa", "eager"] = Field("sdpa", description="attention kernel")
    chat_template: Literal["none", "chatml"] = Field(
        "none",
        description="chat template of the tokenizer trained for a tiny model: 'chatml' is Qwen-style ChatML "
        "with <think> reasoning (use with prompt.format 'chat' or 'auto'); ignored with `path`",
    )


class PromptSection(Section):
    """How a task's text becomes the model's input; see `swarmrl.models.prompting`."""

    format: Literal["auto", "chat", "plain"] = Field(
        "auto",
        description="'chat': the tokenizer's chat template (instruct and reasoning models); 'plain': "
        "`template` as text (base models); 'auto': chat when the tokenizer has a chat template, else plain",
    )
    template: str = Field(
        "{question}\nAnswer:", description="plain format: the whole prompt, {question} is the task's prompt"
    )
    add_bos: bool = Field(
        True, description="plain format: prefix the tokenizer's BOS token (a chat template places its own)"
    )
    user_template: str = Field(
        "{question}", description="chat format: the user turn, {question} is the task's prompt"
    )
    system: str | None = Field(
        None, description="chat format: the system prompt; unset leaves the template's default (if any)"
    )
    enable_thinking: bool | None = Field(
        None,
        description="chat format: the template's thinking switch (Qwen3: false pre-fills an empty "
        "<think></think>); unset leaves the template's default",
    )
    chat_template_kwargs: dict[str, Any] = Field(
        default_factory=dict, description="chat format: further variables the chat template reads"
    )
    stop_tokens: list[str] = Field(
        default_factory=list,
        description="more tokens that end a completion, besides EOS and the chat template's end-of-turn token",
    )

    @model_validator(mode="after")
    def _check(self) -> PromptSection:
        for name in ("template", "user_template"):
            if "{question}" not in getattr(self, name):
                raise ValueError(f"prompt.{name} must contain {{question}}")
        reserved = {"enable_thinking", "messages", "add_generation_prompt", "tokenize"} & set(
            self.chat_template_kwargs
        )
        if reserved:
            raise ValueError(f"prompt.chat_template_kwargs may not set {sorted(reserved)}")
        return self
