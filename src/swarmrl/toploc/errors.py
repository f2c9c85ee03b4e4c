"""The TOPLOC boundary's exception family: every rejected proof or hidden-state tensor names its problem."""


class ProofError(ValueError):
    """Base of every error raised by `swarmrl.toploc`."""


class ProofFormatError(ProofError):
    """Proof bytes from an untrusted worker are malformed: wrong type or length, or a field outside its range."""


class HiddenStatesError(ProofError):
    """A hidden-state tensor (or a chunking parameter) can't be committed to or checked: shape, dtype, values."""
