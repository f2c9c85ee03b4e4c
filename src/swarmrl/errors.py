"""The failures a person running swarmrl can fix, as one family the command line recognises.

A missing model directory, a dataset without the columns a task needs, a port another process holds, a full
disk: raising a `UserError` (or a subclass, or an error family that derives from it) tells the CLI to print its
message as one line and exit with code 2, keeping the traceback for the log (see `swarmrl.cli.failures`). The
message must say what is wrong and where (the path, the field, host:port), since it is all the person sees.
"""

from __future__ import annotations


class UserError(Exception):
    """A failure the person running swarmrl can fix; its message is the one line they see."""


class AddressInUse(UserError):
    """A server could not listen: another process already holds host:port."""

    def __init__(self, host: str, port: int, what: str = "server") -> None:
        super().__init__(
            f"{what} cannot listen on {host}:{port}: the address is already in use "
            "(another process listens there; stop it or choose another port)"
        )
        self.host, self.port = host, port


class DiskFull(UserError):
    """Writing a file failed for lack of space (or quota) on its filesystem."""

    def __init__(self, path: object) -> None:
        super().__init__(
            f"no space left on the device holding {path}: free some space or choose another directory"
        )
        self.path = path
