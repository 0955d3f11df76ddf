"""Kafka's rule for topic names (kafka.common.internals.Topic), written once.

A client asked to send to a name the broker can never accept does not fail at once: it
waits for the topic's metadata until its request timeout. So every name we make or are
given (a dead-letter topic, a row's topic) is judged here first.
"""

from __future__ import annotations

import re

MAX_TOPIC_CHARS = 249
_LEGAL = re.compile(rf"[a-zA-Z0-9._-]{{1,{MAX_TOPIC_CHARS}}}")
# Legal characters, yet refused by the broker: they name the current and parent directory
# of its log directories.
_RESERVED = frozenset({".", ".."})

TOPIC_RULE = f"1 to {MAX_TOPIC_CHARS} of a-z, A-Z, 0-9, '.', '_', '-', and not '.' or '..'"


def legal_topic(name: str) -> bool:
    """Whether a Kafka broker can ever hold a topic of this name."""
    return _LEGAL.fullmatch(name) is not None and name not in _RESERVED
