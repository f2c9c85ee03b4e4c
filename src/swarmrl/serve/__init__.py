"""`swarmrl serve`: an OpenAI-compatible HTTP server over the paged engine, to evaluate a checkpoint or drive it
from an agent harness (`/v1/completions`, `/v1/chat/completions`, streaming, n, seed, logprobs, stop strings)."""
