"""A task of your own for swarmrl: reward functions written for TRL, a dataset, and a multi-turn environment."""
