"""DDP baseline: gradients averaged every step through a communicator, so bytes and link delays are counted.

No `from __future__ import annotations` here: DDP checks the hook's annotations at runtime.
"""

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from swarmrl.diloco.communicators.base import Communicator


def _all_reduce_bucket(
    communicator: Communicator, bucket: dist.GradBucket
) -> torch.futures.Future[torch.Tensor]:
    # Blocking on purpose: the throttled link has to charge the transfer where the real wait would happen.
    buffer = communicator.all_reduce_mean(bucket.buffer())
    future: torch.futures.Future[torch.Tensor] = torch.futures.Future()
    future.set_result(buffer)
    return future


def attach_counting_hook(model: DistributedDataParallel, communicator: Communicator) -> None:
    """Route DDP's gradient buckets through `communicator` (fp32 all-reduce mean, bytes counted)."""
    model.register_comm_hook(state=communicator, hook=_all_reduce_bucket)
