"""Subjects: the end users sessions are about. A session names its subject in its metadata,
so that every session about one person can be erased at once (``DELETE
/v1/subjects/{subject}``)."""

from typing import Final

SUBJECT_KEY: Final = "subject"
"""The session metadata key naming the end user a session is about: an erasure by subject
hides every session of the tenant whose ``metadata.subject`` is that string."""
