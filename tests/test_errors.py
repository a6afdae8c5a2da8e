"""One exception tree: every error class the three packages define descends from
``ObservationalMemoryError``, no error class name is defined twice, the tree's drawing in
``om_core.errors`` names every one, and the categories keep their meaning across the API
(the status the server answers a category with is the same category on the client)."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import inspect
import pkgutil
import re
from collections import defaultdict
from pathlib import Path
from types import ModuleType

import httpx
import pytest

from om_api.client.core import Call, error_for
from om_api.server.errors import STATUS_BY_ERROR, classify
from om_core import errors as core
from om_workers import errors as workers

PACKAGES = ("om_core", "om_workers", "om_api")

NOT_IMPORTABLE = {
    "om_workers.store.migrations.env": "alembic's script: it runs only inside alembic's context",
}
"""Modules the walk cannot import, by why; each must define no class (checked from source)."""

OUTSIDE_THE_TREE = {
    "om_api.server.app._BodyTooLarge": (
        "a FastAPI HTTPException: FastAPI re-raises only those from a body read and turns any "
        "other error into a 400, so the 413 would be lost"
    ),
    "om_api.server.hot_routes._NotHot": (
        "not an error: the hot layer's signal, never raised out of it, that the framework "
        "answers this request"
    ),
    "om_workers.store.driver._Disconnected": (
        "not an error: the driver's signal, never raised out of it, that SQLAlchemy's own path "
        "must run the statement (and fail, invalidating the pool)"
    ),
}
"""Error classes that may not descend from the root, by why."""


def _modules() -> list[ModuleType]:
    found: list[ModuleType] = []
    for package in PACKAGES:
        root = importlib.import_module(package)
        found.append(root)
        for info in pkgutil.walk_packages(root.__path__, f"{package}."):
            # ``__main__`` modules run the command line when imported.
            if info.name.rsplit(".", 1)[-1] == "__main__" or info.name in NOT_IMPORTABLE:
                continue
            found.append(importlib.import_module(info.name))
    return found


def _error_classes() -> list[type[BaseException]]:
    classes: list[type[BaseException]] = []
    for module in _modules():
        for value in vars(module).values():
            if (
                inspect.isclass(value)
                and issubclass(value, BaseException)
                and value.__module__ == module.__name__
            ):
                classes.append(value)
    return classes


def _name(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


ERRORS = _error_classes()


def test_the_walk_sees_every_package() -> None:
    modules = {cls.__module__.split(".")[0] for cls in ERRORS}
    assert modules == set(PACKAGES)
    assert len(ERRORS) > 80


def test_modules_left_out_of_the_walk_define_no_class() -> None:
    for name in NOT_IMPORTABLE:
        spec = importlib.util.find_spec(name)
        assert spec is not None and spec.origin is not None, name
        tree = ast.parse(Path(spec.origin).read_text(encoding="utf-8"))
        assert not [n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)], name


def test_every_error_descends_from_the_root() -> None:
    outside = {_name(c) for c in ERRORS if not issubclass(c, core.ObservationalMemoryError)}
    assert outside == set(OUTSIDE_THE_TREE)


def test_no_error_class_name_is_defined_twice() -> None:
    where: dict[str, set[str]] = defaultdict(set)
    for cls in ERRORS:
        where[cls.__qualname__].add(cls.__module__)
    assert {name: modules for name, modules in where.items() if len(modules) > 1} == {}


def test_the_drawing_names_every_error() -> None:
    drawing = core.__doc__ or ""
    missing = {
        _name(c)
        for c in ERRORS
        if not re.search(rf"\b{re.escape(c.__qualname__)}\b", drawing)
        and _name(c) not in OUTSIDE_THE_TREE
    }
    assert missing == set()


def _error(cls: type[BaseException]) -> BaseException:
    # ``classify`` reads the type alone (and a store error's cause, which is ``None`` here);
    # a few classes take other arguments than a message.
    return cls.__new__(cls)


@pytest.mark.parametrize(
    ("cls", "answer"),
    [
        (core.InvalidMemoryIdError, (422, "invalid_input")),
        (core.UnknownCursorError, (422, "invalid_input")),
        (core.UnknownMemoryRefError, (422, "invalid_input")),
        (core.ScopeCapError, (422, "invalid_input")),
        (core.WorkerCitationError, (422, "invalid_input")),
        (core.UnknownScopeError, (404, "not_found")),
        (core.DuplicateScopeError, (409, "conflict")),
        (core.ScopeStateError, (409, "conflict")),
        (core.ScopeOwnershipError, (409, "conflict")),
        (core.AppendNotVisibleError, (409, "conflict")),
        (workers.InvalidCursorError, (422, "invalid_input")),
        (workers.InvalidLinkError, (422, "invalid_input")),
        (core.InvalidEntryError, (422, "invalid_input")),
        (workers.SessionNotFoundError, (404, "not_found")),
        (workers.FlushJobNotFoundError, (404, "not_found")),
        (workers.TenantExistsError, (409, "conflict")),
        (core.EntryConflictError, (409, "conflict")),
        (workers.LinkConflictError, (409, "conflict")),
        (workers.WorkspaceMissingError, (409, "conflict")),
        (workers.InvalidJobStateError, (409, "conflict")),
        (workers.StaleEpochError, (409, "conflict")),
        (workers.InvalidApiKeyError, (401, "unauthorized")),
        (workers.StoreUnavailableError, (503, "unavailable")),
        (workers.RedisUnavailableError, (503, "unavailable")),
        (workers.EmbeddedRedisError, (503, "unavailable")),
        # Fenced out (a conflict), but a coordination error first: the API answers 503.
        (workers.LockLostError, (503, "unavailable")),
        # Server faults: 500.
        (workers.StoreError, None),
        (workers.MigrationError, None),
        (workers.ConfigError, None),
        (workers.ProviderRequestError, None),
    ],
)
def test_the_status_of_an_error_follows_its_category(
    cls: type[BaseException], answer: tuple[int, str] | None
) -> None:
    assert classify(_error(cls)) == answer


@pytest.mark.parametrize(
    "category",
    [
        core.InvalidInputError,
        core.NotFoundError,
        core.ConflictError,
        core.UnauthorizedError,
        core.UnavailableError,
    ],
)
def test_a_category_survives_the_wire(category: type[core.ObservationalMemoryError]) -> None:
    status, code = STATUS_BY_ERROR[category]
    call: Call[str] = Call("GET", "/v1/sessions/s", str)
    answer = httpx.Response(status, json={"error": code, "detail": "why"})
    raised = error_for(call, answer)
    assert isinstance(raised, category)
    assert (raised.status, raised.code, raised.detail) == (status, code, "why")


def test_a_store_and_a_client_not_found_are_caught_alike() -> None:
    call: Call[str] = Call("GET", "/v1/sessions/s", str)
    for raised in (
        workers.SessionNotFoundError("no session 's'"),
        error_for(call, httpx.Response(404, json={"error": "not_found", "detail": "no"})),
    ):
        with pytest.raises(core.NotFoundError):
            raise raised
        assert isinstance(raised, LookupError)
