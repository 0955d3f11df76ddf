"""Every error consumer_lib raises derives from ConsumerError; `retriable` tells whether
trying again later can succeed."""

from __future__ import annotations


class ConsumerError(Exception):
    retriable: bool = False


class ConsumerConfigError(ConsumerError, ValueError):
    """Invalid settings or app definition; the consumer refuses to start."""


class TransientError(ConsumerError):
    """Raise (or subclass) from a handler for a failure that should be retried without
    counting against the record's attempts: a dependency that is briefly down."""

    retriable = True


class PoisonRecord(ConsumerError):
    """The record can never be processed: it goes to the dead-letter topic."""
