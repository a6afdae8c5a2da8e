"""The dependency rule, enforced: om_core imports only pydantic and the standard library;
om_workers never imports om_api; the client (and the wire schemas it uses) imports only httpx,
pydantic, om_core and itself, so it installs alone; om_api never builds a Redis key itself.

And the house: every module of the three packages stands on a floor (:data:`FLOORS`, lowest
first), imports only from its own floor or below, and no two modules import each other,
directly or around a circle (``TYPE_CHECKING`` and function-level imports count: they are
arrows a reader follows too)."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# snowballstemmer: the search terms' Porter stemmer (pure Python, or PyStemmer's C where the
# server installs it), no I/O.
CORE_ALLOWED = {"pydantic", "pydantic_core", "typing_extensions", "snowballstemmer", "om_core"}


def _imports(package: str, depth: int = 1) -> set[tuple[str, str]]:
    """``(file name, imported module)`` for every absolute import under ``package`` (a folder
    or a module file), the module cut to its first ``depth`` dotted parts."""
    found: set[tuple[str, str]] = set()
    root = ROOT / package
    for path in [root] if root.is_file() else root.rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                found.update((path.name, _cut(alias.name, depth)) for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found.add((path.name, _cut(node.module, depth)))
    return found


def _cut(module: str, depth: int) -> str:
    return ".".join(module.split(".")[:depth])


def test_om_core_imports_only_pydantic_and_stdlib() -> None:
    stdlib = set(sys.stdlib_module_names)
    offenders = {
        (f, m) for f, m in _imports("om_core") if m not in stdlib and m not in CORE_ALLOWED
    }
    assert offenders == set()


def test_om_core_does_no_io() -> None:
    io_modules = {"socket", "subprocess", "sqlite3", "urllib", "http", "asyncio", "os", "shutil"}
    assert {(f, m) for f, m in _imports("om_core") if m in io_modules} == set()


def test_outer_packages_import_inwards_only() -> None:
    if (ROOT / "om_workers").is_dir():
        assert {m for _, m in _imports("om_workers")} & {"om_api"} == set()


def test_the_client_imports_only_what_a_client_only_install_has() -> None:
    allowed = {"httpx", "pydantic", "pydantic_core", "om_core", "om_api.client", "om_api.schemas"}
    stdlib = set(sys.stdlib_module_names)
    for part in ("om_api/client", "om_api/schemas"):
        found = {m for _, m in _imports(part, depth=2)}
        offenders = {
            m for m in found if m.split(".")[0] not in stdlib | allowed and m not in allowed
        }
        assert offenders == set(), part


def test_om_api_never_builds_redis_keys() -> None:
    # Key names, TTLs and scripts live in om_workers.coordination.keys alone; the API asks
    # om_workers functions (coalesce.flush_pending ...) instead of reading keys itself.
    keys_module = "om_workers.coordination.keys"
    offenders: set[tuple[str, str]] = set()
    for path in (ROOT / "om_api").rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                offenders |= {(path.name, a.name) for a in node.names if a.name == keys_module}
            elif isinstance(node, ast.ImportFrom) and node.module:
                if node.module == keys_module:
                    offenders.add((path.name, node.module))
                elif node.module == "om_workers.coordination":
                    offenders |= {(path.name, a.name) for a in node.names if a.name == "keys"}
            elif isinstance(node, ast.Constant) and str(node.value).startswith(
                ("om:pending", "om:lock")
            ):
                offenders.add((path.name, str(node.value)))
    assert offenders == set()


FLOORS: tuple[tuple[str, ...], ...] = (
    # om_core, pure: the ledger, then what reads it, then what writes it.
    ("om_core.errors",),
    ("om_core.ledger",),
    ("om_core.settings",),
    ("om_core.policy",),
    ("om_core.scopes",),
    ("om_core.read",),
    ("om_core.flush",),
    # The export format checks the ledger's and the scopes' records; nothing reads it back.
    ("om_core.portability",),
    ("om_core",),
    # om_workers, the adapters: each adapter, then the job bodies, the composition root, and
    # the Celery wiring that runs the jobs in a worker process.
    ("om_workers.errors", "om_workers.config", "om_workers.settings_env"),
    # Traces: below every adapter, which each open spans; imports no other adapter.
    ("om_workers.telemetry",),
    (
        "om_workers.settings_reference",
        "om_workers.heap",
        "om_workers.logs",
        "om_workers.metrics",
        "om_workers.prompts",
        "om_workers.coordination",
        "om_workers.store",
        "om_workers.providers",
        "om_workers.embeddings",
    ),
    ("om_workers.context_cache", "om_workers.tails", "om_workers.reads", "om_workers.jobs"),
    ("om_workers.services", "om_workers.doctor"),
    ("om_workers.celery",),
    ("om_workers",),
    # om_api, the edge: the wire format, the client over it, the server and what builds on the
    # client, and the command line over all of them.
    ("om_api.schemas",),
    ("om_api.client",),
    ("om_api.server", "om_api.integrations", "om_api.evaluation"),
    ("om_api.cli",),
    ("om_api",),
)
PACKAGES = ("om_core", "om_workers", "om_api")


def _module_files() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


MODULES = _module_files()


def _resolve(name: str) -> str | None:
    """The module of ours that ``name`` (a module, or a name inside one) lives in."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _arrows(module: str) -> set[str]:
    """Every module of ours that ``module`` imports, at any depth of its code."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(MODULES[module].read_text(encoding="utf-8"))):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [f"{node.module}.{alias.name}" for alias in node.names]
        for name in names:
            if name.split(".")[0] in PACKAGES and (target := _resolve(name)) is not None:
                found.add(target)
    found.discard(module)
    return found


GRAPH = {module: _arrows(module) for module in MODULES}


def _floor(module: str) -> int | None:
    """The floor of ``module``: its longest room in :data:`FLOORS`; a package's own
    ``__init__`` (``om_core`` ...) is a room of its own, never the floor of its modules."""
    best: tuple[int, int] | None = None  # (length of the matching prefix, floor)
    for level, rooms in enumerate(FLOORS):
        for room in rooms:
            inside = room not in PACKAGES and module.startswith(room + ".")
            if (module == room or inside) and (best is None or len(room) > best[0]):
                best = (len(room), level)
    return None if best is None else best[1]


def test_every_module_stands_on_a_floor() -> None:
    # A new module or folder is placed in FLOORS on purpose, never by accident.
    assert [m for m in MODULES if _floor(m) is None] == []


def test_no_arrow_runs_up() -> None:
    up = sorted(
        f"{module} -> {target}"
        for module, targets in GRAPH.items()
        for target in targets
        if (_floor(target) or 0) > (_floor(module) or 0)
    )
    assert up == []


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    circles.append(sorted(component))
    return circles


def test_no_import_circles() -> None:
    assert _circles(GRAPH) == []


@pytest.mark.parametrize(
    ("graph", "expected"),
    [
        ({"a": {"b"}, "b": set()}, []),
        ({"a": {"b"}, "b": {"a"}}, [["a", "b"]]),
        ({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}, [["a", "b", "c"]]),
        ({"a": {"b"}, "b": {"a"}, "c": {"d"}, "d": {"c"}}, [["a", "b"], ["c", "d"]]),
    ],
)
def test_the_circle_finder_finds_circles(
    graph: dict[str, set[str]], expected: list[list[str]]
) -> None:
    assert sorted(_circles(graph)) == expected


def test_the_floor_check_sees_an_arrow_up() -> None:
    # The rule the test above applies: om_core.ledger importing om_core.read would run up.
    assert (_floor("om_core.read.context") or 0) > (_floor("om_core.ledger.fold") or 0)
    assert (_floor("om_api.cli.commands") or 0) > (_floor("om_workers.celery.app") or 0)
