"""The emulated internet of one run: regions, machines, links and one address per service.

    hub namespace ── bridge "core" 10.255.0.1/24 (the internet core; the operator's seat)
      ├─ veth ── region namespace (router, 10.255.0.1x): its link to the core, HTB each way
      │            ├─ bridge "lan" 10.<i+1>.0.1/24, the region's link proxy listens here
      │            ├─ veth ── machine namespace 10.<i+1>.0.<10+n>: its access link, HTB each way
      │            └─ ...
      └─ ...

Every service (coordinator, origin, relays) has one virtual address 10.254.0.<k+1> that every machine
uses. nftables in each machine's namespace DNATs it to the link proxy of the machine's region for that
service, which connects to the service's real address with the path's delay, jitter and loss (intra-region:
`intra_rtt_ms`, no loss). A machine may also connect to a machine of another region at its own address (the
trainer islands' quorum and collectives, on ports chosen at run time): the region's router redirects such a
connection to its proxy's transparent listener for the other region, which carries it over that path. In the hub the same address leads straight to the service (the operator's view,
unshaped by any path). `World` is a context manager: everything it creates is removed at exit and on failure.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from swarmrl.configs.wan import WanConfig
from swarmrl_lab.wan import netns
from swarmrl_lab.wan.errors import WanError
from swarmrl_lab.wan.link import LinkPlan, Listener, Shape

CORE = "10.255.0"
VIRTUAL = "10.254.0"
PROXY_PORT_BASE = 20000
MACHINE_INTERFACE = "eth0"  # a machine's one interface, towards its region's router
PATH_PORT_BASE = 21000  # + the destination region's index: a router's transparent listener for that region
READY_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class Machine:
    """One machine of the emulation: a namespace in a region, with its access rate (both ways)."""

    name: str
    region: str
    mbit: float


@dataclass(frozen=True)
class Service:
    """A server on a machine, reached by every machine at `url` (its virtual address)."""

    name: str
    machine: str
    port: int


@dataclass
class World:
    wan: WanConfig
    machines: list[Machine]
    services: list[Service]
    work_dir: Path
    tag: str = field(default_factory=netns.new_tag)
    proxies: list[subprocess.Popen] = field(default_factory=list)

    def __post_init__(self) -> None:
        regions = [r.name for r in self.wan.regions]
        names = [m.name for m in self.machines]
        if len(set(names)) != len(names):
            raise WanError(f"machine names repeat: {names}")
        for machine in self.machines:
            if machine.region not in regions:
                raise WanError(f"machine {machine.name} is in unknown region {machine.region}")
        for service in self.services:
            if service.machine not in names:
                raise WanError(f"service {service.name} is on unknown machine {service.machine}")
        self._machines = {m.name: m for m in self.machines}
        self._index = {name: regions.index(m.region) for name, m in self._machines.items()}

    # --- names and addresses ---------------------------------------------------------------------------
    @property
    def hub(self) -> str:
        return f"{self.tag}-hub"

    def region_namespace(self, region: str) -> str:
        return f"{self.tag}-{region}"

    def namespace(self, machine: str) -> str:
        return f"{self.tag}-m-{machine}"

    def address(self, machine: str) -> str:
        index = self._index[machine]
        same_region = [m.name for m in self.machines if self._index[m.name] == index]
        return f"10.{index + 1}.0.{10 + same_region.index(machine)}"

    def _router(self, region_index: int) -> str:
        return f"10.{region_index + 1}.0.1"

    def _vip(self, service: Service) -> str:
        return f"{VIRTUAL}.{self.services.index(service) + 1}"

    def url(self, service: str) -> str:
        """The one URL of `service` that every machine (and the operator in the hub) uses."""
        found = self._service(service)
        return f"http://{self._vip(found)}:{found.port}"

    def _service(self, name: str) -> Service:
        for service in self.services:
            if service.name == name:
                return service
        raise WanError(f"no service named {name}")

    def region_of(self, machine: str) -> str:
        return self._machines[machine].region

    def prefix(self, machine: str) -> list[str]:
        """The command prefix that runs a program on `machine`."""
        return netns.exec_prefix(self.namespace(machine))

    def operator(self):
        """Context in which the calling thread sits in the hub and reaches every service at its URL."""
        return netns.entered(self.hub)

    def shape(self, a: str, b: str) -> Shape:
        """What the path between regions a and b does to a stream (a == b: inside one region)."""
        path = self.wan.path(a, b)
        return Shape(
            one_way_s=path.rtt_ms / 2000,
            jitter_s=path.jitter_ms / 1000,
            loss=path.loss,
            mss=self.wan.mss_bytes,
            stall_s=max(self.wan.rto_min_ms, path.rtt_ms + 4 * path.jitter_ms) / 1000,
        )

    def bottleneck_mbit(self, sender: str, receiver: str) -> float:
        """The narrowest rate on the way from machine `sender` to machine `receiver`."""
        rates = [self._machines[sender].mbit, self._machines[receiver].mbit]
        a, b = self.region_of(sender), self.region_of(receiver)
        if a != b:
            rates += [self.wan.region(a).uplink_mbit, self.wan.region(b).downlink_mbit]
        return min(rates)

    # --- life cycle ----------------------------------------------------------------------------------------
    def __enter__(self) -> World:
        netns.check_available()
        netns.remove_orphans()
        try:
            self._build()
            self._start_proxies()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop the link proxies (by PID) and delete every namespace of this run (their links go with them)."""
        for proxy in self.proxies:
            if proxy.poll() is None:
                proxy.terminate()
        for proxy in self.proxies:
            try:
                proxy.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proxy.kill()
                proxy.wait(timeout=10)
        self.proxies.clear()
        netns.delete_namespaces(f"{self.tag}-")

    def _build(self) -> None:
        netns.add_namespace(self.hub)
        netns.bridge(self.hub, "core", f"{CORE}.1/24")
        for i, region in enumerate(self.wan.regions):
            ns = self.region_namespace(region.name)
            netns.add_namespace(ns)
            netns.veth(self.hub, f"r{i}", ns, "uplink")
            netns.attach(self.hub, f"r{i}", "core")
            netns.address(ns, "uplink", f"{CORE}.{10 + i}/24")
            netns.bridge(ns, "lan", f"{self._router(i)}/24")
            netns.forward(ns)
            netns.rate_limit(ns, "uplink", region.uplink_mbit)
            netns.rate_limit(self.hub, f"r{i}", region.downlink_mbit)
            netns.route(self.hub, f"10.{i + 1}.0.0/24", f"{CORE}.{10 + i}")
            others = [j for j in range(len(self.wan.regions)) if j != i]
            for j in others:
                netns.route(ns, f"10.{j + 1}.0.0/24", f"{CORE}.{10 + j}")
            netns.redirect_to_paths(ns, "lan", [(f"10.{j + 1}.0.0/24", PATH_PORT_BASE + j) for j in others])
        for n, machine in enumerate(self.machines):
            self._build_machine(n, machine)
        hub_rules = [(self._vip(s), s.port, self.address(s.machine), s.port) for s in self.services]
        netns.dnat(self.hub, hub_rules)
        # A connection needs a route to its virtual address before DNAT rewrites it to a real one.
        netns.run("ip", "-n", self.hub, "route", "add", f"{VIRTUAL}.0/24", "dev", "core")

    def _build_machine(self, n: int, machine: Machine) -> None:
        index = self._index[machine.name]
        ns, router_ns = self.namespace(machine.name), self.region_namespace(machine.region)
        netns.add_namespace(ns)
        netns.veth(router_ns, f"m{n}", ns, MACHINE_INTERFACE)
        netns.attach(router_ns, f"m{n}", "lan")
        netns.address(ns, MACHINE_INTERFACE, f"{self.address(machine.name)}/24")
        netns.route(ns, "default", self._router(index))
        netns.rate_limit(ns, MACHINE_INTERFACE, machine.mbit)
        netns.rate_limit(router_ns, f"m{n}", machine.mbit)
        rules = [
            (self._vip(s), s.port, self._router(index), PROXY_PORT_BASE + k)
            for k, s in enumerate(self.services)
        ]
        netns.dnat(ns, rules)

    def _start_proxies(self) -> None:
        logs = self.work_dir / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        ready: list[Path] = []
        for i, region in enumerate(self.wan.regions):
            listeners = [
                Listener(
                    name=f"{region.name}->{s.name}",
                    listen_host=self._router(i),
                    listen_port=PROXY_PORT_BASE + k,
                    upstream_host=self.address(s.machine),
                    upstream_port=s.port,
                    shape=self.shape(region.name, self.region_of(s.machine)),
                )
                for k, s in enumerate(self.services)
            ]
            listeners += [
                Listener(
                    name=f"{region.name}->{other.name}",
                    listen_host=self._router(i),
                    listen_port=PATH_PORT_BASE + j,
                    shape=self.shape(region.name, other.name),
                )
                for j, other in enumerate(self.wan.regions)
                if j != i
            ]
            ready_file = self.work_dir / f"link-{region.name}.ready"
            ready_file.unlink(missing_ok=True)
            plan = LinkPlan(
                listeners=listeners, window_bytes=self.wan.window_bytes, seed=i, ready_file=ready_file
            )
            plan_file = self.work_dir / f"link-{region.name}.json"
            plan_file.write_text(json.dumps(plan.model_dump(mode="json"), indent=2))
            with (logs / f"link-{region.name}.log").open("ab") as log:
                self.proxies.append(
                    subprocess.Popen(
                        [*netns.exec_prefix(self.region_namespace(region.name)), sys.executable, "-m",
                         "swarmrl_lab.wan.link", str(plan_file)],
                        stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                    )
                )  # fmt: skip
            ready.append(ready_file)
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not all(f.exists() for f in ready):
            for proxy in self.proxies:
                if proxy.poll() is not None:
                    raise WanError(f"a link proxy exited with code {proxy.returncode}; see {logs}/link-*.log")
            if time.monotonic() > deadline:
                raise WanError(f"the link proxies were not ready within {READY_TIMEOUT_S:.0f}s")
            time.sleep(0.05)
