"""The house rules over the import graph, read statically (every import: module level, inside functions, under
TYPE_CHECKING, and transitively): no role reaches another role's code but its seams, nothing below the
orchestrators reaches them, and the configuration floor imports nothing but pydantic and the standard library.

Roles and seams as ARCHITECTURE.md draws them: roles talk through files, HTTP and the schemas in `rollouts/` and
`coordinator/api`. The floors below the roles (configs, identity, rollouts, toploc, models, tasks, inference,
httpserve ...) are the library every role may use; launch, islands and cli assemble roles and stand above them.
ARCHITECTURE.md's drawing of the floors holds every package and top-level module, each import going down one.
"""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import pytest
from doc_references import floors
from import_boundaries import ImportGraph, Role, crossings, outside_imports, rooms_of_package, upward_imports

PACKAGE = Path(__file__).resolve().parents[3] / "src" / "swarmrl"

ROLES = [
    Role("trainer", "swarmrl.trainer"),
    Role("worker", "swarmrl.worker"),
    Role("validator", "swarmrl.validator"),
    Role("diloco", "swarmrl.diloco"),
    # Environments are run by workers and replayed by the trainer and validators: built through build.py.
    Role(
        "envs",
        "swarmrl.envs",
        frozenset({"swarmrl.envs.build", "swarmrl.envs.engine_rollout", "swarmrl.envs.errors"}),
    ),
    # The coordinator service: every other role speaks to it through the client (over its signed transport,
    # whose retry policy a node sizes) and the wire schema.
    Role(
        "coordinator",
        "swarmrl.coordinator",
        frozenset(
            {
                "swarmrl.coordinator.client",
                "swarmrl.coordinator.transport",
                "swarmrl.coordinator.api",
                "swarmrl.coordinator.errors",
                # community task packs: their calls and wire schema, over the same transport
                "swarmrl.coordinator.pack_client",
                "swarmrl.coordinator.pack_api",
            }
        ),
    ),
    # The relay: nodes fetch through the client, the trainer publishes through the origin.
    Role(
        "shardcast",
        "swarmrl.shardcast",
        frozenset(
            {
                "swarmrl.shardcast.client",
                "swarmrl.shardcast.prefetch",
                "swarmrl.shardcast.origin",
                "swarmrl.shardcast.errors",
            }
        ),
    ),
]
ORCHESTRATORS = ["swarmrl.launch", "swarmrl.islands", "swarmrl.cli"]


@pytest.fixture(scope="module")
def graph() -> ImportGraph:
    return ImportGraph.read(PACKAGE)


def test_the_table_names_packages_and_seams_that_exist(graph):
    for role in ROLES:
        assert role.package in graph.edges, role.package
        assert role.seams <= graph.modules_under(role.package), role.name
    assert all(package in graph.edges for package in ORCHESTRATORS)


def test_no_role_reaches_another_roles_code_and_nothing_reaches_above_the_roles(graph):
    assert crossings(graph, ROLES, ORCHESTRATORS) == []


def test_every_package_is_on_architectures_floors_and_every_import_between_them_goes_down(graph):
    drawn = floors(PACKAGE.parents[1] / "ARCHITECTURE.md")
    rooms = [room for floor in drawn for room in floor]
    assert len(rooms) == len(set(rooms)), "a room drawn on two floors"
    assert set(rooms) == rooms_of_package(PACKAGE), (
        f"not on ARCHITECTURE.md's floors: {sorted(rooms_of_package(PACKAGE) - set(rooms))}; "
        f"on them but not in src/swarmrl: {sorted(set(rooms) - rooms_of_package(PACKAGE))}"
    )
    upward = upward_imports(drawn, graph.edges)
    assert upward == [], "move the room up ARCHITECTURE.md's floors, or the import down"


def test_the_configuration_floor_imports_only_pydantic_and_the_standard_library(graph):
    assert outside_imports(graph, "swarmrl.configs", {"pydantic"}) == []


SYNTHETIC = {
    "__init__.py": "",
    "configs/__init__.py": "from pkg.configs.run import Run\n",
    "configs/run.py": "import json\n\nimport pydantic\n\n\ndef tensor():\n    import torch\n",
    "configs/paths.py": "from pkg.models.naming import name\n",
    "models/__init__.py": "",
    "models/naming.py": "name = 'x'\n",
    "tasks/__init__.py": "",
    "tasks/helper.py": "def late():\n    from pkg.trainer.loop import step\n",
    "trainer/__init__.py": "",
    "trainer/loop.py": "from pkg.coordinator.server import app\nfrom pkg.coordinator.client import Client\n",
    "worker/__init__.py": "",
    "worker/node.py": (
        "from typing import TYPE_CHECKING\n\nfrom ..coordinator import client\n\n"
        "if TYPE_CHECKING:\n    from pkg.tasks.helper import late\n"
    ),
    "coordinator/__init__.py": "",
    "coordinator/client.py": "from pkg.coordinator import server\n",
    "coordinator/server.py": "def launch():\n    import pkg.launch.roles\n",
    "launch/__init__.py": "",
    "launch/roles.py": "from pkg.trainer.loop import step\nfrom pkg.worker import node\n",
}


def test_the_checks_see_bad_imports_in_functions_under_type_checking_and_through_the_library(tmp_path):
    for name, text in SYNTHETIC.items():
        (tmp_path / "pkg" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "pkg" / name).write_text(textwrap.dedent(text))
    graph = ImportGraph.read(tmp_path / "pkg")
    roles = [
        Role("trainer", "pkg.trainer"),
        Role("worker", "pkg.worker"),
        Role("coordinator", "pkg.coordinator", frozenset({"pkg.coordinator.client"})),
    ]

    # From the top: an import inside a function up to an orchestrator (its package runs first); a neutral module
    # reaching a role; the server, which is no seam (the client is); an import under TYPE_CHECKING, through the
    # library, into another role.
    assert crossings(graph, roles, ["pkg.launch"]) == [
        "coordinator: pkg.coordinator.server -> pkg.launch",
        "coordinator: pkg.coordinator.server -> pkg.launch.roles",
        "library: pkg.tasks.helper -> pkg.trainer.loop",
        "trainer: pkg.trainer.loop -> pkg.coordinator.server",
        "worker: pkg.worker.node -> pkg.tasks.helper -> pkg.trainer.loop",
    ]
    assert outside_imports(graph, "pkg.configs", {"pydantic"}) == [
        "pkg.configs.paths -> pkg.models",  # a parent package runs too
        "pkg.configs.paths -> pkg.models.naming",
        "pkg.configs.run -> torch",
    ]


def test_the_floors_find_an_import_up_or_sideways():
    drawn = [["launch"], ["trainer", "worker"], ["configs"]]
    edges = {
        "swarmrl.trainer.train": {"swarmrl.configs.run", "swarmrl.trainer.losses"},
        "swarmrl.configs.run": {"swarmrl.trainer.losses"},
        "swarmrl.worker.node": {"swarmrl.trainer.role", "swarmrl"},
    }
    assert upward_imports(drawn, edges) == [
        "swarmrl.configs.run imports swarmrl.trainer.losses: configs is not above trainer",
        "swarmrl.worker.node imports swarmrl.trainer.role: worker is not above trainer",
    ]


def test_swarmrl_never_imports_the_lab_but_in_the_demo_launcher():
    """The lab (lab/swarmrl_lab) is not installed on a node: no import statement of swarmrl reaches it, and
    only `demo --wan`'s launcher loads it, by name at run time (cli/launchers.py `lab_module`)."""
    importing, loading = [], []
    for path in PACKAGE.rglob("*.py"):
        text = path.read_text()
        for node in ast.walk(ast.parse(text)):
            names = [alias.name for alias in node.names] if isinstance(node, ast.Import) else []
            names += [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            if any(name.split(".")[0] == "swarmrl_lab" for name in names):
                importing.append(path.relative_to(PACKAGE).as_posix())
        if 'import_module(f"swarmrl_lab.' in text:
            loading.append(path.relative_to(PACKAGE).as_posix())
    assert importing == []
    assert loading == ["cli/launchers.py"]
