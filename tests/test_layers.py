"""The layering of ``bridge/`` (docs/architecture.md): no import cycle, counting the imports made
inside functions too, and nothing below imports from above.

Read from the source with ``ast``, so a lazy import that closes a cycle is caught as surely as a
top-level one.
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent / "bridge"


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@cache
def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(ROOT.rglob("*.py"))}


def imported(name: str, path: Path) -> set[str]:
    """The bridge modules ``name`` imports, anywhere in its source."""
    known = modules()
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            submodules = {f"{base}.{alias.name}" for alias in node.names} & known.keys()
            # ``from package import module`` runs the module; the package's own __init__ counts
            # only when a name is taken from it
            if len(submodules) < len(node.names):
                found.add(base)
            found.update(submodules)
    return {m for m in found if m in known and m != name}


@cache
def graph() -> dict[str, frozenset[str]]:
    return {name: frozenset(imported(name, path)) for name, path in modules().items()}


def cycles(edges: dict[str, frozenset[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while (w := stack.pop()) != v:
                component.append(w)
            if component:
                found.append(sorted([v, *component]))

    for v in edges:
        if v not in index:
            visit(v)
    return found


def test_the_graph_reads_every_kind_of_import() -> None:
    # relative (hub), package-level ``from bridge import x``, and lazy imports inside functions
    assert "bridge.hub.state" in graph()["bridge.hub.fanout"]
    assert "bridge.loading.loader" in graph()["bridge.daemon"]
    assert "bridge.cli.session" in graph()["bridge.cli.cli"]


def test_no_import_cycle_even_through_lazy_imports() -> None:
    assert cycles(graph()) == []


def test_the_cycle_finder_finds_one() -> None:
    edges = {"a": frozenset({"b"}), "b": frozenset({"c"}), "c": frozenset({"a"}), "d": frozenset()}
    assert cycles(edges) == [["a", "b", "c"]]


#: the hub's stages, bottom first: each may import only those before it
HUB_STAGES = ("state", "fanout", "turns", "warm", "parking", "hub")


@pytest.mark.parametrize("stage", HUB_STAGES)
def test_a_hub_stage_imports_only_the_stages_below_it(stage: str) -> None:
    below = {f"bridge.hub.{s}" for s in HUB_STAGES[: HUB_STAGES.index(stage)]}
    stages = {f"bridge.hub.{s}" for s in HUB_STAGES}
    hub_imports = graph()[f"bridge.hub.{stage}"] & stages
    assert hub_imports <= below


#: The layers of bridge/, bottom first (docs/architecture.md, "The packages"): which modules
#: each holds (a module belongs to the longest prefix that names it) and which layers below it
#: it may import. A module imports its own layer and those listed; nothing else, nothing above.
LAYERS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    # what every layer stands on: version, helpers, logging, locations, blocks, processes
    "base": (
        ("bridge", "bridge.util", "bridge.logs", "bridge.paths", "bridge.blocks", "bridge.process"),
        (),
    ),
    "wire": (("bridge.wire", "bridge.config", "bridge.invariants"), ("base",)),
    "store": (("bridge.store",), ("base", "wire")),
    "workspace": (("bridge.workspace",), ("base", "wire")),
    "parsers": (("bridge.parsers",), ("base", "wire")),
    "handoff": (("bridge.handoff",), ("base", "wire", "parsers")),
    "adapters": (("bridge.adapters",), ("base", "wire", "parsers", "handoff")),
    "loading": (("bridge.loading",), ("base", "wire", "adapters")),
    "hub": (("bridge.hub",), ("base", "wire", "store", "parsers", "adapters", "loading")),
    # one client connection over any transport: what the request handlers are handed
    "connection": (
        ("bridge.server.transport", "bridge.server.outbox", "bridge.server.connection"),
        ("base", "wire"),
    ),
    "api": (("bridge.api",), ("base", "wire", "workspace", "loading", "hub", "connection")),
    "server": (
        ("bridge.server",),
        ("base", "wire", "store", "loading", "hub", "connection", "api"),
    ),
    "attention": (("bridge.attention",), ("base", "wire", "store", "hub", "connection", "server")),
    "relay": (("bridge.relay",), ("base", "wire", "connection", "server")),
    # the entry points: the daemon's wiring and the command line (a package's own subcommands
    # included); they import each other only where no cycle results (checked above)
    "entry": (
        (
            "bridge.__main__",
            "bridge.daemon",
            "bridge.cli",
            "bridge.attention.cli",
            "bridge.relay.cli",
            "bridge.relay.pairlink",
            "bridge.relay.service",
        ),
        (
            "base",
            "wire",
            "store",
            "workspace",
            "parsers",
            "handoff",
            "adapters",
            "loading",
            "hub",
            "connection",
            "api",
            "server",
            "attention",
            "relay",
        ),
    ),
}


def layer_of(name: str) -> str:
    best, found = "", ""
    for layer, (members, _) in LAYERS.items():
        for prefix in members:
            if (name == prefix or name.startswith(prefix + ".")) and len(prefix) > len(best):
                best, found = prefix, layer
    return found


def test_every_module_has_a_layer() -> None:
    assert {name for name in modules() if not layer_of(name)} == set()


def test_the_table_only_points_down() -> None:
    """The table itself has no cycle: a layer may import only layers listed before it."""
    order = list(LAYERS)
    for i, (layer, (_, allowed)) in enumerate(LAYERS.items()):
        assert set(allowed) <= set(order[:i]), layer


def test_nothing_imports_a_layer_the_table_does_not_allow() -> None:
    bad = {
        (name, target)
        for name, targets in graph().items()
        for target in targets
        if (a := layer_of(name)) != (b := layer_of(target)) and b not in LAYERS[a][1]
    }
    assert bad == set()


def test_the_table_catches_an_upward_import() -> None:
    assert layer_of("bridge.store.store") == "store"
    assert "hub" not in LAYERS[layer_of("bridge.store.store")][1]
    assert layer_of("bridge.server.connection") == "connection"
    assert layer_of("bridge.server.server") == "server"


#: at most this many modules directly in bridge/ (``__init__`` and ``__main__`` included): the
#: rest lives in the package named after what it is
MAX_ROOT_MODULES = 10


def test_the_root_of_bridge_holds_few_modules() -> None:
    root = sorted(p.name for p in ROOT.glob("*.py"))
    assert len(root) <= MAX_ROOT_MODULES, root


def test_server_and_doctor_do_not_import_each_other() -> None:
    assert "bridge.cli.doctor" not in graph()["bridge.server.server"]
    assert "bridge.server.server" not in graph()["bridge.cli.doctor"]


def _all_imports(path: Path) -> set[str]:
    """Every module ``path`` imports (any package), anywhere in its source."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            found.add(node.module)
    return found


#: a client connection, from its outbox to the server's requests, over any FrameTransport
CONNECTION_SIDE = (
    "bridge.server.transport",
    "bridge.server.outbox",
    "bridge.server.connection",
    "bridge.api.dispatch",
    "bridge.api.requests",
    "bridge.server.tokens",
    "bridge.server.server",
)


@pytest.mark.parametrize("name", CONNECTION_SIDE)
def test_a_connection_does_not_depend_on_websockets(name: str) -> None:
    """The relay serves virtual connections with the same code (docs/architecture.md): only
    the WebSocket edge (bridge/server/wstransport.py, bridge/server/endpoint.py) knows
    websockets."""
    imports = _all_imports(modules()[name])
    assert not {m for m in imports if m.split(".")[0] == "websockets"}
    assert "bridge.server.wstransport" not in graph()[name]


def test_the_outbox_is_sans_io() -> None:
    imports = _all_imports(modules()["bridge.server.outbox"])
    assert not imports & {"asyncio", "socket", "time", "selectors"}


#: the longest a module of bridge/ may be: past this, it holds more than one idea
MAX_MODULE_LINES = 800


def test_no_module_is_longer_than_the_limit() -> None:
    long = {
        name: n
        for name, path in modules().items()
        if (n := len(path.read_text().splitlines())) > MAX_MODULE_LINES
    }
    assert long == {}
