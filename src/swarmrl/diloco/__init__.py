"""Low-communication data-parallel training: DiLoCo, Streaming DiLoCo, elastic DiLoCo on torchft.

Pieces: `DiLoCo` (outer Nesterov step around any inner optimizer, F staggered fragments), communicators
(torch.distributed, throttled WAN link, torchft), codecs (fp32, fp16, bf16, int8 with fp32 sums), and a
multi-process launcher for the tiny byte-level causal LM with a DDP baseline.

Names are imported on first use (`swarmrl.lazy_exports`): `swarmrl diloco --help` and `diloco-replica --help`
must not load torch and transformers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from swarmrl.lazy_exports import lazy_exports

_EXPORTS = {
    "CastCodec": "swarmrl.diloco.codecs",
    "Codec": "swarmrl.diloco.codecs",
    "Int8Codec": "swarmrl.diloco.codecs",
    "make_codec": "swarmrl.diloco.codecs",
    "Communicator": "swarmrl.diloco.communicators",
    "LocalCommunicator": "swarmrl.diloco.communicators",
    "SimulatedLink": "swarmrl.diloco.communicators",
    "ThrottledCommunicator": "swarmrl.diloco.communicators",
    "TorchDistCommunicator": "swarmrl.diloco.communicators",
    "load_diloco_config": "swarmrl.diloco.config_file",
    "CodecError": "swarmrl.diloco.errors",
    "CommunicatorError": "swarmrl.diloco.errors",
    "CorpusError": "swarmrl.diloco.errors",
    "DiLoCoConfigError": "swarmrl.diloco.errors",
    "DiLoCoError": "swarmrl.diloco.errors",
    "DiLoCoStateError": "swarmrl.diloco.errors",
    "launch": "swarmrl.diloco.launcher",
    "launch_many": "swarmrl.diloco.launcher",
    "all_reduce_mean_encoded": "swarmrl.diloco.reduce",
    "RunReport": "swarmrl.diloco.reports",
    "WorkerReport": "swarmrl.diloco.reports",
    "DiLoCo": "swarmrl.diloco.wrapper",
    "SyncRecord": "swarmrl.diloco.wrapper",
}

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

if TYPE_CHECKING:
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


__getattr__ = lazy_exports(__name__, _EXPORTS)
