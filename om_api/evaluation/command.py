"""``om eval locomo``: replay LoCoMo conversations through the memory pipeline and score them.

Only ``typer`` is imported at module level: ``om --help`` stays fast and Celery-free; the
runtime, client and providers load when the command runs.
"""

from __future__ import annotations

import json
import secrets
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer

if TYPE_CHECKING:
    from om_api.evaluation.answering import ModelJudge
    from om_api.evaluation.runner import ConversationResult
    from om_api.evaluation.targets import ApiTarget, InProcessTarget
    from om_workers.config import Settings

eval_app = typer.Typer(
    help="Evaluate what the memory keeps, on real conversations.", no_args_is_help=True
)


def _fail(message: str, code: int = 1) -> NoReturn:
    typer.echo(f"om eval: {message}", err=True)
    raise typer.Exit(code)


@eval_app.command("locomo")
def locomo(
    paths: Annotated[
        list[Path],
        typer.Argument(
            metavar="PATH",
            help="LoCoMo JSON files, or folders of them (their *.json).",
            show_default=False,
        ),
    ],
    settings_json: Annotated[
        str | None,
        typer.Option(
            "--settings",
            help="Memory settings JSON for the in-process runtime, e.g. "
            '\'{"observation": {"messageTokens": 2000}}\' (default: OM_SETTINGS_JSON).',
        ),
    ] = None,
    as_json: Annotated[
        bool,
        typer.Option(
            "--json", help="Print the full report (every question) as JSON instead of markdown."
        ),
    ] = False,
    json_path: Annotated[
        Path | None,
        typer.Option(
            "--json-file", help="Write the full report (every question) as JSON here too."
        ),
    ] = None,
    markdown_path: Annotated[
        Path | None, typer.Option("--markdown", help="Write the markdown tables here too.")
    ] = None,
    api_url: Annotated[
        str | None,
        typer.Option("--api", help="Replay through a running om API at this URL (not in process)."),
    ] = None,
    key: Annotated[
        str | None,
        typer.Option("--key", help="API key for --api (default: OM_API_KEY).", show_default=False),
    ] = None,
    force: Annotated[
        bool,
        typer.Option("--force", help="Flush with force: observe below observation.messageTokens."),
    ] = False,
    answer: Annotated[
        bool,
        typer.Option(
            "--answer",
            help="Also ask the configured model (OM_PROVIDER=openai|anthropic, OM_MODEL) each "
            "question from the context, and grade it with the LLM-judge prompt.",
        ),
    ] = False,
    runs: Annotated[
        int,
        typer.Option(
            "--runs",
            min=1,
            help="With --answer: answer and judge each question this many times; the report "
            "gives the mean accuracy and its spread.",
        ),
    ] = 1,
    baselines: Annotated[
        bool,
        typer.Option(
            "--baselines",
            help="With --answer: also answer from the full transcript and from no context "
            "(three times the model calls).",
        ),
    ] = False,
    job_timeout: Annotated[
        float, typer.Option("--job-timeout", help="Seconds to wait for each flush job (--api).")
    ] = 300.0,
    max_tokens: Annotated[
        int | None,
        typer.Option(
            "--max-tokens",
            min=256,
            help="Context budget in estimated tokens (default: OM_CONTEXT_MAX_TOKENS in "
            "process, the server's default with --api).",
            show_default=False,
        ),
    ] = None,
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
    from om_api.evaluation.locomo import LocomoFormatError, data_files, load_conversations
    from om_api.evaluation.report import to_json, to_markdown
    from om_api.evaluation.runner import BASELINES
    from om_api.evaluation.targets import EvalError
    from om_workers.config import get_settings
    from om_workers.errors import OMWorkersError

    files, missing = data_files(paths)
    for path in missing:
        typer.echo(f"om eval locomo: no LoCoMo data at {path}; skipped", err=True)
    if not files:
        # On stderr with --json: stdout is for the JSON report only.
        message = "om eval locomo: no LoCoMo data found; nothing to evaluate (skipped)"
        typer.echo(message, err=as_json)
        raise typer.Exit(0)
    try:
        conversations = [c for f in files for c in load_conversations(f)]
    except (LocomoFormatError, OSError) as exc:
        _fail(str(exc), 2)
    if (runs != 1 or baselines) and not answer:
        _fail("--runs and --baselines need --answer", 2)
    settings = get_settings()
    judge = _judge(settings) if answer else None
    tag = secrets.token_hex(4) if api_url else ""
    target: InProcessTarget | ApiTarget = (
        _api_target(settings, api_url, key, force, job_timeout, max_tokens)
        if api_url
        else _local_target(settings, settings_json, force, max_tokens)
    )
    try:
        results = _replay(conversations, target, tag, judge, runs, baselines)
    except (EvalError, OMWorkersError) as exc:
        _fail(str(exc))
    finally:
        if hasattr(target, "close"):
            target.close()
    meta: dict[str, Any] = {
        "files": [str(f) for f in files],
        "mode": "api" if api_url else "in-process",
        "api_url": api_url,
        "force": force,
        "provider": settings.llm.provider,
        "model": settings.llm.model,
        "max_tokens": max_tokens,
        "answer": answer,
        "runs": runs if answer else None,
        "baselines": list(BASELINES) if answer and baselines else [],
        # Which observer/reflector instructions made this memory: compare reports by it.
        "prompt_version": ", ".join(sorted(target.prompt_versions)) or None,
    }
    if not api_url:
        meta["settings"] = target.settings.to_json_dict()  # type: ignore[union-attr]
        meta["max_tokens"] = target.max_tokens  # type: ignore[union-attr]
    markdown = _heading(meta) + to_markdown(results, judged=answer)
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


def _local_target(
    settings: Settings, settings_json: str | None, force: bool, max_tokens: int | None
) -> InProcessTarget:
    from om_api.evaluation.targets import InProcessTarget
    from om_core import resolve_settings
    from om_core.errors import ObservationalMemoryError
    from om_workers.prompts import load_prompts
    from om_workers.providers.setup import provider_factory, worker_models

    try:
        raw = json.loads(settings_json) if settings_json else dict(settings.memory_settings)
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
        force=force,
        max_tokens=max_tokens or settings.api.context_max_tokens,
        prompts=prompts,
    )


def _api_target(
    settings: Settings,
    url: str,
    key: str | None,
    force: bool,
    job_timeout: float,
    max_tokens: int | None,
) -> ApiTarget:
    from om_api.evaluation.targets import ApiTarget

    secret = key or (settings.cli.api_key.get_secret_value() if settings.cli.api_key else "")
    if not secret:
        _fail("--api needs --key or OM_API_KEY", 2)
    return ApiTarget(url, secret, force=force, job_timeout_s=job_timeout, max_tokens=max_tokens)


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
    conversations: list[Any],
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
