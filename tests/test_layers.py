"""The dependency rule, enforced: om_core imports only pydantic and the standard library;
om_workers never imports om_api."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CORE_ALLOWED = {"pydantic", "pydantic_core", "typing_extensions", "om_core"}


def _imports(package: str) -> set[tuple[str, str]]:
    found: set[tuple[str, str]] = set()
    for path in (ROOT / package).rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                found.update((path.name, alias.name.split(".")[0]) for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found.add((path.name, node.module.split(".")[0]))
    return found


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
