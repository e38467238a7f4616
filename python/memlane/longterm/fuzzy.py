"""The fuzzy rule ``recall`` matches keys, values and queries by: a pure function.

A query is a sequence of words. It matches a text when every word occurs in it as a
substring, case-insensitively, in the query's order (SQL's ``ILIKE '%local%time%'``).
Spaces, underscores and hyphens (and any other whitespace) only separate words, in the query
and in the text alike, so ``"local time"`` matches ``lesson_local_time_command``,
``local_time_zone`` and ``get-local-time``, and not ``time_local``. Every other character,
``%``, quotes, ``$`` and regular-expression metacharacters included, matches itself.
"""

from __future__ import annotations

__all__ = ["fuzzy_match", "matches_words", "normalize", "query_words"]

_SEPARATORS = str.maketrans({"_": " ", "-": " "})


def normalize(text: str) -> str:
    """``text`` lower-cased, with underscores and hyphens made spaces."""
    return text.lower().translate(_SEPARATORS)


def query_words(query: str) -> list[str]:
    """The words of ``query``, lower-cased: ``"Local_TIME zone"`` gives ``local, time, zone``."""
    return normalize(query).split()


def matches_words(words: list[str], text: str) -> bool:
    """Whether the (already normalised) ``words`` occur in ``text`` in order.

    Taking each word's leftmost occurrence after the previous one is enough: any match of
    the whole sequence can be shifted left onto those occurrences.
    """
    haystack = normalize(text)
    start = 0
    for word in words:
        found = haystack.find(word, start)
        if found < 0:
            return False
        start = found + len(word)
    return True


def fuzzy_match(query: str, text: str) -> bool:
    """Whether ``text`` matches ``query`` by the fuzzy rule (a query without words matches all)."""
    return matches_words(query_words(query), text)
