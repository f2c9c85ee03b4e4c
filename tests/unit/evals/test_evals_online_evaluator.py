"""The trainer's online evaluator: which steps it evaluates, that it never swaps weights under a running eval,
that records reach `log` on the caller's thread, and that an eval's failure reaches the trainer."""

import threading
from types import SimpleNamespace

import pytest

from swarmrl.configs import RunConfig
from swarmrl.eval_metrics import EvalResult
from swarmrl.trainer import online_eval
from swarmrl.trainer.online_eval import OnlineEvaluator


class FakeEval:
    """Stands in for HeldOutEval: `run` blocks until released and scores the weights the engine holds."""

    def __init__(self, fail_at: int | None = None) -> None:
        self.running = threading.Event()
        self.release = threading.Event()
        self.weights_step = 0
        self.loads: list[tuple[int, bool]] = []  # (step, an eval was running)
        self.fail_at = fail_at
        self.threads: set[str] = set()
        self.engine = SimpleNamespace(load_weights=self._load)

    def _load(self, weights, *, policy_step):
        self.loads.append((policy_step, self.running.is_set()))
        self.weights_step = weights["step"]

    def run(self) -> EvalResult:
        self.running.set()
        self.threads.add(threading.current_thread().name)
        try:
            assert self.release.wait(10), "never released"
            if self.weights_step == self.fail_at:
                raise RuntimeError("eval broke")
            solved = self.weights_step // 2  # of 4 tasks, once each: a score per policy
            return EvalResult.from_counts(
                [1] * solved + [0] * (4 - solved), 1, mean_reward=0.0, mean_completion_tokens=1.0
            )
        finally:
            self.running.clear()


def make(monkeypatch, fake: FakeEval, every: int):
    monkeypatch.setattr(online_eval.HeldOutEval, "from_checkpoint", classmethod(lambda cls, *a: fake))
    config = RunConfig.model_validate({"eval": {"every_steps": every}, "trainer": {"steps": 8}})
    records: list[tuple[dict, str]] = []
    evaluator = OnlineEvaluator(
        config, None, 0, lambda r: records.append((r, threading.current_thread().name))
    )
    return evaluator, records


def test_due_steps_are_evaluated_in_order_and_logged_on_the_callers_thread(monkeypatch):
    fake = FakeEval()
    evaluator, records = make(monkeypatch, fake, every=2)
    fake.release.set()
    try:
        evaluator.policy_ready(0)
        for step in range(1, 7):
            evaluator.policy_ready(step, {"step": step})
        evaluator.finish()
    finally:
        evaluator.close()
    assert [r["step"] for r, _ in records] == [0, 2, 4, 6]
    assert [r["eval/avg@1"] for r, _ in records] == [0.0, 0.25, 0.5, 0.75]  # each scored its own weights
    assert {thread for _, thread in records} == {threading.current_thread().name}
    assert all(name.startswith("online-eval") for name in fake.threads)
    assert [step for step, _ in fake.loads] == [2, 4, 6]  # odd steps are not even copied


def test_weights_wait_for_the_running_eval(monkeypatch):
    fake = FakeEval()
    evaluator, records = make(monkeypatch, fake, every=1)
    try:
        evaluator.policy_ready(0)
        assert fake.running.wait(10)
        done = threading.Event()

        def next_policy():
            evaluator.policy_ready(1, {"step": 1})
            done.set()

        caller = threading.Thread(target=next_policy)
        caller.start()
        assert not done.wait(0.3), "policy 1 was copied in while policy 0 was being evaluated"
        fake.release.set()
        assert done.wait(10)
        caller.join(10)
        evaluator.finish()
    finally:
        fake.release.set()
        evaluator.close()
    assert fake.loads == [(1, False)]
    assert [r["step"] for r, _ in records] == [0, 1]


def test_a_failed_eval_fails_the_trainer(monkeypatch):
    fake = FakeEval(fail_at=2)
    evaluator, records = make(monkeypatch, fake, every=2)
    fake.release.set()
    try:
        evaluator.policy_ready(0)
        evaluator.policy_ready(2, {"step": 2})
        with pytest.raises(RuntimeError, match="eval broke"):
            evaluator.finish()
    finally:
        evaluator.close()
    assert [r["step"] for r, _ in records] == [0]
