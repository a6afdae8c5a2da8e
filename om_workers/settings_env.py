"""How grouped settings meet flat ``OM_*`` variables: one settings source.

:class:`om_workers.config.Settings` nests its knobs in frozen groups (``settings.locks.ttl_s``),
while the environment stays flat (``OM_LOCK_TTL_S``) and so do the keyword names older code
and the deployment tests pass (``Settings(lock_ttl_s=5)``). pydantic-settings has no mapping
from a flat variable to a nested field, so each leaf field names its own variable as its
``validation_alias`` (:func:`setting`), and both sources here bring every input to one
canonical shape, ``{group: {variable: value}}`` (a top-level leaf: ``{variable: value}``):

- keyword arguments, flat (``lock_ttl_s=5``, or the variable's own name) or grouped
  (``locks={"ttl_s": 5}``, or ``locks=LockSettings(...)``: a group object is taken whole);
- the process environment, each leaf read under its own variable (the first of its names
  that is set), JSON decoded for dict fields.

:class:`FlatSettingsSource` merges the two leaf by leaf (keywords win); keyed by variable
name, a validation error's location names the variable (``locks.OM_LOCK_TTL_S``). Generic
over the model: nothing here imports the settings themselves.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any, Final

from pydantic import AliasChoices, BaseModel, Field, ValidationError
from pydantic.config import JsonDict
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource
from pydantic_settings.exceptions import SettingsError

ENV_PREFIX: Final = "OM_"
SECRET: Final = "secret"
"""The ``json_schema_extra`` key that marks a plain-string secret (never printed)."""


def setting(
    env: str | tuple[str, ...],
    default: Any = None,
    *,
    description: str,
    secret: bool = False,
    **constraints: Any,
) -> Any:
    """A leaf field read from the variable ``env`` (or the first set of several names, the
    documented one first). ``secret`` marks a plain ``str`` that must never be printed
    (``SecretStr`` fields are secret by their type). ``constraints`` go to ``Field``
    (``ge=1`` ...); a ``default`` that is a callable is used as the default factory."""
    names = (env,) if isinstance(env, str) else env
    alias: str | AliasChoices = names[0] if len(names) == 1 else AliasChoices(*names)
    extra: JsonDict | None = {SECRET: True} if secret else None
    if callable(default):
        return Field(
            default_factory=default,
            validation_alias=alias,
            description=description,
            json_schema_extra=extra,
            **constraints,
        )
    return Field(
        default,
        validation_alias=alias,
        description=description,
        json_schema_extra=extra,
        **constraints,
    )


@dataclass(frozen=True)
class Leaf:
    """One setting: where it lives in the model and the variables it is read from."""

    group: str | None
    """The group's attribute on the settings (``locks``), ``None`` for a top-level field."""
    name: str
    """The field's attribute in its group (``ttl_s``)."""
    env: tuple[str, ...]
    """Its variables, the documented one first (``OM_LOCK_TTL_S``)."""
    field: FieldInfo

    @property
    def path(self) -> str:
        """The attribute path from the settings object: ``locks.ttl_s``."""
        return self.name if self.group is None else f"{self.group}.{self.name}"

    @property
    def flat_names(self) -> tuple[str, ...]:
        """Keyword names it is also accepted under: each variable without ``OM_``, lower case
        (``lock_ttl_s``)."""
        return tuple(name.removeprefix(ENV_PREFIX).lower() for name in self.env)

    @property
    def secret(self) -> bool:
        """True when its value must never be printed."""
        extra = self.field.json_schema_extra
        return (isinstance(extra, dict) and extra.get(SECRET) is True) or _is_secret_type(
            self.field.annotation
        )


def _is_secret_type(annotation: Any) -> bool:
    from pydantic import SecretStr

    args = getattr(annotation, "__args__", ())
    return annotation is SecretStr or SecretStr in args


def _env_names(name: str, field: FieldInfo) -> tuple[str, ...]:
    alias = field.validation_alias
    if isinstance(alias, str):
        return (alias,)
    if isinstance(alias, AliasChoices):
        return tuple(choice for choice in alias.choices if isinstance(choice, str))
    raise TypeError(f"setting {name!r} names no OM_* variable (declare it with setting())")


def group_models(model: type[BaseModel]) -> dict[str, type[BaseModel]]:
    """The groups of ``model``: its fields whose type is itself a model, in field order."""
    return {
        name: field.annotation
        for name, field in model.model_fields.items()
        if isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel)
    }


@cache
def leaves(model: type[BaseModel]) -> tuple[Leaf, ...]:
    """Every setting of ``model`` in field order (groups' fields where the group stands).

    Raises ``TypeError`` when a leaf names no variable."""
    groups = group_models(model)
    found: list[Leaf] = []
    for name, field in model.model_fields.items():
        group = groups.get(name)
        if group is None:
            found.append(Leaf(None, name, _env_names(name, field), field))
            continue
        for inner, inner_field in group.model_fields.items():
            found.append(Leaf(name, inner, _env_names(inner, inner_field), inner_field))
    return tuple(found)


@cache
def _by_key(model: type[BaseModel]) -> dict[str, Leaf]:
    """Each leaf under every lower-case key it is accepted by: its variables, their flat
    forms, and a top-level field's own name."""
    index: dict[str, Leaf] = {}
    for leaf in leaves(model):
        keys = [*(n.lower() for n in leaf.env), *leaf.flat_names]
        if leaf.group is None:
            keys.append(leaf.name)
        for key in keys:
            if key in index and index[key] is not leaf:
                raise TypeError(f"settings {index[key].path} and {leaf.path} share the name {key}")
            index[key] = leaf
    return index


def canonical(model: type[BaseModel], values: Mapping[str, Any]) -> dict[str, Any]:
    """``values`` (keyword arguments, or variables by name) in the canonical shape:
    ``{group: {variable: value}}`` and ``{variable: value}`` for a top-level leaf. A key
    that is no setting is kept as it is, for the model to refuse."""
    groups = group_models(model)
    index = _by_key(model)
    out: dict[str, Any] = {}
    for key, value in values.items():
        if key in groups:
            given = _group_values(model, key, value)
            if isinstance(given, dict) and isinstance(out.get(key, {}), dict):
                out.setdefault(key, {}).update(given)
            else:
                out[key] = given
            continue
        leaf = index.get(key.lower())
        if leaf is None:
            out[key] = value
        elif leaf.group is None:
            out[leaf.env[0]] = value
        else:
            out.setdefault(leaf.group, {})[leaf.env[0]] = value
    return out


def _group_values(model: type[BaseModel], group: str, value: Any) -> Any:
    """A group given as an object (every field) or a mapping (field or variable names), keyed
    by variable; anything else unchanged, for validation to refuse."""
    own = {leaf.name: leaf for leaf in leaves(model) if leaf.group == group}
    if isinstance(value, BaseModel):
        return {leaf.env[0]: getattr(value, name) for name, leaf in own.items()}
    if not isinstance(value, Mapping):
        return value
    by_env = {env: leaf for leaf in own.values() for env in leaf.env}
    keyed: dict[str, Any] = {}
    for key, item in value.items():
        leaf = own.get(key) or by_env.get(key)
        keyed[leaf.env[0] if leaf is not None else key] = item
    return keyed


class FlatSettingsSource(PydanticBaseSettingsSource):
    """The settings' only source: keyword arguments over the environment, merged leaf by leaf
    (a dict-valued leaf, ``OM_SETTINGS_JSON``, is replaced, never merged).

    Keyword arguments come flat or grouped (see the module). From the environment each setting
    is read under its own ``OM_*`` variable (names match in any case, as before the settings
    were grouped), a dict field's value decoded as JSON. Raises ``SettingsError`` naming the
    variable when that value is not JSON."""

    def __init__(self, settings_cls: type[BaseSettings], init: PydanticBaseSettingsSource):
        super().__init__(settings_cls)
        self._init = init

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False  # everything is done in __call__

    def __call__(self) -> dict[str, Any]:
        return merge(self.settings_cls, self._environment(), self._init())

    def _environment(self) -> dict[str, Any]:
        environ = {key.upper(): value for key, value in os.environ.items()}
        found: dict[str, Any] = {}
        for leaf, name in _set_leaves(leaves(self.settings_cls), environ):
            found[leaf.env[0]] = _decode(leaf, name, environ[name])
        return canonical(self.settings_cls, found)


def merge(
    model: type[BaseModel], base: Mapping[str, Any], update: Mapping[str, Any]
) -> dict[str, Any]:
    """``base`` with ``update`` over it, leaf by leaf, both in any shape :func:`canonical`
    takes; the result is canonical (a dict-valued leaf is replaced, never merged)."""
    groups = group_models(model)
    merged = canonical(model, base)
    for key, value in canonical(model, update).items():
        if key in groups and isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = {**merged[key], **value}  # a group: leaf by leaf
        else:
            merged[key] = value
    return merged


def _set_leaves(
    all_leaves: tuple[Leaf, ...], environ: Mapping[str, str]
) -> Iterator[tuple[Leaf, str]]:
    """Each leaf whose variable is set, with the first of its names that is."""
    for leaf in all_leaves:
        name = next((n for n in leaf.env if n.upper() in environ), None)
        if name is not None:
            yield leaf, name.upper()


def _decode(leaf: Leaf, name: str, raw: str) -> Any:
    if not _is_dict(leaf.field.annotation):
        return raw
    try:
        return json.loads(raw)
    except json.JSONDecodeError as exc:
        raise SettingsError(f"{name} is not JSON: {exc}") from None


def _is_dict(annotation: Any) -> bool:
    return annotation is dict or getattr(annotation, "__origin__", None) is dict


def first_error(exc: ValidationError) -> str:
    """``OM_MAX_BODY_BYTES: Input should be a valid integer ...``: the first error of a
    settings validation, located by its variable (else by its dotted location)."""
    errors = exc.errors()
    if not errors:
        return str(exc).splitlines()[0]
    first = errors[0]
    location = [str(part) for part in first.get("loc", ())]
    # A setting's location ends with its variable (api.OM_MAX_BODY_BYTES): name just that.
    variable = next((part for part in reversed(location) if part.startswith(ENV_PREFIX)), None)
    where = variable or ".".join(location) or "settings"
    return f"{where}: {first.get('msg', '')}"


def env_names(model: type[BaseModel]) -> set[str]:
    """Every variable ``model`` reads, old spellings included."""
    return {name for leaf in leaves(model) for name in leaf.env}


__all__ = [
    "ENV_PREFIX",
    "FlatSettingsSource",
    "Leaf",
    "canonical",
    "env_names",
    "first_error",
    "group_models",
    "leaves",
    "merge",
    "setting",
]
