"""Pydantic configuration of task sources and rewards (the `[tasks]` section of a run config)."""

from __future__ import annotations

import math
import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from swarmrl.configs.task_packs import CommunityTasksConfig

TARGET_SHORT = [1000, 2000, 3000, 4000, 5000]
# Columns that hold a task's solve rate: ours (`swarmrl filter`), then INTELLECT-2-RL-Dataset's.
SOLVE_RATE_FIELDS = ("solve_rate", "solve_rate_qwen_r1_distill_7b")
TARGET_LONG = [2000, 4000, 6000, 8000, 10000]
# "package.module:attribute" (the attribute may be dotted: "module:Class.method"), as TRL and verl name code.
ENTRY_PATTERN = r"[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*:[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*"
SHA256_PATTERN = r"[0-9a-f]{64}"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ReasoningGymSourceConfig(_Strict):
    type: Literal["reasoning_gym"] = Field(
        "reasoning_gym", description="Discriminator: a reasoning-gym generator."
    )
    generator: str = Field(description="reasoning-gym dataset name, e.g. 'basic_arithmetic'.")
    name: str | None = Field(
        None, description="Source name used in task ids; defaults to the generator name."
    )
    weight: float = Field(1.0, gt=0, description="Relative sampling weight when sources are mixed.")
    split: Literal["train", "eval"] = Field("train", description="Which split this source serves.")
    size: int = Field(
        10_000, ge=1, le=1_000_000, description="Number of train tasks (before held-out removal)."
    )
    eval_size: int = Field(200, ge=1, le=100_000, description="Number of held-out tasks.")
    seed: int = Field(0, description="Seed of the train split generator.")
    eval_seed: int = Field(1_000_003, description="Seed of the held-out generator; must differ from `seed`.")
    generator_kwargs: dict[str, Any] = Field(
        default_factory=dict, description="Keyword arguments passed to the generator config."
    )
    prompt_template: str = Field(
        "question",
        description="'question' (the raw generator question), 'system' (reasoning-gym's default system "
        "prompt, then the question) or a format string over {question} and the entry's metadata fields, "
        "e.g. '{expression} =' for a compact arithmetic prompt.",
    )

    demonstration_template: str = Field(
        "{answer}", description="SFT reference text built from the answer, e.g. '<answer>{answer}</answer>'."
    )

    @model_validator(mode="after")
    def _seeds_differ(self) -> ReasoningGymSourceConfig:
        if self.seed == self.eval_seed:
            raise ValueError("seed and eval_seed must differ so the held-out split is a different draw")
        if self.prompt_template not in ("question", "system") and not re.search(
            r"\{\w+\}", self.prompt_template
        ):
            raise ValueError("prompt_template must be 'question', 'system' or contain a {field}")
        if "{answer}" not in self.demonstration_template:
            raise ValueError("demonstration_template must contain '{answer}'")
        return self


class DatasetSourceConfig(_Strict):
    type: Literal["dataset"] = Field("dataset", description="Discriminator: an INTELLECT-2 layout dataset.")
    name: str = Field(description="Source name used in task ids.")
    path: str | None = Field(None, description="Local .jsonl / .jsonl.gz / .parquet file.")
    hf_dataset: str | None = Field(None, description="HF hub dataset id (needs network and `datasets`).")
    hf_split: str = Field("train", description="HF split to load.")
    weight: float = Field(1.0, gt=0, description="Relative sampling weight when sources are mixed.")
    default_task_type: str | None = Field(None, description="task_type for rows that lack the column.")
    limit: int | None = Field(None, ge=1, description="Keep only the first `limit` rows.")
    solve_rate_fields: list[str] = Field(
        default_factory=lambda: list(SOLVE_RATE_FIELDS),
        min_length=1,
        description="Columns holding a task's solve rate, the first one a row has wins: 'solve_rate' (written "
        "by `swarmrl filter`), 'solve_rate_qwen_r1_distill_7b' (PrimeIntellect/INTELLECT-2-RL-Dataset); add "
        "your dataset's own, e.g. 'avg@8_qwen3_4b_instruct_2507'.",
    )

    @model_validator(mode="after")
    def _one_location(self) -> DatasetSourceConfig:
        if (self.path is None) == (self.hf_dataset is None):
            raise ValueError("set exactly one of path or hf_dataset")
        if any(not name for name in self.solve_rate_fields):
            raise ValueError("solve_rate_fields may not hold an empty name")
        return self


class ArithmeticSourceConfig(_Strict):
    type: Literal["arithmetic"] = Field(
        "arithmetic",
        description="Discriminator: multi-digit products (swarmrl.tasks.arithmetic), for the Python tool.",
    )
    name: str = Field("arithmetic", description="Source name used in task ids.")
    weight: float = Field(1.0, gt=0, description="Relative sampling weight when sources are mixed.")
    digits: int = Field(4, ge=1, le=12, description="Digits of each factor.")
    size: int = Field(10_000, ge=1, le=1_000_000, description="Number of train tasks.")
    eval_size: int = Field(200, ge=1, le=100_000, description="Number of held-out tasks.")
    seed: int = Field(0, description="Seed of the train draw.")
    eval_seed: int = Field(1_000_003, description="Seed of the held-out draw; must differ from `seed`.")

    @model_validator(mode="after")
    def _seeds_differ(self) -> ArithmeticSourceConfig:
        if self.seed == self.eval_seed:
            raise ValueError("seed and eval_seed must differ so the held-out split is a different draw")
        return self


class PromptsSourceConfig(_Strict):
    type: Literal["prompts"] = Field(
        "prompts",
        description="Discriminator: a dataset in TRL's layout, a `prompt` column (a string, or chat messages "
        "[{role, content}, ...]) and any other columns, which reach `tasks.reward_functions` as keyword "
        "arguments.",
    )
    name: str = Field(description="Source name used in task ids.")
    path: str | None = Field(
        None,
        description="A local .jsonl / .jsonl.gz / .json / .parquet file, or a directory written by datasets' "
        "`save_to_disk` (needs the `hub` extra).",
    )
    hf_dataset: str | None = Field(
        None, description="A HF hub dataset id (needs the `hub` extra and a network)."
    )
    hf_split: str = Field("train", description="Split of a hub dataset, or of a saved DatasetDict.")
    weight: float = Field(1.0, gt=0, description="Relative sampling weight when sources are mixed.")
    limit: int | None = Field(None, ge=1, description="Keep only the first `limit` rows.")
    id_column: str | None = Field(None, description="Column with a row's task id; default '<name>/<row>'.")
    demonstration_column: str | None = Field(
        None, description="Column with a reference answer for the SFT warm start (none: no SFT examples)."
    )

    @model_validator(mode="after")
    def _one_location(self) -> PromptsSourceConfig:
        if (self.path is None) == (self.hf_dataset is None):
            raise ValueError("set exactly one of path or hf_dataset")
        return self


SourceConfig = Annotated[
    ReasoningGymSourceConfig | DatasetSourceConfig | ArithmeticSourceConfig | PromptsSourceConfig,
    Field(discriminator="type"),
]


class AnswerExtractionConfig(_Strict):
    mode: Literal["auto", "think", "answer_tag", "raw"] = Field(
        "auto",
        description="Where the answer is: 'think' = text after the think-end tag; 'answer_tag' = inside the "
        "last <answer>...</answer>; 'auto' = after the think-end tag if present, then inside an answer "
        "tag if present; 'raw' = the whole completion.",
    )
    think_end_tag: str = Field("</think>", description="Tag that closes the reasoning.")
    answer_tag: str = Field("answer", description="Name of the answer tag (<answer>...</answer>).")
    require_think_end: bool = Field(False, description="Score 0 when the reasoning is never closed.")


class MathRewardConfig(_Strict):
    timeout_seconds: float = Field(5.0, gt=0, description="Wall-clock limit of one math-verify call.")
    num_workers: int = Field(2, ge=1, le=64, description="Processes in the math-verify pool.")
    start_method: Literal["spawn", "forkserver"] = Field("spawn", description="multiprocessing start method.")
    float_rounding: int = Field(6, ge=0, description="math-verify float_rounding.")
    boxed_match_priority: int = Field(
        0,
        ge=-1,
        description="math-verify LatexExtractionConfig.boxed_match_priority: 0 = a \\boxed{} answer wins over "
        "'final answer is'/'Answer:' phrases (as math-verify's test suite and open-r1 run it), 50 = "
        "math-verify's default (after those phrases), -1 = boxes are not looked for.",
    )
    multiple_answers: Literal["all", "any"] = Field(
        "all",
        description="A ground truth that lists several answers ('2, 3', '\\pm 3', 'x=1 \\text{ or } x=2'): "
        "'all' = the completion must give the same set (order free; MATH's and math-verify's reading), "
        "'any' = one of them suffices. Several ground truths in a list are always alternatives.",
    )


class CodeRewardConfig(_Strict):
    timeout_seconds: float = Field(
        10.0, gt=0, description="Wall-clock limit of one solution's sandbox session (all of a task's cases)."
    )
    cpu_seconds: int = Field(10, ge=1, description="RLIMIT_CPU of each sandboxed process.")
    memory_mb: int = Field(1024, ge=64, description="RLIMIT_AS of each sandboxed process in MiB.")
    max_processes: int = Field(
        8, ge=4, description="RLIMIT_NPROC inside the sandbox (its server, the solution's processes)."
    )
    max_output_bytes: int = Field(
        1 << 20, ge=1024, description="Largest stdout a run may print; beyond it the case fails."
    )
    max_file_bytes: int = Field(
        16 << 20, ge=0, description="RLIMIT_FSIZE: largest file the program may write."
    )
    tmpfs_mb: int = Field(64, ge=1, description="Size of the sandbox's private /tmp (its work dir) in MiB.")
    num_workers: int = Field(
        2, ge=1, le=64, description="Judge processes, i.e. sandboxes running at once in batch scoring."
    )
    isolation: Literal["auto", "bwrap", "none"] = Field(
        "auto",
        description="'bwrap' = bubblewrap namespaces, read-only minimal root, seccomp, private uid (the OS "
        "boundary); 'none' = audit hook and rlimits only (needs unsafe_no_os_isolation); 'auto' = bwrap when "
        "a probe run proves it works here, otherwise refuse (or 'none' if unsafe_no_os_isolation).",
    )
    unsafe_no_os_isolation: bool = Field(
        False,
        description="Allow running untrusted completions without OS isolation when bwrap is unavailable. "
        "The audit hook is not a security boundary: a completion can take over this machine.",
    )
    stdout_compare: Literal["lines", "tokens"] = Field(
        "lines",
        description="How a program's stdout is matched with the expected output, whitespace-normalised either "
        "way: 'lines' = the same non-blank lines, token by token (testlib's lcmp); 'tokens' = one token "
        "sequence, line breaks count as spaces (testlib's wcmp).",
    )
    stdout_float_tolerance: float = Field(
        1e-6,
        ge=0,
        le=0.5,
        description="Absolute or relative error allowed where an expected stdout token is a non-integer decimal "
        "('0.333333', '1.5e-7') and the printed one is a decimal too (testlib's rcmp6); integers and words must "
        "match exactly, and an integer printed for a decimal must equal it exactly. 0 = exact values.",
    )
    allowed_packages: list[str] = Field(
        default_factory=lambda: ["numpy"],
        description="Installed packages (import names) visible inside the sandbox besides the standard "
        "library; list dependencies too. Nothing else of the environment is mounted.",
    )

    @model_validator(mode="after")
    def _unsafe_is_explicit(self) -> CodeRewardConfig:
        if self.isolation == "none" and not self.unsafe_no_os_isolation:
            raise ValueError("isolation = 'none' needs unsafe_no_os_isolation = true")
        if any(not name.isidentifier() for name in self.allowed_packages):
            raise ValueError("allowed_packages must be import names, e.g. 'numpy'")
        return self


class LengthRewardConfig(_Strict):
    mode: Literal["none", "exact", "max", "clip"] = Field(
        "none", description="Length-target reward: exact r-a|T-L| (INTELLECT-2), max, clip, or none."
    )
    alpha: float = Field(0.0003, ge=0, description="Penalty per token of distance to the target.")
    targets: list[int] = Field(
        default_factory=lambda: list(TARGET_SHORT),
        min_length=1,
        description="Target lengths T are drawn from this list (TARGET-SHORT default).",
    )
    prompt_suffix: str = Field(
        "Think for {target} tokens.", description="Appended to the prompt; has {target}."
    )

    @model_validator(mode="after")
    def _positive_targets(self) -> LengthRewardConfig:
        if any(t <= 0 for t in self.targets):
            raise ValueError("length targets must be positive")
        if "{target}" not in self.prompt_suffix:
            raise ValueError("prompt_suffix must contain '{target}'")
        return self


def _default_sources() -> list[SourceConfig]:
    return [ReasoningGymSourceConfig(generator="basic_arithmetic")]


class TasksConfig(_Strict):
    sources: list[SourceConfig] = Field(
        default_factory=_default_sources,
        description="Task sources, mixed by their weights.",
    )
    mix_seed: int = Field(0, description="Seed of the deterministic weighted interleaving of sources.")
    solve_rate_band: tuple[float, float] | None = Field(
        None,
        description="Keep tasks whose solve_rate lies in [lo, hi] (INTELLECT-2: [0.1, 0.8]); None = all.",
    )
    extraction: AnswerExtractionConfig = Field(
        default_factory=AnswerExtractionConfig, description="Where the final answer is in a completion."
    )
    math: MathRewardConfig = Field(default_factory=MathRewardConfig, description="Math reward settings.")
    code: CodeRewardConfig = Field(default_factory=CodeRewardConfig, description="Code reward settings.")
    length: LengthRewardConfig = Field(
        default_factory=LengthRewardConfig, description="Length-target reward."
    )
    reward_functions: list[str] = Field(
        default_factory=list,
        description="Reward functions from your own modules, 'package.module:function', called as TRL calls "
        "them: f(prompts=, completions=, completion_ids=, **columns) -> list[float | None] (None: not "
        "applicable to that row). The task reward is their weighted sum over the functions that apply (0 "
        "when none does); empty: each task type's built-in verifier. Only the trainer and validators run "
        "them; workers need not have the module.",
    )
    reward_weights: list[float] | None = Field(
        None, description="One weight per reward function (default 1.0 each), as TRL's reward_weights."
    )
    reward_failure_share: float = Field(
        0.1,
        ge=0.0,
        le=1.0,
        description="The run stops, naming the function, when a reward function fails (raises, or returns "
        "something other than one number or None per completion) on more than this share of a step's "
        "completions; 1 never stops. TRL stops at the first failure.",
    )
    reward_function_hashes: dict[str, str] = Field(
        default_factory=dict,
        description="sha256 of each reward function's module source, recorded when the run is prepared "
        "(`swarmrl rl`, `sft`, `demo` or `--dry-run`) and written to the run's config.json: a trainer or "
        "validator whose module differs refuses to judge. Leave it out of a TOML you write.",
    )
    community: CommunityTasksConfig = Field(
        default_factory=CommunityTasksConfig,
        description="Task packs contributed by anyone: the caps, verifier budgets and thresholds of their "
        "admission (`swarmrl tasks check`; docs/task-packs.md).",
    )

    @model_validator(mode="after")
    def _band_ordered(self) -> TasksConfig:
        if self.solve_rate_band is not None:
            lo, hi = self.solve_rate_band
            if not 0.0 <= lo <= hi <= 1.0:
                raise ValueError("solve_rate_band must satisfy 0 <= lo <= hi <= 1")
        self._check_reward_functions()
        return self

    def _check_reward_functions(self) -> None:
        functions = self.reward_functions
        bad = [entry for entry in functions if not re.fullmatch(ENTRY_PATTERN, entry)]
        if bad:
            raise ValueError(f"reward function {bad[0]!r} is not of the form 'package.module:function'")
        if len(set(functions)) != len(functions):
            raise ValueError("reward_functions names a function twice")
        if self.reward_weights is not None and len(self.reward_weights) != len(functions):
            raise ValueError(
                f"reward_weights has {len(self.reward_weights)} weights for {len(functions)} reward functions"
            )
        if self.reward_weights is not None and not all(math.isfinite(w) for w in self.reward_weights):
            raise ValueError("reward_weights must be finite numbers")
        stray = sorted(set(self.reward_function_hashes) - set(functions))
        if stray:
            raise ValueError(f"reward_function_hashes names {stray[0]!r}, which is not in reward_functions")
        if any(not re.fullmatch(SHA256_PATTERN, h) for h in self.reward_function_hashes.values()):
            raise ValueError("reward_function_hashes values must be sha256 hex digests")

    @property
    def weights(self) -> list[float]:
        """The weight of each reward function (1.0 each unless `reward_weights` says otherwise)."""
        return (
            list(self.reward_weights)
            if self.reward_weights is not None
            else [1.0] * len(self.reward_functions)
        )
