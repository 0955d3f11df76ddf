"""The operator subcommands of `outbox-relay`: status, parked list|retry|discard, replay.

Tables for people, --json for scripts. Exit codes: 0 done; 2 bad arguments; 3 some ids
given by the operator were not found (or not eligible) and were left alone; 4 the
operator declined the confirmation.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import re
import sys
from collections.abc import Sequence
from typing import Any

from relay.ops import admin

EXIT_MISSING = 3
EXIT_DECLINED = 4

_DURATION = re.compile(r"^(\d+(?:\.\d+)?)([smhd]?)$")
_UNIT = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def duration(text: str) -> float:
    """'90', '90s', '15m', '2h', '7d' -> seconds."""
    m = _DURATION.match(text.strip())
    if not m:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration like 90s, 15m, 2h or 7d")
    return float(m.group(1)) * _UNIT[m.group(2)]


def timestamp(text: str) -> dt.datetime:
    try:
        value = dt.datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an ISO-8601 time") from None
    if value.tzinfo is None:
        raise argparse.ArgumentTypeError(f"{text!r} has no time zone (add Z or +00:00)")
    return value


def row_id(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a row id")
    return int(text)


def add_commands(commands: Any, add_database: Any) -> None:
    st = commands.add_parser("status", help="backlog, parked rows, leases and replicas")
    add_database(st)
    st.add_argument("--json", action="store_true", help="print JSON")

    parked = commands.add_parser("parked", help="list, retry or discard parked rows")
    actions = parked.add_subparsers(dest="action", metavar="ACTION", required=True)
    for name, text in (
        ("list", "list parked rows"),
        ("retry", "make parked rows pending again, with fresh attempts"),
        ("discard", "delete parked rows (asks for confirmation), unblocking their keys"),
    ):
        p = actions.add_parser(name, help=text, description=text)
        add_database(p)
        p.add_argument(
            "--id", dest="ids", type=row_id, action="append", help="a row id (repeatable)"
        )
        p.add_argument("--topic", help="only rows of this topic")
        p.add_argument("--key", help="only rows of this key")
        p.add_argument("--error", help="only rows whose last error contains this text")
        p.add_argument(
            "--older-than",
            type=duration,
            default=0.0,
            help="only rows older than this (90s, 15m, 2h, 7d)",
        )
        p.add_argument(
            "--limit", type=int, default=1000, help="at most this many rows (default 1000)"
        )
        p.add_argument("--json", action="store_true", help="print JSON")
        if name != "list":
            p.add_argument(
                "--all",
                action="store_true",
                help="needed to act on every parked row without a filter",
            )
        if name == "discard":
            p.add_argument("--yes", action="store_true", help="do not ask for confirmation")

    rp = commands.add_parser(
        "replay", help="publish retained (retention=keep) events again, by id or publish time"
    )
    add_database(rp)
    rp.add_argument("--id", dest="ids", type=row_id, action="append", help="a row id (repeatable)")
    rp.add_argument("--since", type=timestamp, help="published at or after (ISO-8601 with zone)")
    rp.add_argument("--until", type=timestamp, help="published before (ISO-8601 with zone)")
    rp.add_argument("--limit", type=int, default=100_000, help="at most this many rows")
    rp.add_argument("--json", action="store_true", help="print JSON")


def _table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    cells = [[str(h) for h in headers]] + [["" if v is None else str(v) for v in r] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = [
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _age(seconds: float) -> str:
    seconds = max(0.0, seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds / size:.1f}{unit}"
    return f"{seconds:.1f}s"


def _emit(args: argparse.Namespace, data: Any, text: str) -> None:
    if getattr(args, "json", False):
        print(json.dumps(data, indent=2, default=str))
    else:
        print(text)


def run(args: argparse.Namespace, database_url: str) -> int:
    if args.command == "status":
        return _status(args, database_url)
    if args.command == "replay":
        return _replay(args, database_url)
    return _parked(args, database_url)


def _status(args: argparse.Namespace, url: str) -> int:
    s = admin.status(url)
    held: dict[str, list[int]] = {}
    for lease in s.leases:
        if lease.owner and lease.live:
            held.setdefault(lease.owner, []).append(lease.shard)
    text = "\n".join(
        [
            f"pending: {s.pending}   oldest pending: {_age(s.oldest_pending_age_s)}   parked: {s.parked}",
            f"shards: {s.shard_count}   replicas seen: {len(s.replicas)}",
            "",
            _table(
                ["shard", "owner", "token", "live"],
                [(x.shard, x.owner or "-", x.token, "yes" if x.live else "no") for x in s.leases],
            ),
            "",
            _table(["replica", "shards held"], [(r, len(held.get(r, []))) for r in s.replicas]),
        ]
    )
    _emit(args, dataclasses.asdict(s), text)
    return 0


def _filter(args: argparse.Namespace) -> admin.RowFilter:
    return admin.RowFilter(
        ids=args.ids,
        topic=args.topic,
        key=args.key,
        error=args.error,
        min_age_s=args.older_than,
        limit=args.limit,
    )


def _parked(args: argparse.Namespace, url: str) -> int:
    f = _filter(args)
    if args.limit < 1:
        print("outbox-relay: --limit must be at least 1", file=sys.stderr)
        return 2
    if args.action == "list":
        rows = admin.parked_list(url, f)
        text = (
            _table(
                ["id", "topic", "key", "type", "attempts", "age", "last error"],
                [
                    (
                        r.id,
                        r.topic,
                        r.key,
                        r.event_type,
                        r.attempts,
                        _age(r.age_s),
                        (r.last_error or "")[:80],
                    )
                    for r in rows
                ],
            )
            + f"\n{len(rows)} parked row(s)"
        )
        _emit(args, [dataclasses.asdict(r) for r in rows], text)
        return 0
    if not f.narrowed and not args.all:
        print(
            f"outbox-relay: parked {args.action} needs --id, a filter, or --all to act on every parked row",
            file=sys.stderr,
        )
        return 2
    if args.action == "discard" and not args.yes:
        rows = admin.parked_list(url, f)
        if not rows:
            missing = sorted(set(f.ids or []))
            text = "no parked rows match"
            if missing:
                text += f"\nnot found or not parked: {', '.join(map(str, missing))}"
            _emit(args, dataclasses.asdict(admin.Changed([], missing)), text)
            return EXIT_MISSING if missing else 0
        answer = input(f"discard {len(rows)} parked row(s)? Their events are lost for good. [y/N] ")
        if answer.strip().lower() not in ("y", "yes"):
            print("nothing discarded")
            return EXIT_DECLINED
    changed = admin.parked_retry(url, f) if args.action == "retry" else admin.parked_discard(url, f)
    verb = "retried" if args.action == "retry" else "discarded"
    text = f"{verb} {len(changed.ids)} row(s): {', '.join(map(str, changed.ids)) or '-'}"
    if changed.missing:
        text += f"\nnot found or not parked: {', '.join(map(str, changed.missing))}"
    _emit(args, dataclasses.asdict(changed), text)
    return EXIT_MISSING if changed.missing else 0


def _replay(args: argparse.Namespace, url: str) -> int:
    if not (args.ids or args.since or args.until):
        print("outbox-relay: replay needs --id, --since or --until", file=sys.stderr)
        return 2
    if args.since and args.until and args.since >= args.until:
        print("outbox-relay: --since must be before --until", file=sys.stderr)
        return 2
    changed = admin.replay(url, ids=args.ids, since=args.since, until=args.until, limit=args.limit)
    text = f"replayed {len(changed.ids)} row(s)"
    if changed.missing:
        text += f"\nnot found or not retained: {', '.join(map(str, changed.missing))}"
    _emit(args, dataclasses.asdict(changed), text)
    return EXIT_MISSING if changed.missing else 0
