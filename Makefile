# make demo · make test · make bench — each installs what it needs into .venv first.
VENV      ?= .venv
PY        := $(VENV)/bin/python
PIP       := $(PY) -m pip
STAMP     := $(VENV)/.installed
BENCH     := $(VENV)/.installed-bench
TORCH     := torch==2.13.0
# The CPU wheel of torch lies on local disk on our machines; naming it first keeps pip from ever
# resolving a CUDA build while it installs the other dependencies.
WHEELS    := $(wildcard /opt/wheels)
FINDLINKS := $(if $(WHEELS),--find-links $(WHEELS),--index-url https://download.pytorch.org/whl/cpu --extra-index-url https://pypi.org/simple)

.PHONY: install install-bench postgres sandbox-deps browser-deps wan-deps test test-swarm test-fast test-gpu demo demo-swarm bench lint docs clean

$(STAMP): pyproject.toml lab/pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PY) -c "import torch" 2>/dev/null || $(PIP) install -q $(FINDLINKS) "$(TORCH)"
	$(PIP) install -q $(FINDLINKS) -e '.[dev]'
	# The lab (lab/): the WAN emulator, the test coordinator, the cheating worker; tests, benchmarks and
	# demos use it, node operators never install it.
	$(PIP) install -q $(FINDLINKS) -e lab
	# The reference TOPLOC package is the byte-format oracle of the proof tests; built against our torch.
	$(PIP) install -q --no-build-isolation --no-binary toploc toploc==0.1.6
	$(PY) -c "import torch; assert torch.version.cuda is None or torch.cuda.is_available(), 'a CUDA torch was installed on a CPU machine'"
	touch $@

install: $(STAMP)

$(BENCH): $(STAMP)
	$(PIP) install -q $(FINDLINKS) -e '.[bench]'
	touch $@

install-bench: $(BENCH)

# The coordinator's test suite also runs against a real PostgreSQL server that the tests start on loopback.
postgres:
	@ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || \
	  { (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null) || \
	    echo "postgresql could not be installed: the Postgres variant of the coordinator tests will say so"; }

# The code reward's sandbox (README: "What the code sandbox allows"): bubblewrap for the namespaces, libseccomp
# for its seccomp filter, setpriv (util-linux) to drop root to a private uid. Without them it refuses to run.
sandbox-deps:
	@{ command -v bwrap && command -v setpriv && ldconfig -p | grep -q libseccomp.so.2; } >/dev/null 2>&1 || \
	  { (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap libseccomp2 util-linux >/dev/null) || \
	    echo "bubblewrap/libseccomp2 could not be installed: the code reward will refuse to run untrusted code"; }

# The dashboard's browser test drives Debian's chromium headless (selenium, with the system chromedriver).
# Without them that test fails saying so; deselect it on purpose with -m "not browser".
browser-deps:
	@{ command -v chromium && command -v chromedriver; } >/dev/null 2>&1 || \
	  { (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null) || \
	    echo "chromium/chromium-driver could not be installed: the dashboard browser test will fail saying so"; }

# Tests run on parallel workers (pytest-xdist), three for every two cores: with one per core the CPU is 80% busy,
# the suite waiting on emulated links, servers and pages; with three it is 91-93% busy, but each worker also
# collects the whole suite (2026-12-07, 2 cores, back to back: 462 s against 481 s, and 525 s against 490 s; a
# few per cent on average, RESULTS.md). Tests marked `timing` time an emulated link from user space; they run
# beside at most cores - 1 others, as with one worker per core (tests/cpu_slots.py). Each worker starts with a
# contiguous share of the suite (a module's fixtures, a built model or a prepared run, are mostly made once) and,
# once it runs out, takes half of what another has left (worksteal), so no worker idles while one still holds a
# queue. Tests that start processes bind OS-chosen ports and network namespaces of their own. TEST_WORKERS=0
# runs everything here.
TEST_WORKERS ?= $(shell echo $$(( $$(nproc) * 3 / 2 )))
PYTEST := $(PY) -m pytest -q -p no:cacheprovider -n $(TEST_WORKERS) --dist worksteal

# The WAN emulator (`demo --wan`, README: "The swarm across an emulated WAN"): network namespaces, HTB rates (`ip`,
# `tc` from iproute2) and DNAT to the link proxies (`nft` from nftables). Its tests need root as well.
wan-deps:
	@{ command -v ip && command -v tc && command -v nft; } >/dev/null 2>&1 || \
	  { (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq iproute2 nftables >/dev/null) || \
	    echo "iproute2/nftables could not be installed: the WAN emulator and its tests will say so"; }

# Every test but the swarm tier: unit, integration and adversarial, the slow ones (two-rank training, kill and
# resume, sandbox escapes, long fuzzing, the dashboard in a browser) included.
test: install postgres sandbox-deps browser-deps wan-deps
	$(PYTEST) -m "not swarm" tests

# The swarm tier (marked `swarm`): whole swarms, islands and DiLoCo replicas as processes with real faults,
# each many processes with deadlines, so one at a time. CI runs it after `make test` (.ci/run).
test-swarm: install postgres sandbox-deps wan-deps
	$(PY) -m pytest -q -p no:cacheprovider -m swarm tests

# The edit loop: every test not marked slow.
test-fast: install sandbox-deps
	$(PYTEST) -m "not slow" tests

# The tests that need a CUDA device (marked gpu: compiled FlexAttention, CUDA graphs, the compiled sampler,
# device-side TOPLOC, a colocated run sharing the GPU). On a GPU machine without this venv:
# make test-gpu NO_INSTALL=1 PY=python3
test-gpu: $(if $(NO_INSTALL),,install)
	$(PY) -m pytest -q -p no:cacheprovider -m gpu tests/unit/inference tests/unit/toploc \
		tests/integration/spine/test_spine_colocated.py \
		tests/integration/spine/test_spine_devices.py

demo: install sandbox-deps
	$(VENV)/bin/swarmrl demo @configs/demo.toml

demo-swarm: install sandbox-deps
	$(VENV)/bin/swarmrl demo --swarm @configs/demo-swarm.toml

bench: install-bench sandbox-deps
	$(PY) benchmarks/rl_throughput.py
	$(PY) benchmarks/async_speedup.py
	$(PY) benchmarks/toploc_bench.py
	$(PY) benchmarks/shardcast_bench.py
	$(PY) benchmarks/diloco_bench.py --quick
	$(PY) benchmarks/sandbox_bench.py

# ruff's rules and formatting, then mypy over src/ (pyproject's [tool.mypy]): CI runs this first (.ci/run).
lint: install
	$(VENV)/bin/ruff check src lab tests benchmarks
	$(VENV)/bin/ruff format --check src lab tests benchmarks
	$(PY) -m mypy

# The configuration reference (docs/configuration.md and the README's table of sections), rendered from the
# config models; tests/unit/spine/test_spine_config_reference.py fails when they differ.
docs: install
	$(PY) -m swarmrl.configs.reference

clean:
	rm -rf runs .pytest_cache
