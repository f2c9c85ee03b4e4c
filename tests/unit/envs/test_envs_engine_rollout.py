"""Multi-turn episodes on the real engine: environment tokens go into the prefill, and the validator's
prefill of the whole interleaved sequence reproduces the model tokens' logprobs and TOPLOC proofs."""

import dataclasses

import torch
from unit.envs.envs_testkit import CountdownEnv, task
from unit.inference.inference_testkit import tiny_model, tiny_tokenizer

from swarmrl.envs import RolloutLimits, run_episodes
from swarmrl.envs.engine_rollout import engine_generator, trajectory_row, turn_seed
from swarmrl.inference.engine import SamplingParams
from swarmrl.inference.prefill import prefill
from swarmrl.inference.torch_engine import TorchEngine
from swarmrl.rollouts import RolloutLimits as RowLimits
from swarmrl.rollouts.io import _check_row
from swarmrl.rollouts.schema import RolloutHeader
from swarmrl.toploc import verify_proofs_batch

TEMPERATURE = 1.0


@dataclasses.dataclass
class TinyCodec:
    """Plain text turns on the tiny tokenizer; half the vocabulary stops a turn so turns stay short."""

    tokenizer: object
    stop_token_ids: tuple[int, ...]

    def first_ids(self, question):
        return self.tokenizer(question, add_special_tokens=False).input_ids

    def env_ids(self, message):
        return self.tokenizer(f" {message}", add_special_tokens=False).input_ids

    def model_text(self, ids):
        return self.tokenizer.decode(list(ids))


def test_engine_episodes_verify_like_single_turn_rows():
    torch.manual_seed(0)
    tokenizer, model = tiny_tokenizer(), tiny_model()
    codec = TinyCodec(tokenizer, tuple(range(3, len(tokenizer), 2)))
    params = SamplingParams(max_new_tokens=12, temperature=TEMPERATURE, stop_token_ids=codec.stop_token_ids)
    seeds = [101, 202, 303, 404]
    engine = TorchEngine(model)
    sizes = []
    base = engine_generator(engine, params, seeds)

    def generate(rows, prefixes, budgets):
        sizes.append(len(rows))
        return base(rows, prefixes, budgets)

    envs = [CountdownEnv() for _ in seeds]
    trajectories = run_episodes(
        envs,
        [task(i) for i in range(4)],
        list(range(4)),
        generate,
        codec,
        RolloutLimits(max_turns=3, max_tokens=48),
    )
    assert any(t.model_turns >= 2 for t in trajectories), [t.end_reason for t in trajectories]
    assert sizes[0] == 4 and sizes == sorted(sizes, reverse=True)
    rows = [
        trajectory_row(
            t,
            policy_step=0,
            task_id=f"t{i}",
            prompt_index=i,
            group_id=0,
            sample_seed=seeds[i],
            temperature=TEMPERATURE,
        )
        for i, t in enumerate(trajectories)
    ]
    header = RolloutHeader("run", "node", 0, 0)
    limits = RowLimits(max_completion_tokens=48, vocab_size=len(tokenizer))
    for i, row in enumerate(rows):
        _check_row("f", i, row, header, limits)
    results = prefill(
        model, [r.prompt_ids for r in rows], [r.completion_ids for r in rows], temperature=TEMPERATURE
    )
    masks = [torch.tensor(r.model_mask, dtype=torch.bool) for r in rows]
    reports = verify_proofs_batch(
        [r.proofs for r in rows], [res.hidden_states[m] for res, m in zip(results, masks, strict=True)]
    )
    assert all(report.ok for report in reports), [report.reason for report in reports]
    for row, result, mask in zip(rows, results, masks, strict=True):
        assert torch.allclose(torch.tensor(row.logprobs)[mask], result.logprobs[mask], atol=1e-3)

    # A tool output edited after the fact changes the model tokens' context: their proofs no longer verify.
    # The row edited is the one with the most model tokens after its first environment token, so most of
    # its committed hidden states see the edit (one changed state in six is within TOPLOC's tolerance).
    def after_first_env(row):
        return sum(row.model_mask[row.model_mask.index(0) :]) if 0 in row.model_mask else 0

    multi = max(range(len(rows)), key=lambda i: after_first_env(rows[i]))
    assert after_first_env(rows[multi]) * 2 > rows[multi].model_token_count, [r.model_mask for r in rows]
    edited = list(rows[multi].completion_ids)
    env_at = rows[multi].model_mask.index(0)
    edited[env_at] = (edited[env_at] + 1) % len(tokenizer)
    (forged,) = prefill(model, [rows[multi].prompt_ids], [edited], temperature=TEMPERATURE)
    (report,) = verify_proofs_batch([rows[multi].proofs], [forged.hidden_states[masks[multi]]])
    assert not report.ok


def test_turn_seeds_differ_per_turn_and_row():
    assert len({turn_seed(s, t) for s in (1, 2) for t in range(3)}) == 6
    assert turn_seed(5, 1) == turn_seed(5, 1)
