"""The dependency rule, enforced: om_core imports only pydantic and the standard library;
om_workers never imports om_api; the client (and the wire schemas it uses) imports only httpx,
pydantic, om_core and itself, so it installs alone; om_api never builds a Redis key itself."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CORE_ALLOWED = {"pydantic", "pydantic_core", "typing_extensions", "om_core"}


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
    for part in ("om_api/client", "om_api/schemas.py"):
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
