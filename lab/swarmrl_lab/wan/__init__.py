"""An emulated wide-area network on one machine (issue 35): regions and machines as network namespaces,
kernel rate limits, user-space delay, jitter and loss, and one address per service (see `world.py`)."""
