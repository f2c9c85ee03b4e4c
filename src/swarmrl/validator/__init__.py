"""The trusted checker: every rollout file is verified, and its rewards recomputed, before it can train the model."""
