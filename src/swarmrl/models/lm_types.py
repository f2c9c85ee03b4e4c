"""How a causal LM and its parts are typed: by the names they answer to, not by class.

A model here is transformers' or `models.native`'s, sometimes wrapped (peft, FSDP); the code finds its parts by
name (`config`, `get_decoder()`, `model.layers`, `self_attn.q_proj`), and a transformers config's fields differ
per architecture. nn.Module types every such lookup as `Tensor | Module`, so these aliases are Any: the names
are the contract, and the tests that run both model trees hold it.
"""

from typing import Any, TypeAlias

CausalLM: TypeAlias = Any  # a causal LM: `config`, `get_decoder()`, `get_output_embeddings()`
LayerPart: TypeAlias = Any  # a decoder layer or one of its modules, reached through its attribute names
