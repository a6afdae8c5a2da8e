"""Observer, reflector and dropper: tool-only worker loops over the ``Provider`` port."""

from om_core.flush.workers.dropper import (
    drop_lowest_relevance,
    run_dropper,
    select_lowest_relevance,
)
from om_core.flush.workers.observer import run_observer
from om_core.flush.workers.reflector import run_reflector
from om_core.flush.workers.tool_loop import ToolError, ToolLoopResult, WorkerTool, run_tool_loop

__all__ = [
    "ToolError",
    "ToolLoopResult",
    "WorkerTool",
    "drop_lowest_relevance",
    "run_dropper",
    "run_observer",
    "run_reflector",
    "run_tool_loop",
    "select_lowest_relevance",
]
