"""Evaluation harness: replay LoCoMo-format conversations through the memory and score them.

``om eval locomo PATH...`` is the command (:mod:`om_api.evaluation.command`); the pieces are
importable for other harnesses: :mod:`~om_api.evaluation.locomo` reads files,
:mod:`~om_api.evaluation.targets` replays into the in-process runtime or a running stack,
:mod:`~om_api.evaluation.runner` scores one conversation, :mod:`~om_api.evaluation.scoring`
(answers, ungrounded match) and :mod:`~om_api.evaluation.grounding` (grounded match,
reachability) hold the metric definitions, :mod:`~om_api.evaluation.control` the chance
control, :mod:`~om_api.evaluation.report` aggregates and renders, and
:mod:`~om_api.evaluation.answering` asks and judges a model. docs/evaluation.md describes
the protocol. Nothing here knows where data
lives; LoCoMo files are passed in by path.
"""

from om_api.evaluation.answering import ModelJudge, parse_label
from om_api.evaluation.control import chance_control
from om_api.evaluation.grounding import (
    ShownContext,
    grounded_answer,
    out_of_reach,
    parse_memory_items,
    shown_context,
    split_recent,
)
from om_api.evaluation.locomo import (
    Conversation,
    LocomoFormatError,
    Question,
    data_files,
    load_conversations,
    parse_conversation,
)
from om_api.evaluation.report import tally, to_json, to_markdown
from om_api.evaluation.runner import (
    ConversationResult,
    QuestionResult,
    evaluate_conversation,
    run_messages,
    session_id_for,
)
from om_api.evaluation.scoring import (
    answer_in_context,
    answer_status,
    evidence_one_hop,
    memory_refs,
    normalize,
)
from om_api.evaluation.targets import ApiTarget, EvalError, InProcessTarget

__all__ = [
    "ApiTarget",
    "Conversation",
    "ConversationResult",
    "EvalError",
    "InProcessTarget",
    "LocomoFormatError",
    "ModelJudge",
    "Question",
    "QuestionResult",
    "ShownContext",
    "answer_in_context",
    "answer_status",
    "chance_control",
    "data_files",
    "evaluate_conversation",
    "evidence_one_hop",
    "grounded_answer",
    "load_conversations",
    "memory_refs",
    "normalize",
    "out_of_reach",
    "parse_conversation",
    "parse_label",
    "parse_memory_items",
    "run_messages",
    "session_id_for",
    "shown_context",
    "split_recent",
    "tally",
    "to_json",
    "to_markdown",
]
