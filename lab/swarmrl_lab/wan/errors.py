"""The errors of the WAN emulator."""

from swarmrl.errors import UserError


class WanError(Exception):
    """Building, running or tearing down the emulated network failed; the message names the step."""


class WanUnavailable(WanError, UserError):
    """This machine cannot run the emulator (not root, a tool missing); the message says what to do."""
