"""The reward-function pins a swarm's trainer ships inside every checkpoint it publishes (`swarmrl_pins.json`),
so that a validator started from the same `run.toml` the trainer was prepared from — which records no pins —
can check its own code against the run's: the file travels in the checkpoint's signed manifest, so a relay
cannot change it, and the validator refuses in one line, naming the function, when its code differs.
"""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path

from swarmrl.configs.tasks import SHA256_PATTERN, TasksConfig
from swarmrl.rundir import write_json_atomic
from swarmrl.tasks.reward_functions import WHAT, RewardFunctionError, pin_reward_functions

log = logging.getLogger(__name__)

PINS_FILE = "swarmrl_pins.json"
MAX_PINS_BYTES = 1 << 20


def write_pins(checkpoint: Path, tasks: TasksConfig) -> None:
    """The run's pins into a checkpoint directory, before it is published."""
    write_json_atomic(checkpoint / PINS_FILE, {"reward_function_hashes": tasks.reward_function_hashes})


def read_pins(checkpoint: Path) -> dict[str, str] | None:
    """{entry: sha256} the trainer shipped in `checkpoint`, or None when it shipped none (an older trainer);
    RewardFunctionError when the file is malformed."""
    path = checkpoint / PINS_FILE
    if not path.is_file():
        return None
    try:
        if path.stat().st_size > MAX_PINS_BYTES:
            raise ValueError("too large")
        pins = json.loads(path.read_text())["reward_function_hashes"]
        if not isinstance(pins, dict) or not all(
            isinstance(k, str) and isinstance(v, str) and re.fullmatch(SHA256_PATTERN, v)
            for k, v in pins.items()
        ):
            raise ValueError("not {entry: sha256}")
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise RewardFunctionError(f"{path}: the trainer's pins cannot be read ({exc})") from exc
    return pins


def adopt_local_pins(tasks: TasksConfig) -> bool:
    """A config with reward functions but no pins (a run.toml, not the run's config.json) takes the hashes of
    the code here; True when it did, and they must then be checked against the trainer's (`check_pins`)."""
    if not tasks.reward_functions or tasks.reward_function_hashes:
        return False
    tasks.reward_function_hashes = pin_reward_functions(tasks)
    log.info(
        "reward functions pinned from the code here; checked against the trainer's once its policy arrives"
    )
    return True


def check_pins(tasks: TasksConfig, checkpoint: Path, adopted: bool) -> None:
    """The pins of the config (or of the code here, `adopted`) against those the trainer shipped in
    `checkpoint`: RewardFunctionError naming the first function that differs or that only one side has."""
    shipped = read_pins(checkpoint)
    if shipped is None:
        if adopted:
            raise RewardFunctionError(
                f"{checkpoint}: the trainer's checkpoint carries no {PINS_FILE}, so this config's reward functions "
                "cannot be checked against the run's: give the run's config.json (`swarmrl sft` wrote it)"
            )
        return
    ours = tasks.reward_function_hashes
    for entry in sorted(set(ours) | set(shipped)):
        if entry not in shipped:
            raise RewardFunctionError(f"{WHAT} {entry!r} is not one of the run's (its trainer scores with "
                                      f"{', '.join(sorted(shipped)) or 'none'})")  # fmt: skip
        if entry not in ours:
            raise RewardFunctionError(
                f"the run's trainer scores with {WHAT} {entry!r}, which this config lacks"
            )
        if ours[entry] != shipped[entry]:
            raise RewardFunctionError(
                f"{WHAT} {entry!r}: the source here (sha256 {ours[entry][:12]}…) differs from the one the run's "
                f"trainer pinned (sha256 {shipped[entry][:12]}…); install the run's version to judge its work"
            )
