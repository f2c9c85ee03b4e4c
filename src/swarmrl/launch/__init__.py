"""Starts the roles of a run as processes on this machine and watches them (demo, rl, swarm)."""
