"""The coordinator: a trusted HTTP service (FastAPI + SQLAlchemy) and the signed client every role uses."""

from swarmrl.coordinator.client import CoordinatorClient
from swarmrl.coordinator.config import CoordinatorConfig
from swarmrl.coordinator.errors import CoordinatorError
from swarmrl.coordinator.seeds import task_seed

__all__ = ["CoordinatorClient", "CoordinatorConfig", "CoordinatorError", "task_seed"]
