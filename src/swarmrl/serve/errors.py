"""Why `swarmrl serve` has nothing to serve."""


class ServeError(Exception):
    """No checkpoint where the config points, or a model the paged engine cannot run."""
