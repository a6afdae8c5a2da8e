"""Work scopes: the opt-in index of host-named scopes that observations and reflections bind to.

- :mod:`~om_core.scopes.records`: the ``om.scope.*`` records, their caps and id rules;
- :mod:`~om_core.scopes.index`: the fold of those records into a :class:`WorkScopeMap`;
- :mod:`~om_core.scopes.controller`: validated appends (``open``, ``enter``, ``bind`` ...);
- :mod:`~om_core.scopes.work_memory`: the observations and reflections a scope query selects;
- :mod:`~om_core.scopes.shared`: memory other sessions bound to a shared scope, under grants.
"""

from om_core.scopes.controller import ScopeView, WorkScopeController, with_work_scope
from om_core.scopes.index import WorkScopeMap, fold_work_scope_map
from om_core.scopes.shared import SharedScopeConfig, resolve_shared_scopes
from om_core.scopes.work_memory import project_work_memory

__all__ = [
    "ScopeView",
    "SharedScopeConfig",
    "WorkScopeController",
    "WorkScopeMap",
    "fold_work_scope_map",
    "project_work_memory",
    "resolve_shared_scopes",
    "with_work_scope",
]
