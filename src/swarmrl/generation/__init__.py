"""Rollout generation on an engine: a batch of assigned prompts to a signed rollout file (used by worker nodes, local workers and the engine of a colocated trainer)."""
