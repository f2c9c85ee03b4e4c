"""Lets test packages share helpers: `from integration.spine.spine_helpers import ...`."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
