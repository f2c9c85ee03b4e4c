"""The one exception family of the rollout-file boundary."""


class RolloutError(Exception):
    """A rollout file is malformed, hostile, too large, unsigned or signed by the wrong node."""
