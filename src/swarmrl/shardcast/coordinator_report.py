"""A relay's heartbeat to its run's coordinator: it joins the run as a node and reports where it sits in the
SHARDCAST tree and what it holds (`Relay.status`), so `/dashboard` can draw the tree and each version's spread.

Optional and best-effort: a relay serves its downstream whether or not the coordinator hears from it, except
that a relay given another run's contract stops (`ContractMismatch`): its config is not the run's.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

from swarmrl.configs.contract import ContractSection
from swarmrl.coordinator.client import MemberClient
from swarmrl.coordinator.errors import CoordinatorError
from swarmrl.coordinator.transport import SHORT_RETRY
from swarmrl.identity import Identity
from swarmrl.shardcast.relay import Relay

log = logging.getLogger(__name__)
RETRY_S = 5.0  # wait after a failed join or heartbeat
REJOIN = {"not_registered", "not_member", "ejected"}  # a heartbeat refused for these: join again


async def report_forever(
    relay: Relay, url: str, coordinator_url: str, run_id: str, key: Path, contract: ContractSection
) -> None:
    """Join `run_id` as the node of `key` with the run config's `contract`, then send `relay.status(url)` with
    every heartbeat until cancelled."""
    with MemberClient.at(coordinator_url, Identity.load_or_create(key), retry=SHORT_RETRY) as client:
        joined = False
        while True:
            delay = RETRY_S
            try:
                if not joined:
                    await asyncio.to_thread(client.register, {"role": "relay"})
                    await asyncio.to_thread(client.join, run_id, contract, role="relay")
                    joined = True
                ack = await asyncio.to_thread(client.heartbeat, run_id, relay=relay.status(url))
                delay = ack.next_heartbeat_s
            except CoordinatorError as exc:
                log.warning("relay: no report to the coordinator: %s", exc)
                joined = joined and not (isinstance(exc, CoordinatorError) and exc.kind in REJOIN)
            await asyncio.sleep(delay)
