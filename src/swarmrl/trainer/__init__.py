"""The trainer: GRPO losses, advantages, packing, the train loop, optimizer and checkpoints."""
