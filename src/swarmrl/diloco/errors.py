"""Exception family of the DiLoCo package: one base class, one subclass per kind of failure."""


class DiLoCoError(Exception):
    """Base class of every error raised by swarmrl.diloco."""


class DiLoCoConfigError(DiLoCoError):
    """A configuration file or value is missing, malformed or inconsistent."""


class CodecError(DiLoCoError):
    """A payload cannot be encoded or decoded (wrong dtype, shape, non-finite values)."""


class CommunicatorError(DiLoCoError):
    """A collective failed, timed out or was called with tensors it cannot carry."""


class DiLoCoStateError(DiLoCoError):
    """A checkpoint does not match the model, or state was read while a sync was in flight."""


class CorpusError(DiLoCoError):
    """The training corpus could not be read or is too small for the requested batches."""
