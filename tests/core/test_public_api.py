"""Every public name of ``om_core`` (its ``__all__``) is importable from it."""

from __future__ import annotations

import om_core


def test_contract_names_are_exported() -> None:
    for name in om_core.__all__:
        assert getattr(om_core, name) is not None, name


def test_one_exception_tree() -> None:
    from om_core import errors

    classes = [
        value
        for value in vars(errors).values()
        if isinstance(value, type) and issubclass(value, Exception)
    ]
    assert all(issubclass(c, om_core.ObservationalMemoryError) for c in classes)
