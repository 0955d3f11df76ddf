"""The operator subcommands of `outbox-relay`: status, parked list|retry|discard, replay.

Tables for people, --json for scripts. Every write lists its rows first and then acts on
exactly those, by id, in one transaction (a row that changed in between is left alone
and named); --dry-run stops after the listing. discard and replay ask for confirmation on
a terminal; elsewhere they need --yes. Strings from the outbox (topics, keys, errors) are
printed with control characters escaped, so no producer can write to the operator's
terminal. Exit codes: 0 done; 2 bad arguments (or a confirmation needed without a
terminal); 3 some ids given by the operator were not found (or not eligible) and were
left alone; 4 the operator declined the confirmation.
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
    if not (text.isascii() and text.isdigit()) or not 1 <= int(text) < 2**63:
        raise argparse.ArgumentTypeError(f"{text!r} is not a row id")
    return int(text)


def limit(text: str) -> int:
    """A row limit: 1 to admin.MAX_LIMIT."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 1 <= value <= admin.MAX_LIMIT:
        raise argparse.ArgumentTypeError(
            f"{value} is out of range: 1 to {admin.MAX_LIMIT} (or --all, where offered)"
        )
    return value


def printable(value: object) -> str:
    """The text with every control or invisible formatting character escaped (\x1b, \u202e):
    escape sequences in producer-supplied strings never reach the terminal as such."""
    text = "" if value is None else str(value)
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode() for c in text)


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
            "--limit",
            type=limit,
            default=None,
            help=f"at most this many rows (default 1000, at most {admin.MAX_LIMIT})",
        )
        p.add_argument("--json", action="store_true", help="print JSON")
        if name != "list":
            p.add_argument(
                "--all",
                action="store_true",
                help="every matching row, however many (needed to act without a filter)",
            )
            p.add_argument(
                "--dry-run", action="store_true", help="list the rows it would change; change none"
            )
        if name == "discard":
            p.add_argument(
                "--yes",
                action="store_true",
                help="do not ask for confirmation (needed without a terminal)",
            )

    rp = commands.add_parser(
        "replay", help="publish retained (retention=keep) events again, by id or publish time"
    )
    add_database(rp)
    rp.add_argument("--id", dest="ids", type=row_id, action="append", help="a row id (repeatable)")
    rp.add_argument("--since", type=timestamp, help="published at or after (ISO-8601 with zone)")
    rp.add_argument("--until", type=timestamp, help="published before (ISO-8601 with zone)")
    rp.add_argument(
        "--limit",
        type=limit,
        default=1000,
        help=f"at most this many rows (default 1000, at most {admin.MAX_LIMIT})",
    )
    rp.add_argument("--json", action="store_true", help="print JSON")
    rp.add_argument(
        "--dry-run", action="store_true", help="list the rows it would replay; replay none"
    )
    rp.add_argument(
        "--yes", action="store_true", help="do not ask for confirmation (needed without a terminal)"
    )


def _table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    cells = [[str(h) for h in headers]] + [[printable(v) for v in r] for r in rows]
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
    s = admin.status(url, pooler=args.database_pooler)
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
    all_rows = getattr(args, "all", False)
    return admin.RowFilter(
        ids=args.ids,
        topic=args.topic,
        key=args.key,
        error=args.error,
        min_age_s=args.older_than,
        limit=None if all_rows else (args.limit or 1000),
    )


def _usage(message: str) -> int:
    print(f"outbox-relay: {message}", file=sys.stderr)
    return 2


def _confirm(args: argparse.Namespace, question: str, listing: str = "") -> int | None:
    """None to go on; else the exit code (declined, or no terminal to ask on). The listing
    is shown before the question."""
    if args.yes:
        return None
    if not sys.stdin.isatty():
        return _usage(
            f"{args.command} {getattr(args, 'action', '') or ''}".strip()
            + " asks for confirmation and there is no terminal to ask on: "
            "pass --yes (see what it would do with --dry-run first)"
        )
    if listing:
        print(listing)
    try:
        answer = input(f"{question} [y/N] ")
    except EOFError:
        answer = ""
    if answer.strip().lower() not in ("y", "yes"):
        print("nothing changed")
        return EXIT_DECLINED
    return None


def _parked_table(rows: Sequence[admin.ParkedRow]) -> str:
    return _table(
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


def _parked(args: argparse.Namespace, url: str) -> int:
    if getattr(args, "all", False) and args.limit is not None:
        return _usage("--all takes every matching row: leave out --limit")
    f = _filter(args)
    if args.action == "list":
        rows = admin.parked_list(url, f, pooler=args.database_pooler)
        text = _parked_table(rows) + f"\n{len(rows)} parked row(s)"
        _emit(args, [dataclasses.asdict(r) for r in rows], text)
        return 0
    if not f.narrowed and not args.all:
        return _usage(
            f"parked {args.action} needs --id, a filter, or --all to act on every parked row"
        )
    rows = admin.parked_list(url, f, pooler=args.database_pooler)
    asked_missing = sorted(set(f.ids or []) - {r.id for r in rows})
    if not rows:
        text = "no parked rows match"
        if asked_missing:
            text += f"\nnot found or not parked: {', '.join(map(str, asked_missing))}"
        _emit(args, dataclasses.asdict(admin.Changed([], asked_missing)), text)
        return EXIT_MISSING if asked_missing else 0
    if args.dry_run:
        text = _parked_table(rows) + f"\nwould {args.action} {len(rows)} parked row(s)"
        _emit(args, {"would": [r.id for r in rows], "missing": asked_missing}, text)
        return 0
    if args.action == "discard":
        shown = rows[:20]
        more = f"\n... and {len(rows) - len(shown)} more" if len(rows) > len(shown) else ""
        declined = _confirm(
            args,
            f"discard these {len(rows)} parked row(s)? Their events are lost for good.",
            _parked_table(shown) + more,
        )
        if declined is not None:
            return declined
    changed = admin.parked_act(url, args.action, [r.id for r in rows], pooler=args.database_pooler)
    verb = "retried" if args.action == "retry" else "discarded"
    missing = sorted(set(asked_missing) | set(changed.missing))
    text = f"{verb} {len(changed.ids)} row(s): {_ids_text(changed.ids)}"
    if changed.missing:
        text += f"\nchanged since they were listed, left alone: {_ids_text(changed.missing)}"
    if asked_missing:
        text += f"\nnot found or not parked: {_ids_text(asked_missing)}"
    _emit(args, dataclasses.asdict(admin.Changed(changed.ids, missing)), text)
    return EXIT_MISSING if missing else 0


def _ids_text(ids: Sequence[int]) -> str:
    if len(ids) > 50:
        return ", ".join(map(str, ids[:50])) + f", ... ({len(ids)} in all)"
    return ", ".join(map(str, ids)) or "-"


def _replay(args: argparse.Namespace, url: str) -> int:
    if not (args.ids or args.since or args.until):
        return _usage("replay needs --id, --since or --until")
    if args.since and args.until and args.since >= args.until:
        return _usage("--since must be before --until")
    chosen = admin.replay_list(
        url,
        ids=args.ids,
        since=args.since,
        until=args.until,
        limit=args.limit,
        pooler=args.database_pooler,
    )
    asked_missing = sorted(set(args.ids or []) - set(chosen))
    if args.dry_run or not chosen:
        text = f"would replay {len(chosen)} row(s): {_ids_text(chosen)}"
        if asked_missing:
            text += f"\nnot found or not retained: {_ids_text(asked_missing)}"
        _emit(args, {"would": chosen, "missing": asked_missing}, text)
        return EXIT_MISSING if asked_missing and not chosen else 0
    if len(chosen) == args.limit:
        print(f"note: --limit {args.limit} reached; later matching rows are not included")
    declined = _confirm(
        args, f"replay {len(chosen)} row(s) ({_ids_text(chosen)})? They are published again."
    )
    if declined is not None:
        return declined
    changed = admin.replay_ids(url, chosen, pooler=args.database_pooler)
    missing = sorted(set(asked_missing) | set(changed.missing))
    text = f"replayed {len(changed.ids)} row(s)"
    if changed.missing:
        text += f"\nchanged since they were listed, left alone: {_ids_text(changed.missing)}"
    if asked_missing:
        text += f"\nnot found or not retained: {_ids_text(asked_missing)}"
    _emit(args, dataclasses.asdict(admin.Changed(changed.ids, missing)), text)
    return EXIT_MISSING if missing else 0
