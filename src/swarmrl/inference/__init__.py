"""Generation engines with seeded sampling and hidden-state capture, and the prefill that checks them."""

from swarmrl.inference.config import EngineConfig, PagedEngineConfig, TorchEngineConfig
from swarmrl.inference.engine import (
    HIDDEN_STATE_DTYPE,
    FinishReason,
    Generation,
    GenerationRequest,
    InferenceEngine,
    SamplingParams,
)
from swarmrl.inference.errors import (
    InferenceError,
    InvalidRequestError,
    UnsupportedModelError,
    WeightLoadError,
)
from swarmrl.inference.factory import build_engine
from swarmrl.inference.paged.engine import PagedEngine
from swarmrl.inference.prefill import PrefillResult, completion_logprobs, prefill
from swarmrl.inference.sampler import (
    choice_margins,
    gumbel_noise,
    logprobs_of,
    sample_tokens,
    sampling_log_probs,
)
from swarmrl.inference.torch_engine import TorchEngine

__all__ = [
    "HIDDEN_STATE_DTYPE",
    "EngineConfig",
    "FinishReason",
    "Generation",
    "GenerationRequest",
    "InferenceEngine",
    "InferenceError",
    "InvalidRequestError",
    "PagedEngine",
    "PagedEngineConfig",
    "PrefillResult",
    "SamplingParams",
    "TorchEngine",
    "TorchEngineConfig",
    "UnsupportedModelError",
    "WeightLoadError",
    "build_engine",
    "choice_margins",
    "completion_logprobs",
    "gumbel_noise",
    "logprobs_of",
    "prefill",
    "sample_tokens",
    "sampling_log_probs",
]
