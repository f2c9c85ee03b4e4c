"""The one exception family of the task/reward boundary."""

from swarmrl.errors import UserError


class TaskError(UserError):
    """A task source, dataset row or task configuration is malformed or inconsistent."""


class RewardError(TaskError):
    """A reward could not be computed for reasons that are not the completion's fault (setup, config)."""


class SandboxError(RewardError):
    """The code sandbox itself failed (could not start, isolation setup broke), not the program."""


class VerifierTimeout(RewardError):
    """A verification call ran past its wall-clock limit; its worker was killed and replaced."""


class VerifierCrash(RewardError):
    """A verification call raised or its worker died while handling one input (the input's fault)."""
