"""docs/settings.md is generated from the settings model, and the OM_* names the code reads
and the docs mention are the same set (variables only tests read are named as such)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path
from typing import Final

from om_workers.config import Settings
from om_workers.settings_env import env_names
from om_workers.settings_reference import (
    NOT_SETTINGS,
    REGENERATE,
    render_reference,
    with_groups,
)

ROOT: Final = Path(__file__).resolve().parents[2]
REFERENCE: Final = ROOT / "docs" / "settings.md"
PACKAGES: Final = ("om_core", "om_workers", "om_api")
SCRIPTS: Final = ("tests", "examples", "deploy")
DOCS: Final = (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")))

TEST_ONLY: Final = {
    "OM_TEST_PROVIDER_DELAY_S": "tests: the e2e slow provider's delay per call (workers the "
    "tests start read it through tests.e2e.providers)",
    "OM_TEST_THIEF_TENANT": "tests: the tenant the e2e lock-stealing provider targets",
    "OM_SERVICES": "tests: which services the deploy rehearsal starts",
    "OM_IMAGE": "deploy/compose.yaml interpolation only: the image every om service runs; no "
    "om process reads it",
}
"""OM_* names that are no setting and not in the reference, and who uses them instead."""

# OM_LOCK_TTL_S, or a family written OM_RATE_* (a prefix).
_NAME = re.compile(r"\bOM_[A-Z0-9_]*[A-Z0-9](?:_\*)?|\bOM_[A-Z0-9_]+\*")


def _names(texts: Iterable[str]) -> set[str]:
    return {match for text in texts for match in _NAME.findall(text)}


def _files(folders: Iterable[str], pattern: str) -> list[Path]:
    return [path for folder in folders for path in sorted((ROOT / folder).rglob(pattern))]


def _deploy_files() -> list[Path]:
    return [p for p in sorted((ROOT / "deploy").rglob("*")) if p.is_file() and p.suffix != ".py"]


def _read(paths: Iterable[Path]) -> list[str]:
    return [path.read_text(encoding="utf-8") for path in paths]


def _covered(name: str, known: set[str]) -> bool:
    """A name, or a family ``OM_RATE_*`` that at least one known name belongs to."""
    if name.endswith("*"):
        return any(k.startswith(name.rstrip("*")) for k in known)
    return name in known


def test_the_committed_reference_is_the_generated_one() -> None:
    committed = REFERENCE.read_text(encoding="utf-8")
    assert committed == render_reference(), (
        f"docs/settings.md is out of date with om_workers/config.py; regenerate it: {REGENERATE}"
    )
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert readme == with_groups(readme), (
        f"README.md's table of settings groups is out of date; regenerate it: {REGENERATE}"
    )


def test_every_setting_and_every_test_variable_is_in_the_reference() -> None:
    reference = REFERENCE.read_text(encoding="utf-8")
    listed = _names([reference])
    assert env_names(Settings) <= listed, env_names(Settings) - listed
    assert set(NOT_SETTINGS) <= listed
    assert not set(TEST_ONLY) & listed, "a reference variable is also in the allow-list"


def test_every_name_the_code_reads_is_in_the_reference() -> None:
    listed = _names([REFERENCE.read_text(encoding="utf-8")])
    in_packages = _names(_read(_files(PACKAGES, "*.py")))
    # The reference's own module names the test variables it lists.
    unknown = {n for n in in_packages if not _covered(n, env_names(Settings) | set(NOT_SETTINGS))}
    assert not unknown, f"the packages name {unknown}, which are no setting"
    in_scripts = _names(_read(_files(SCRIPTS, "*.py")))
    unknown = {n for n in in_scripts if not _covered(n, listed | set(TEST_ONLY))}
    assert not unknown, f"tests or scripts read {unknown}: a setting, or add it to TEST_ONLY"


def test_every_name_the_docs_mention_is_read_by_the_code() -> None:
    code = _read(_files(PACKAGES + SCRIPTS, "*.py"))
    read_by_tests = {n for n in NOT_SETTINGS if any(n in text for text in code)}
    assert read_by_tests == set(NOT_SETTINGS), "a NOT_SETTINGS variable is read by nothing"
    known = env_names(Settings) | read_by_tests | set(TEST_ONLY)
    for path, text in zip([*DOCS, *_deploy_files()], _read([*DOCS, *_deploy_files()]), strict=True):
        unknown = {n for n in _names([text]) if not _covered(n, known)}
        assert not unknown, f"{path.relative_to(ROOT)} names {unknown}, which nothing reads"


def test_test_only_variables_are_really_used_by_tests_or_deploy_files() -> None:
    scripts = _read(_files(SCRIPTS, "*.py")) + _read(_deploy_files())
    for name in TEST_ONLY:
        assert any(name in text for text in scripts), f"{name} is used nowhere; drop it"
