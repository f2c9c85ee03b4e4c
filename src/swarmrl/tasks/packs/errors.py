"""The one error of a malformed task pack: its message names the file, the place and the problem, in one line."""

from swarmrl.tasks.errors import TaskError


class PackError(TaskError):
    """A task pack (its archive, manifest, signature, rows, references or verifier) is malformed or over a cap."""
