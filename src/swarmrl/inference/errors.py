"""The inference boundary's exception family: every rejected request, model or weight file names its problem."""


class InferenceError(Exception):
    """Base of every error raised by `swarmrl.inference`."""


class InvalidRequestError(InferenceError):
    """A generation request or sampling parameter is outside what the engine can honour."""


class UnsupportedModelError(InferenceError):
    """The model's LM head is not a plain projection of the final hidden state, so hidden states can't be bound."""


class EngineBusyError(InferenceError):
    """The engine was asked to change its weights while it generates, or to generate while they change."""
