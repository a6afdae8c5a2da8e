"""Observational memory, pure core: models, fold, projection, context, recall, compaction.

Nothing here does I/O: every function is a pure function of the entries it is given. The
names below are the public API (stable: add freely, rename nothing without a deprecation
path); each maps to one export of the TypeScript package, in snake_case.
"""

from om_core.errors import ObservationalMemoryError
from om_core.flush.attach import AttachedMemory, ObservationalMemory
from om_core.flush.compaction import (
    CompactionResult,
    ObservationalMemoryCompactionStrategy,
    create_folded_memory_details,
)
from om_core.flush.extractive import ExtractiveProvider
from om_core.flush.provider import Provider, ProviderRequest, ProviderResponse, ScriptedProvider
from om_core.flush.revocation import ObservationalMemoryDropHandler, Tombstone, list_invalidated_ids
from om_core.flush.runtime import FlushResult, ObservationalMemoryRuntime
from om_core.flush.workers import run_dropper, run_observer, run_reflector
from om_core.flush.workers.selection import WorkerConfig
from om_core.ledger.fold import (
    eligible_observation_sources,
    fold_ledger,
    is_eligible_observation_source,
    merge_ledgers,
    observations_uncovered_by_reflection,
    unscanned_entries,
)
from om_core.ledger.funnel import FunnelOrigin, funnel_copies, funnel_copy_id, funnel_origin
from om_core.ledger.ids import create_memory_id, is_memory_id
from om_core.ledger.models import (
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
from om_core.ledger.projection import ObservationalMemoryProjection, build_projection
from om_core.ledger.tokens import estimate_entry_tokens, estimate_message_tokens
from om_core.policy.limits import WorkerLimits, resolve_worker_limits
from om_core.read.commands import MemoryStatus, memory_status, memory_view
from om_core.read.context import build_context_blocks
from om_core.read.paging import BranchPage, recall_branch_page
from om_core.read.recall import RecallResult, recall_memory
from om_core.read.recall_tool import RecallMemoryTool
from om_core.read.render import render_observational_memory
from om_core.read.window import render_recent_message_window, select_recent_message_entries
from om_core.scopes.controller import WorkScopeController, with_work_scope
from om_core.scopes.index import WorkScopeMap, fold_work_scope_map
from om_core.scopes.shared import SharedScopeConfig, resolve_shared_scopes
from om_core.scopes.work_memory import project_work_memory
from om_core.settings import ObservationalMemorySettings, resolve_settings

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
