"""Pydantic configuration of community task packs: what a trusted node accepts from a stranger's pack and how
it decides admission (the `[tasks.community]` section of a run config; docs/task-packs.md).

Every limit is the operator's, never the author's: a manifest cannot raise a cap, a budget or a threshold.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class PackLimitsConfig(_Strict):
    max_archive_bytes: int = Field(
        8 << 20, ge=1024, description="Largest .tar.gz pack accepted, as sent (compressed)."
    )
    max_unpacked_bytes: int = Field(
        32 << 20, ge=1024, description="Largest total size of a pack's files (an archive's members unpacked)."
    )
    max_rows: int = Field(1000, ge=1, description="Most prompt rows in one pack.")
    max_row_bytes: int = Field(
        256 << 10, ge=256, description="Longest line of prompts.jsonl or references.jsonl, in bytes."
    )
    max_prompt_chars: int = Field(
        8000, ge=16, description="Longest prompt (all chat messages together), in characters."
    )
    max_reference_chars: int = Field(16000, ge=16, description="Longest reference solution, in characters.")
    max_references_per_row: int = Field(4, ge=1, description="Most reference solutions for one row.")
    max_verifier_bytes: int = Field(64 << 10, ge=256, description="Largest verifier.py, in bytes.")
    max_columns: int = Field(16, ge=1, description="Most columns a verifier may be handed.")


class VerifierBudgetConfig(_Strict):
    """The sandbox a pack's verifier runs in: one session per judging pass, each with these limits."""

    ms_per_item: float = Field(
        20.0,
        gt=0,
        description="Wall-clock budget per scored completion: a pass over N completions gets "
        "startup_seconds + N x this, capped by pass_seconds; past it the session is killed.",
    )
    startup_seconds: float = Field(3.0, gt=0, description="Wall-clock allowance for starting one session.")
    pass_seconds: float = Field(60.0, gt=0, description="Most wall-clock seconds of one judging pass.")
    probe_items: int = Field(
        8,
        ge=1,
        description="Completions of the first, short session that must answer before the full passes.",
    )
    max_call_seconds: float = Field(
        5.0, gt=0, description="Slowest single batch call accepted (a run scores a batch in one such call)."
    )
    batch_items: int = Field(64, ge=1, le=4096, description="Most completions handed over in one call.")
    batch_bytes: int = Field(1 << 20, ge=4096, description="Largest encoded request of one call, in bytes.")
    cpu_seconds: int = Field(60, ge=1, description="RLIMIT_CPU of the verifier's process (a whole pass).")
    memory_mb: int = Field(1024, ge=64, description="RLIMIT_AS of the verifier's process in MiB.")
    max_processes: int = Field(4, ge=4, description="RLIMIT_NPROC inside the verifier's sandbox.")
    tmpfs_mb: int = Field(16, ge=1, description="Size of the verifier sandbox's private /tmp in MiB.")

    @model_validator(mode="after")
    def _frames_fit(self) -> VerifierBudgetConfig:
        # A request travels in one sandbox frame of at most 6 x max_output_bytes (see sandbox_limits).
        if self.batch_bytes > 6 << 20:
            raise ValueError("batch_bytes must be at most 6 MiB (one sandbox frame)")
        return self


class AdmissionThresholdsConfig(_Strict):
    min_reference_pass_share: float = Field(
        0.9,
        ge=0,
        le=1,
        description="solvable: share of rows some reference solution of which scores >= the manifest's "
        "pass_score.",
    )
    min_policy_pass_at_k: float = Field(
        0.3,
        ge=0,
        le=1,
        description="solvable, for a pack without references: mean pass@k of the run's policy over its rows "
        "(measured from leased rollouts).",
    )
    max_cheat_mean: float = Field(
        0.05, ge=0, le=1, description="hackable: highest mean score any one generic cheat may get."
    )
    max_answer_in_prompt_share: float = Field(
        0.05,
        ge=0,
        le=1,
        description="leaking: share of rows whose answer (answer_columns, or every expected output of its "
        "code tests) may appear in its own prompt.",
    )
    near_duplicate_jaccard: float = Field(
        0.7,
        gt=0,
        le=1,
        description="leaking: Jaccard similarity of two prompts' word 3-gram sets (template n-grams left out) "
        "from which they count as near-duplicates.",
    )
    max_overlap_share: float = Field(
        0.0,
        ge=0,
        le=1,
        description="leaking: share of rows that may near-duplicate a held-out eval or an admitted pack.",
    )
    min_informative_share: float = Field(
        0.25,
        ge=0,
        le=1,
        description="useful: share of rows whose measured solve rate under the run's policy lies in the "
        "run's solve-rate band.",
    )
    pass_k: int = Field(8, ge=1, description="useful / solvable by policy: the k of pass@k.")


class AdmissionConfig(_Strict):
    limits: PackLimitsConfig = Field(default_factory=PackLimitsConfig, description="Size caps of a pack.")
    verifier: VerifierBudgetConfig = Field(
        default_factory=VerifierBudgetConfig, description="The verifier's sandbox limits and budgets."
    )
    thresholds: AdmissionThresholdsConfig = Field(
        default_factory=AdmissionThresholdsConfig, description="Where each admission check draws its line."
    )
    seconds: float = Field(
        300.0,
        gt=0,
        description="Wall-clock budget of one pack's whole admission; a pack that needs more is refused.",
    )
    cheat_rows: int = Field(200, ge=1, description="Rows (a seeded sample) every generic cheat is scored on.")
    code_rows: int = Field(
        64, ge=1, description="Rows (a seeded sample) whose references are judged, for a code_tests pack."
    )
    code_cheat_rows: int = Field(
        8, ge=1, description="Rows (a seeded sample) the code cheats are judged on, for a code_tests pack."
    )
    long_cheat_chars: int = Field(
        20000, ge=100, description="Length of the 'very long output' cheat, in characters."
    )


class AdmissionBudgetConfig(_Strict):
    """What admitting packs may cost the run's validators, enforced by the coordinator. Keys are free, so the
    bound is never per key: an author's own allowance grows only with its accepted work, and every author
    without one shares one lane of validator time per hour, entered with a proof-of-work ticket."""

    seconds_per_accepted_row: float = Field(
        0.5,
        ge=0,
        description="Validator-seconds of admission an author earns per row of its accepted work in the run "
        "(rollout rows credited to its key, rows of its packs trained in informative groups), less what its "
        "earlier packs cost.",
    )
    newcomer_seconds_per_hour: float = Field(
        900.0,
        ge=0,
        description="Validator-seconds per rolling hour for the packs of every author without an allowance of "
        "its own, all such authors together: any number of keys share it.",
    )
    ticket_bits: int = Field(
        20,
        ge=0,
        le=32,
        description="Leading zero bits of the proof-of-work ticket every submission carries (about 2^bits "
        "SHA-256 evaluations for the submitter): a place in the newcomers' lane costs compute, not keys.",
    )
    max_pending_per_author: int = Field(
        1, ge=1, description="Packs of one author waiting for, or under, admission at once."
    )
    max_pending: int = Field(
        64,
        ge=1,
        description="Packs of the run waiting for admission at once (their archives kept meanwhile).",
    )


class RetirementConfig(_Strict):
    """When an admitted pack leaves the mix, measured on the run's own rollouts by its trusted judges."""

    window_groups: int = Field(
        64,
        ge=1,
        description="The last groups (rows) of a pack its informativeness and its verifier's failures are read "
        "on: what the trainer's filter was offered, what validators judged.",
    )
    min_groups: int = Field(
        16,
        ge=1,
        description="Groups (rows) a pack is seen in before its informativeness or its failures can retire it.",
    )
    min_informative_share: float = Field(
        0.1,
        ge=0,
        le=1,
        description="Share of those groups whose rewards differ (what the online filter keeps) below which the "
        "pack is retired: the policy always or never solves it now.",
    )
    max_failure_share: float = Field(
        0.02,
        ge=0,
        le=1,
        description="Share of the completions of its last window_groups rows its verifier failed on in the run "
        "(raised, timed out, answered out of form), above which the pack is retired (refused while on probation).",
    )
    max_disagreements: int = Field(
        0,
        ge=0,
        description="Files on which a validator and the trainer scored the same completions of the pack "
        "differently that are tolerated; one more retires it and wipes its author's unpaid credit.",
    )


class CommunityTasksConfig(_Strict):
    """Task packs contributed by anyone: whether the run takes them, their share of its tasks, what admitting
    them may cost, when they retire (`swarmrl admin create-run --config` hands these to the coordinator), and
    the caps, verifier budgets and thresholds trusted nodes admit them by (docs/task-packs.md)."""

    accept: bool = Field(
        False,
        description="Take task packs from anyone (`swarmrl tasks submit`); off: every submission is refused.",
    )
    max_share: float = Field(
        0.25,
        ge=0,
        le=1,
        description="Most of the run's work units (each one pack's or the run's own tasks) given to community "
        "packs, probation included.",
    )
    per_author_cap: float = Field(
        0.1, ge=0, le=1, description="Most of the run's work units given to the packs of one author together."
    )
    probation_share: float = Field(
        0.1,
        ge=0,
        le=1,
        description="Units given to packs on probation (passed every check but `useful`): their rows are "
        "generated, judged and measured like any, never trained on until the pack is admitted.",
    )
    probation_rows: int = Field(
        16,
        ge=1,
        description="Rows of a pack on probation measured (each one group of the run's group_size samples) "
        "before the validators' last verdict (all its rows when it has fewer).",
    )
    budget: AdmissionBudgetConfig = Field(
        default_factory=AdmissionBudgetConfig, description="What admission may cost validators."
    )
    retirement: RetirementConfig = Field(
        default_factory=RetirementConfig, description="When an admitted pack leaves the mix."
    )
    admission: AdmissionConfig = Field(
        default_factory=AdmissionConfig, description="Caps, verifier budgets and thresholds of admission."
    )

    @model_validator(mode="after")
    def _shares_fit(self) -> CommunityTasksConfig:
        if self.per_author_cap > self.max_share or self.probation_share > self.max_share:
            raise ValueError("per_author_cap and probation_share must each be at most max_share")
        return self
