"""Worker limits: defaults and hard caps, and their resolution."""

from __future__ import annotations

from dataclasses import dataclass

from om_core.errors import WorkerLimitError
from om_core.settings import ObservationalMemorySettings

KIB = 1024
MIB = 1024 * KIB

DEFAULT_MAX_WORKER_TURNS = 16
HARD_MAX_WORKER_TURNS = 64
DEFAULT_MAX_WORKER_TOOL_CALLS_PER_TURN = 32
HARD_MAX_WORKER_TOOL_CALLS_PER_TURN = 256
DEFAULT_MAX_WORKER_TOOL_CALLS = 128
HARD_MAX_WORKER_TOOL_CALLS = 1024
DEFAULT_MAX_WORKER_ARGUMENT_BYTES = 64 * KIB
HARD_MAX_WORKER_ARGUMENT_BYTES = 1 * MIB
DEFAULT_MAX_WORKER_RESULT_BYTES = 64 * KIB
HARD_MAX_WORKER_RESULT_BYTES = 1 * MIB
DEFAULT_MAX_WORKER_MESSAGE_BYTES = 1 * MIB
HARD_MAX_WORKER_MESSAGE_BYTES = 8 * MIB
DEFAULT_MAX_WORKER_ERROR_BYTES = 1 * KIB
HARD_MAX_WORKER_ERROR_BYTES = 8 * KIB

MAX_RENDERED_MEMORY_BYTES = 256 * KIB
MAX_FOLDED_PAYLOAD_BYTES = 512 * KIB
MAX_RECENT_WINDOW_BYTES = 512 * KIB


@dataclass(frozen=True)
class WorkerLimits:
    """Resolved limits of one worker run (counts, and sizes in bytes of UTF-8 JSON)."""

    max_turns: int = DEFAULT_MAX_WORKER_TURNS
    max_tool_calls_per_turn: int = DEFAULT_MAX_WORKER_TOOL_CALLS_PER_TURN
    max_tool_calls: int = DEFAULT_MAX_WORKER_TOOL_CALLS
    max_argument_bytes: int = DEFAULT_MAX_WORKER_ARGUMENT_BYTES
    max_result_bytes: int = DEFAULT_MAX_WORKER_RESULT_BYTES
    max_message_bytes: int = DEFAULT_MAX_WORKER_MESSAGE_BYTES
    max_error_bytes: int = DEFAULT_MAX_WORKER_ERROR_BYTES


def resolve_worker_limits(
    *,
    max_worker_turns: object = None,
    max_worker_tool_calls_per_turn: object = None,
    max_worker_tool_calls: object = None,
    max_worker_argument_bytes: object = None,
    max_worker_result_bytes: object = None,
    max_worker_message_bytes: object = None,
    max_worker_error_bytes: object = None,
    settings: ObservationalMemorySettings | None = None,
) -> WorkerLimits:
    """Resolve each limit: the explicit value, else (turns only) ``agentMaxTurns``, else default.

    Every value must be a positive integer no larger than its hard cap; anything else (bools,
    floats, zero, negatives, over the cap) raises :class:`WorkerLimitError` naming the option.
    """
    turns_default = settings.agent_max_turns if settings is not None else DEFAULT_MAX_WORKER_TURNS
    return WorkerLimits(
        max_turns=_limit("maxWorkerTurns", max_worker_turns, turns_default, HARD_MAX_WORKER_TURNS),
        max_tool_calls_per_turn=_limit(
            "maxWorkerToolCallsPerTurn",
            max_worker_tool_calls_per_turn,
            DEFAULT_MAX_WORKER_TOOL_CALLS_PER_TURN,
            HARD_MAX_WORKER_TOOL_CALLS_PER_TURN,
        ),
        max_tool_calls=_limit(
            "maxWorkerToolCalls",
            max_worker_tool_calls,
            DEFAULT_MAX_WORKER_TOOL_CALLS,
            HARD_MAX_WORKER_TOOL_CALLS,
        ),
        max_argument_bytes=_limit(
            "maxWorkerArgumentBytes",
            max_worker_argument_bytes,
            DEFAULT_MAX_WORKER_ARGUMENT_BYTES,
            HARD_MAX_WORKER_ARGUMENT_BYTES,
        ),
        max_result_bytes=_limit(
            "maxWorkerResultBytes",
            max_worker_result_bytes,
            DEFAULT_MAX_WORKER_RESULT_BYTES,
            HARD_MAX_WORKER_RESULT_BYTES,
        ),
        max_message_bytes=_limit(
            "maxWorkerMessageBytes",
            max_worker_message_bytes,
            DEFAULT_MAX_WORKER_MESSAGE_BYTES,
            HARD_MAX_WORKER_MESSAGE_BYTES,
        ),
        max_error_bytes=_limit(
            "maxWorkerErrorBytes",
            max_worker_error_bytes,
            DEFAULT_MAX_WORKER_ERROR_BYTES,
            HARD_MAX_WORKER_ERROR_BYTES,
        ),
    )


def _limit(name: str, value: object, default: int, cap: int) -> int:
    if value is None:
        value = default
    if isinstance(value, bool) or not isinstance(value, int):
        raise WorkerLimitError(f"{name} must be an integer, got {value!r}")
    if value <= 0:
        raise WorkerLimitError(f"{name} must be positive, got {value}")
    if value > cap:
        raise WorkerLimitError(f"{name} must be at most {cap}, got {value}")
    return value
