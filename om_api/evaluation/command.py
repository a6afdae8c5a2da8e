"""``om eval locomo``: replay LoCoMo conversations through the memory pipeline and score them.

Only ``typer`` is imported at module level: ``om --help`` stays fast and Celery-free; the
runtime, client and providers load when the command runs.
"""

from __future__ import annotations

import json
import secrets
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer

if TYPE_CHECKING:
    from om_api.evaluation.answering import ModelJudge
    from om_api.evaluation.locomo import Conversation
    from om_api.evaluation.runner import ConversationResult
    from om_api.evaluation.targets import ApiTarget, InProcessTarget
    from om_workers.config import Settings

eval_app = typer.Typer(
    help="Evaluate what the memory keeps, on real conversations.", no_args_is_help=True
)


def _fail(message: str, code: int = 1) -> NoReturn:
    typer.echo(f"om eval: {message}", err=True)
    raise typer.Exit(code)


# The command's options and argument (typer reads each from its annotation).
DataPaths = Annotated[
    list[Path],
    typer.Argument(
        metavar="PATH",
        help="LoCoMo JSON files, or folders of them (their *.json).",
        show_default=False,
    ),
]
SettingsJson = Annotated[
    str | None,
    typer.Option(
        "--settings",
        help="Memory settings JSON for the in-process runtime, e.g. "
        '\'{"observation": {"messageTokens": 2000}}\' (default: OM_SETTINGS_JSON).',
    ),
]
JsonReport = Annotated[
    bool,
    typer.Option(
        "--json", help="Print the full report (every question) as JSON instead of markdown."
    ),
]
JsonFile = Annotated[
    Path | None,
    typer.Option("--json-file", help="Write the full report (every question) as JSON here too."),
]
MarkdownFile = Annotated[
    Path | None, typer.Option("--markdown", help="Write the markdown tables here too.")
]
ReplayApi = Annotated[
    str | None,
    typer.Option("--api", help="Replay through a running om API at this URL (not in process)."),
]
ReplayKey = Annotated[
    str | None,
    typer.Option("--key", help="API key for --api (default: OM_API_KEY).", show_default=False),
]
ForceFlush = Annotated[
    bool,
    typer.Option("--force", help="Flush with force: observe below observation.messageTokens."),
]
AnswerQuestions = Annotated[
    bool,
    typer.Option(
        "--answer",
        help="Also ask the configured model (OM_PROVIDER=openai|anthropic, OM_MODEL) each "
        "question from the context, and grade it with the LLM-judge prompt.",
    ),
]
Runs = Annotated[
    int,
    typer.Option(
        "--runs",
        min=1,
        help="With --answer: answer and judge each question this many times; the report "
        "gives the mean accuracy and its spread.",
    ),
]
Baselines = Annotated[
    bool,
    typer.Option(
        "--baselines",
        help="With --answer: also answer from the full transcript and from no context "
        "(three times the model calls).",
    ),
]
JobTimeout = Annotated[
    float, typer.Option("--job-timeout", help="Seconds to wait for each flush job (--api).")
]
ContextBudget = Annotated[
    int | None,
    typer.Option(
        "--max-tokens",
        min=256,
        help="Context budget in estimated tokens (default: OM_CONTEXT_MAX_TOKENS in "
        "process, the server's default with --api).",
        show_default=False,
    ),
]


@eval_app.command("locomo")
def locomo(
    paths: DataPaths,
    settings_json: SettingsJson = None,
    as_json: JsonReport = False,
    json_path: JsonFile = None,
    markdown_path: MarkdownFile = None,
    api_url: ReplayApi = None,
    key: ReplayKey = None,
    force: ForceFlush = False,
    answer: AnswerQuestions = False,
    runs: Runs = 1,
    baselines: Baselines = False,
    job_timeout: JobTimeout = 300.0,
    max_tokens: ContextBudget = None,
) -> None:
    """Replay each conversation (one agent run per LoCoMo session, a flush after each), then
    report per question whether the short answer is in the text shown for its own evidence
    turns (grounded), against another conversation's context (chance control) and anywhere
    in the context (ungrounded); how many evidence turns and messages are shown or one
    recall away; and raw-history vs context tokens per conversation. See docs/evaluation.md.

    The markdown goes to stdout (--json: the JSON report instead); --markdown and --json-file
    write them to files too. Exits 0 with a message when no data file is found (the data is
    not shipped: docs/evaluation.md says where to get it). Exit 2 for bad usage or a
    malformed file, 1 when a flush, the API or the model fails.
    """
    from om_workers.config import get_settings

    files, conversations = _conversations(paths, as_json)
    run = Run(api_url, key, settings_json, force, job_timeout, max_tokens, answer, runs, baselines)
    run.check()
    settings = get_settings()
    judge = _judge(settings) if answer else None
    target = _api_target(settings, api_url, run) if api_url else _local_target(settings, run)
    results = _replay_closing(conversations, target, run, judge)
    _report(results, _meta(files, settings, target, run), as_json, json_path, markdown_path)


@dataclass(frozen=True)
class Run:
    """What one ``om eval locomo`` was asked to do: its options (see the command's help)."""

    api_url: str | None
    key: str | None
    settings_json: str | None
    force: bool
    job_timeout: float
    max_tokens: int | None
    answer: bool
    runs: int
    baselines: bool

    def check(self) -> None:
        """Exit 2 for options that need ``--answer`` without it."""
        if (self.runs != 1 or self.baselines) and not self.answer:
            _fail("--runs and --baselines need --answer", 2)


def _conversations(paths: list[Path], as_json: bool) -> tuple[list[Path], list[Conversation]]:
    """The data files under ``paths`` and their conversations. Exits 0 when there is none
    (the data is not shipped), 2 for a malformed file."""
    from om_api.evaluation.locomo import LocomoFormatError, data_files, load_conversations

    files, missing = data_files(paths)
    for path in missing:
        typer.echo(f"om eval locomo: no LoCoMo data at {path}; skipped", err=True)
    if not files:
        # On stderr with --json: stdout is for the JSON report only.
        message = "om eval locomo: no LoCoMo data found; nothing to evaluate (skipped)"
        typer.echo(message, err=as_json)
        raise typer.Exit(0)
    try:
        return files, [c for f in files for c in load_conversations(f)]
    except (LocomoFormatError, OSError) as exc:
        _fail(str(exc), 2)


def _replay_closing(
    conversations: list[Conversation],
    target: InProcessTarget | ApiTarget,
    run: Run,
    judge: ModelJudge | None,
) -> list[ConversationResult]:
    """:func:`_replay`, the target closed after; exit 1 when a flush, the API or the model
    fails. Sessions made through an API get a random tag, so a rerun starts afresh."""
    from om_api.evaluation.targets import EvalError
    from om_workers.errors import OMWorkersError

    tag = secrets.token_hex(4) if run.api_url else ""
    try:
        return _replay(conversations, target, tag, judge, run.runs, run.baselines)
    except (EvalError, OMWorkersError) as exc:
        _fail(str(exc))
    finally:
        if hasattr(target, "close"):
            target.close()


def _meta(
    files: list[Path], settings: Settings, target: InProcessTarget | ApiTarget, run: Run
) -> dict[str, Any]:
    """The report's description of the run: what was replayed, how, and what made the memory."""
    from om_api.evaluation.runner import BASELINES

    meta: dict[str, Any] = {
        "files": [str(f) for f in files],
        "mode": "api" if run.api_url else "in-process",
        "api_url": run.api_url,
        "force": run.force,
        "provider": settings.llm.provider,
        "model": settings.llm.model,
        "max_tokens": run.max_tokens,
        "answer": run.answer,
        "runs": run.runs if run.answer else None,
        "baselines": list(BASELINES) if run.answer and run.baselines else [],
        # Which observer/reflector instructions made this memory: compare reports by it.
        "prompt_version": ", ".join(sorted(target.prompt_versions)) or None,
    }
    if not run.api_url:
        meta["settings"] = target.settings.to_json_dict()  # type: ignore[union-attr]
        meta["max_tokens"] = target.max_tokens  # type: ignore[union-attr]
    return meta


def _report(
    results: list[ConversationResult],
    meta: dict[str, Any],
    as_json: bool,
    json_path: Path | None,
    markdown_path: Path | None,
) -> None:
    """The markdown on stdout (``--json``: the JSON report), and each to its file if asked."""
    from om_api.evaluation.report import to_json, to_markdown

    markdown = _heading(meta) + to_markdown(results, judged=meta["answer"])
    report = json.dumps(to_json(results, meta), indent=2) + "\n"
    typer.echo(report if as_json else markdown, nl=not as_json)
    if json_path is not None:
        json_path.write_text(report, encoding="utf-8")
    if markdown_path is not None:
        markdown_path.write_text(markdown, encoding="utf-8")


def _heading(meta: dict[str, Any]) -> str:
    """The report's first line: what made the memory, so two reports can be told apart."""
    version = meta["prompt_version"] or "unknown (no flush job ran)"
    return f"Prompts {version}; provider {meta['provider']}, model {meta['model']}.\n\n"


def _local_target(settings: Settings, run: Run) -> InProcessTarget:
    from om_api.evaluation.targets import InProcessTarget
    from om_core import resolve_settings
    from om_core.errors import ObservationalMemoryError
    from om_workers.prompts import load_prompts
    from om_workers.providers.setup import provider_factory, worker_models

    try:
        raw = json.loads(run.settings_json) if run.settings_json else dict(settings.memory_settings)
        memory = resolve_settings(raw)
        provider = provider_factory(settings)()
        prompts = load_prompts(settings.llm.prompts_file)
    except json.JSONDecodeError as exc:
        _fail(f"--settings is not JSON: {exc}", 2)
    except (ObservationalMemoryError, TypeError) as exc:
        _fail(str(exc), 2)
    return InProcessTarget(
        memory,
        provider,
        model=settings.llm.model,
        models=worker_models(settings),
        force=run.force,
        max_tokens=run.max_tokens or settings.api.context_max_tokens,
        prompts=prompts,
    )


def _api_target(settings: Settings, url: str, run: Run) -> ApiTarget:
    from om_api.evaluation.targets import ApiTarget

    key = run.key or (settings.cli.api_key.get_secret_value() if settings.cli.api_key else "")
    if not key:
        _fail("--api needs --key or OM_API_KEY", 2)
    return ApiTarget(
        url, key, force=run.force, job_timeout_s=run.job_timeout, max_tokens=run.max_tokens
    )


def _judge(settings: Settings) -> ModelJudge:
    from om_api.evaluation.answering import ModelJudge
    from om_workers.providers.setup import HTTP_PROVIDERS, build_http_provider

    if settings.llm.provider not in HTTP_PROVIDERS:
        _fail(
            f"--answer needs a real model: set OM_PROVIDER=openai or anthropic and OM_MODEL "
            f"(OM_PROVIDER is {settings.llm.provider!r})",
            2,
        )
    return ModelJudge(build_http_provider(settings), settings.llm.model)


def _replay(
    conversations: list[Conversation],
    target: InProcessTarget | ApiTarget,
    tag: str,
    judge: ModelJudge | None,
    runs: int,
    baselines: bool,
) -> list[ConversationResult]:
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
    )

    from om_api.evaluation.runner import evaluate_conversation, session_id_for

    results = []
    console = Console(stderr=True, force_terminal=None if sys.stderr.isatty() else False)
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn())
    with Progress(*columns, TimeElapsedColumn(), console=console, transient=False) as bar:
        for conversation in conversations:
            task = bar.add_task(f"locomo {conversation.name}", total=None)

            def advance(done: int, total: int, task: Any = task) -> None:
                bar.update(task, completed=done, total=total)

            results.append(
                evaluate_conversation(
                    conversation,
                    target,
                    session_id=session_id_for(conversation, tag),
                    judge=judge,
                    runs=runs,
                    baselines=baselines,
                    progress=advance,
                )
            )
    return results
