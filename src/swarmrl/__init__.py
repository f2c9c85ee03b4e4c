"""swarmrl: asynchronous GRPO across a swarm of untrusted machines."""

__version__ = "0.1.0"
