"""Observational memory, pure core: models, fold, projection, context, recall, compaction.

Nothing here does I/O: every function is a pure function of the entries it is given. The
names below are the public API (stable: add freely, rename nothing without a deprecation
path); each maps to one export of the TypeScript package, in snake_case.
"""

from om_core.attach import AttachedMemory, ObservationalMemory
from om_core.commands import MemoryStatus, memory_status, memory_view
from om_core.compaction import (
    CompactionResult,
    ObservationalMemoryCompactionStrategy,
    create_folded_memory_details,
)
from om_core.context import build_context_blocks
from om_core.errors import ObservationalMemoryError
from om_core.extractive import ExtractiveProvider
from om_core.funnel import FunnelOrigin, funnel_copies, funnel_copy_id, funnel_origin
from om_core.ids import create_memory_id, is_memory_id
from om_core.ledger import (
    eligible_observation_sources,
    fold_ledger,
    is_eligible_observation_source,
    merge_ledgers,
    observations_uncovered_by_reflection,
    unscanned_entries,
)
from om_core.limits import WorkerLimits, resolve_worker_limits
from om_core.models import (
    CompactionEntry,
    ContextBlock,
    FoldedMemory,
    Message,
    Observation,
    ObservationalMemoryLedger,
    Reflection,
    SessionEntry,
    ToolCall,
)
from om_core.paging import BranchPage, recall_branch_page
from om_core.projection import ObservationalMemoryProjection, build_projection
from om_core.provider import Provider, ProviderRequest, ProviderResponse, ScriptedProvider
from om_core.recall import RecallResult, recall_memory
from om_core.recall_tool import RecallMemoryTool
from om_core.render import render_observational_memory
from om_core.revocation import ObservationalMemoryDropHandler, Tombstone, list_invalidated_ids
from om_core.runtime import FlushResult, ObservationalMemoryRuntime
from om_core.scopes.controller import WorkScopeController, with_work_scope
from om_core.scopes.index import WorkScopeMap, fold_work_scope_map
from om_core.scopes.shared import SharedScopeConfig, resolve_shared_scopes
from om_core.scopes.work_memory import project_work_memory
from om_core.settings import ObservationalMemorySettings, resolve_settings
from om_core.tokens import estimate_entry_tokens, estimate_message_tokens
from om_core.window import render_recent_message_window, select_recent_message_entries
from om_core.workers import run_dropper, run_observer, run_reflector
from om_core.workers.selection import WorkerConfig

__all__ = [
    "AttachedMemory",
    "BranchPage",
    "CompactionEntry",
    "CompactionResult",
    "ContextBlock",
    "ExtractiveProvider",
    "FlushResult",
    "FoldedMemory",
    "FunnelOrigin",
    "MemoryStatus",
    "Message",
    "Observation",
    "ObservationalMemory",
    "ObservationalMemoryCompactionStrategy",
    "ObservationalMemoryDropHandler",
    "ObservationalMemoryError",
    "ObservationalMemoryLedger",
    "ObservationalMemoryProjection",
    "ObservationalMemoryRuntime",
    "ObservationalMemorySettings",
    "Provider",
    "ProviderRequest",
    "ProviderResponse",
    "RecallMemoryTool",
    "RecallResult",
    "Reflection",
    "ScriptedProvider",
    "SessionEntry",
    "SharedScopeConfig",
    "Tombstone",
    "ToolCall",
    "WorkScopeController",
    "WorkScopeMap",
    "WorkerConfig",
    "WorkerLimits",
    "build_context_blocks",
    "build_projection",
    "create_folded_memory_details",
    "create_memory_id",
    "eligible_observation_sources",
    "estimate_entry_tokens",
    "estimate_message_tokens",
    "fold_ledger",
    "fold_work_scope_map",
    "funnel_copies",
    "funnel_copy_id",
    "funnel_origin",
    "is_eligible_observation_source",
    "is_memory_id",
    "list_invalidated_ids",
    "memory_status",
    "memory_view",
    "merge_ledgers",
    "observations_uncovered_by_reflection",
    "project_work_memory",
    "recall_branch_page",
    "recall_memory",
    "render_observational_memory",
    "render_recent_message_window",
    "resolve_settings",
    "resolve_shared_scopes",
    "resolve_worker_limits",
    "run_dropper",
    "run_observer",
    "run_reflector",
    "select_recent_message_entries",
    "unscanned_entries",
    "with_work_scope",
]
