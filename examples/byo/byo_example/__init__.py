"""A task of your own for swarmrl: reward functions written for TRL, a dataset, a multi-turn environment and a
loss objective."""
