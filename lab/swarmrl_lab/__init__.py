"""swarmrl's lab: what tests, benchmarks and demos use and node operators do not install (lab/pyproject.toml)."""
