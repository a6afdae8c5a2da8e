"""Relative dates ("yesterday", "last week", "two months ago") anchored to a message's date.

Pure functions of the text and the message's own date: no clock is read, and an expression is
anchored only when its absolute date follows from that date ("this Friday", "next weekend"
and anything after "the" are left alone: they may mean more than one day).
"""

from __future__ import annotations

import re
from datetime import date, datetime, timedelta

# fmt: off
MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August",
          "September", "October", "November", "December")
WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
NUMBER_WORDS = ("one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
                "eleven", "twelve")
_DAY_OFFSETS = {"day before yesterday": -2, "yesterday": -1, "last night": -1, "today": 0,
                "tonight": 0, "tomorrow": 1, "day after tomorrow": 2}
# fmt: on
_COUNTS = {word: n for n, word in enumerate(NUMBER_WORDS, start=1)} | {"a": 1, "an": 1}
# "the last week" / "the last night of the trip" mean a span, not a calendar date: not anchored.
RELATIVE_DATE = re.compile(
    r"(?<!\bthe )\b(?:"
    r"(?P<day>(?:the )?day (?:before yesterday|after tomorrow)|yesterday|last night|today"
    r"|tonight|tomorrow)"
    r"|(?P<which>last|this|next) (?P<span>week(?:end)?|month|year|" + "|".join(WEEKDAYS) + ")"
    r"|(?P<count>\d{1,3}|an?|" + "|".join(NUMBER_WORDS) + r") (?P<unit>day|week|month|year)s?"
    r" ago)\b(?!['’])",
    re.IGNORECASE,
)


def message_day(value: object) -> date | None:
    """The date of an ISO 8601 timestamp (a transcript line's ``time``), else ``None``."""
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value).date()
    except ValueError:
        return None


def _format_day(day: date) -> str:
    return f"{day.day} {MONTHS[day.month - 1]} {day.year}"


def _format_month(day: date, shift: int) -> str:
    index = day.year * 12 + day.month - 1 + shift
    return f"{MONTHS[index % 12]} {index // 12}"


def _span_anchor(day: date, which: str, span: str) -> str | None:
    step = {"last": -1, "this": 0, "next": 1}[which]
    monday = day - timedelta(days=day.weekday())
    if span in WEEKDAYS:
        if step == 0:
            return None  # "this Friday" may be the past or the coming one
        target = WEEKDAYS.index(span)
        delta = ((target - day.weekday()) * step) % 7 or 7
        return _format_day(day + timedelta(days=delta * step))
    if span == "week":
        return f"week of {_format_day(monday + timedelta(weeks=step))}"
    if span == "weekend":
        # "next weekend" said on a weekday may mean the coming one or the one after
        saturday = monday + timedelta(days=5 + 7 * step)
        return None if step == 1 else f"weekend of {_format_day(saturday)}"
    if span == "month":
        return _format_month(day, step)
    return str(day.year + step)


def _anchor_for(match: re.Match[str], day: date) -> str | None:
    said = match.groupdict()
    if said["day"]:
        offset = _DAY_OFFSETS[said["day"].lower().removeprefix("the ")]
        return _format_day(day + timedelta(days=offset))
    if said["count"]:
        count = said["count"].lower()
        n = _COUNTS[count] if count in _COUNTS else int(count)
        unit = said["unit"].lower()
        if unit in ("day", "week"):
            return _format_day(day - timedelta(days=n * (7 if unit == "week" else 1)))
        return _format_month(day, -n) if unit == "month" else str(day.year - n)
    return _span_anchor(day, said["which"].lower(), said["span"].lower())


def anchor_relative_dates(segment: str, day: date | None) -> str:
    """``segment`` with each relative date followed by its absolute date in brackets."""
    if day is None:
        return segment

    def bracket(match: re.Match[str]) -> str:
        already = match.string.startswith(" [", match.end())
        anchor = None if already else _anchor_for(match, day)
        return f"{match.group(0)} [{anchor}]" if anchor else match.group(0)

    return RELATIVE_DATE.sub(bracket, segment)
