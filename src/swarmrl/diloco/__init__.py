"""Low-communication data-parallel training: DiLoCo, Streaming DiLoCo, elastic DiLoCo on torchft.

Pieces: `DiLoCo` (outer Nesterov step around any inner optimizer, F staggered fragments), communicators
(torch.distributed, throttled WAN link, torchft), codecs (fp32, fp16, bf16, int8 with fp32 sums), and a
multi-process launcher for the tiny byte-level causal LM with a DDP baseline.
"""

from swarmrl.diloco.codecs import CastCodec, Codec, Int8Codec, make_codec
from swarmrl.diloco.communicators import (
    Communicator,
    LocalCommunicator,
    SimulatedLink,
    ThrottledCommunicator,
    TorchDistCommunicator,
)
from swarmrl.diloco.config_file import load_diloco_config
from swarmrl.diloco.errors import (
    CodecError,
    CommunicatorError,
    CorpusError,
    DiLoCoConfigError,
    DiLoCoError,
    DiLoCoStateError,
)
from swarmrl.diloco.launcher import launch, launch_many
from swarmrl.diloco.reduce import all_reduce_mean_encoded
from swarmrl.diloco.reports import RunReport, WorkerReport
from swarmrl.diloco.wrapper import DiLoCo, SyncRecord

__all__ = [
    "CastCodec",
    "Codec",
    "CodecError",
    "Communicator",
    "CommunicatorError",
    "CorpusError",
    "DiLoCo",
    "DiLoCoConfigError",
    "DiLoCoError",
    "DiLoCoStateError",
    "Int8Codec",
    "LocalCommunicator",
    "RunReport",
    "SimulatedLink",
    "SyncRecord",
    "ThrottledCommunicator",
    "TorchDistCommunicator",
    "WorkerReport",
    "all_reduce_mean_encoded",
    "launch",
    "launch_many",
    "load_diloco_config",
    "make_codec",
]
