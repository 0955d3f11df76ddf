"""The registry of named SQL blocks, loaded from outbox_core/sql/<dialect>/*.sql.

Each file holds the queries of one table; a block starts with `-- name: <noun_verb>`.
No SQL lives in Python code.

A rule that several statements of a file share is written once, as a fragment:

    -- fragment: key_not_blocked
    NOT EXISTS (...)

    -- fragment: claim_rows(rule, tenant)
    SELECT ... WHERE e.shard = s.shard {{tenant}} AND ... {{rule}}

    -- name: outbox_claim_batch
    {{claim_rows(rule=key_not_blocked, tenant=nothing)}}

`{{name}}` stands for a fragment of the same file (or its shared twin, below); `{{name(slot=value, ...)}}` fills the
fragment's slots, each with a fragment's name, one of the enclosing fragment's own slots,
or `nothing` (no text). Every slot is filled explicitly, so a statement that leaves a rule
out says so. References are expanded once, when the registry loads: the statements it
hands out are whole static SQL, as if written out (drivers prepare and plan them as
such). A multi-line fragment takes the indentation of the line it stands on; a line
holding only a reference that expands to nothing is dropped. The comment lines a fragment
starts with document it in the .sql file and are not copied into statements.

What every dialect writes alike stands once in sql/shared/<table>.sql, with `:name`
parameters (rewritten to the dialect driver's style at load); its blocks and the
dialect's file for the table are one scope, so a shared statement is composed from
fragments each dialect writes its own way. A new dialect writes those fragments and takes
the shared statements as they are.

Loading refuses, with the file and statement named: an unknown fragment or slot, a slot
left unfilled or filled twice, a fragment referring to itself through any chain, a
fragment no statement uses, a slot its fragment never uses, a name defined twice, and any
`{{` or `}}` that is not a well-formed reference.

Postgres blocks use pyformat placeholders (`%(name)s`, `%%` for a percent sign),
which psycopg and psycopg2 take as they are; asyncpg takes `$1, $2, ...` and a tuple,
which `numbered` derives from the same block.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from importlib import resources
from importlib.resources.abc import Traversable

from outbox_core.database_url import DIALECTS, Dialect

__all__ = [
    "DIALECTS",
    "SHARED",
    "Dialect",
    "NumberedQuery",
    "in_parameter_style",
    "numbered",
    "parse_blocks",
    "queries",
    "query",
]

SHARED = "shared"  # sql/shared/<table>.sql: the blocks every dialect takes

NOTHING = "nothing"  # the slot value that stands for no text

_IDENT = r"[a-z][a-z0-9_]*"
# Any line that starts like a block header is one, so a typo cannot turn a block into a
# comment of the previous one.
_HEADER = re.compile(r"^--\s*(name|fragment):(.*)$", re.MULTILINE)
_NAME_HEADER = re.compile(rf"\s*({_IDENT})\s*")
_FRAGMENT_HEADER = re.compile(rf"\s*({_IDENT})\s*(?:\(([^()]*)\))?\s*")
_REFERENCE = re.compile(rf"\{{\{{\s*({_IDENT})\s*(?:\(([^(){{}}]*)\))?\s*\}}\}}")
_ARGUMENT = re.compile(rf"\s*({_IDENT})\s*=\s*({_IDENT})\s*")
_SLOT = re.compile(rf"\s*({_IDENT})\s*")
_PYFORMAT = re.compile(r"%\((\w+)\)s|%%|%")


@dataclass(frozen=True)
class _Fragment:
    slots: tuple[str, ...]
    body: str


def _split_list(text: str | None, item: re.Pattern[str], what: str) -> list[re.Match[str]]:
    if text is None:
        return []
    matches = [item.fullmatch(part) for part in text.split(",")]
    if not text.strip() or None in matches:
        raise ValueError(f"malformed {what}: ({text})")
    return [m for m in matches if m is not None]


def _fragment_header(header: str) -> tuple[str, tuple[str, ...]]:
    match = _FRAGMENT_HEADER.fullmatch(header)
    if match is None:
        raise ValueError(f"malformed fragment header: {header.strip()!r}")
    slots = tuple(m[1] for m in _split_list(match[2], _SLOT, "slot list"))
    if len(set(slots)) != len(slots):
        raise ValueError(f"fragment {match[1]!r} names a slot twice")
    return match[1], slots


def _strip_doc(body: str) -> str:
    """A fragment's leading comment lines document it; they stay in the .sql file."""
    lines = body.strip().splitlines()
    while lines and lines[0].lstrip().startswith("--"):
        lines.pop(0)
    return "\n".join(lines).strip()


class _Expander:
    """Expands the references of one file's statements, recording what was used."""

    def __init__(self, fragments: dict[str, _Fragment], source: str) -> None:
        self.fragments = fragments
        self.source = source
        self.used: set[str] = set()

    def statement(self, name: str, text: str) -> str:
        try:
            return self._expand(text, {}, ())
        except ValueError as exc:
            raise ValueError(f"{self.source}: query {name!r}: {exc}") from None

    def _expand(self, text: str, slots: dict[str, str], chain: tuple[str, ...]) -> str:
        out: list[str] = []
        for line in text.splitlines():
            rest = _REFERENCE.sub("", line)
            if "{{" in rest or "}}" in rest:
                raise ValueError(f"malformed fragment reference in: {line.strip()}")
            indent = line[: len(line) - len(line.lstrip())]
            expand = functools.partial(self._one, slots=slots, chain=chain, indent=indent)
            expanded = _REFERENCE.sub(expand, line)
            if not rest.strip() and not expanded.strip():
                continue  # a line of references that stand for nothing
            out.append(expanded)
        return "\n".join(out)

    def _one(
        self, match: re.Match[str], slots: dict[str, str], chain: tuple[str, ...], indent: str
    ) -> str:
        name, arguments = match[1], match[2]
        if name in slots:
            if arguments is not None:
                raise ValueError(f"slot {name!r} takes no arguments")
            return slots[name].replace("\n", "\n" + indent)
        if name == NOTHING:
            raise ValueError(f"{NOTHING!r} fills a slot; it is not a fragment")
        fragment = self.fragments.get(name)
        if fragment is None:
            raise ValueError(f"unknown fragment {name!r}")
        if name in chain:
            raise ValueError("fragments refer to themselves: " + " -> ".join((*chain, name)))
        given: dict[str, str] = {}
        for argument in _split_list(arguments, _ARGUMENT, f"arguments of {name!r}"):
            slot, value = argument[1], argument[2]
            if slot not in fragment.slots:
                raise ValueError(f"fragment {name!r} has no slot {slot!r}")
            if slot in given:
                raise ValueError(f"slot {slot!r} of {name!r} is filled twice")
            given[slot] = self._value(value, slots, chain)
        missing = [slot for slot in fragment.slots if slot not in given]
        if missing:
            raise ValueError(f"fragment {name!r} needs slot(s) {', '.join(missing)}")
        self.used.add(name)
        body = self._expand(fragment.body, given, (*chain, name))
        return body.replace("\n", "\n" + indent)

    def _value(self, value: str, slots: dict[str, str], chain: tuple[str, ...]) -> str:
        if value == NOTHING:
            return ""
        if value in slots:
            return slots[value]
        return self._expand("{{" + value + "}}", slots, chain)


def _names_in(body: str) -> set[str]:
    """Every name a fragment's body refers to, as a reference or a slot's value."""
    names: set[str] = set()
    for match in _REFERENCE.finditer(body):
        names.add(match[1])
        names.update(m[2] for m in _ARGUMENT.finditer(match[2] or ""))
    return names


def _fragment(name: str, slots: tuple[str, ...], body: str) -> _Fragment:
    fragment = _Fragment(slots, _strip_doc(body))
    if not fragment.body:
        raise ValueError(f"fragment {name!r} is empty")
    unused = sorted(set(slots) - _names_in(fragment.body))
    if unused:
        raise ValueError(f"fragment {name!r} never uses slot(s) {', '.join(unused)}")
    return fragment


def _without_trailing_comments(body: str) -> str:
    """A block's text without the comment lines after its statement: they open the next
    section of the file (a heading, the next block's words), and left at the end of a
    statement they hid its `;`, and the INSERT a driver folds into one multi-row INSERT
    no longer looked like one."""
    lines = body.strip().splitlines()
    while lines and (not lines[-1].strip() or lines[-1].lstrip().startswith("--")):
        del lines[-1]
    return "\n".join(lines).strip()


def _read_blocks(text: str) -> tuple[dict[str, str], dict[str, _Fragment]]:
    """The file's statements (unexpanded) and fragments."""
    parts = _HEADER.split(text)
    statements: dict[str, str] = {}
    fragments: dict[str, _Fragment] = {}
    for kind, header, body in zip(parts[1::3], parts[2::3], parts[3::3], strict=True):
        slots: tuple[str, ...] = ()
        if kind == "fragment":
            name, slots = _fragment_header(header)
        elif match := _NAME_HEADER.fullmatch(header):
            name = match[1]
        else:
            raise ValueError(f"malformed query header: {header.strip()!r}")
        if name in statements or name in fragments:
            raise ValueError(f"{name!r} is defined twice")
        if NOTHING in (name, *slots):
            raise ValueError(f"{NOTHING!r} is reserved for an empty slot")
        statement = _without_trailing_comments(body).rstrip(";").strip()
        if kind == "fragment":
            fragments[name] = _fragment(name, slots, statement)
        elif statement:
            statements[name] = statement
        else:
            raise ValueError(f"query {name!r} is empty")
    for name, fragment in fragments.items():
        shadowing = [slot for slot in fragment.slots if slot in fragments]
        if shadowing:
            raise ValueError(
                f"fragment {name!r}: slot(s) {', '.join(shadowing)} have the name of a fragment"
            )
    return statements, fragments


def _merge(
    into: tuple[dict[str, str], dict[str, _Fragment]],
    more: tuple[dict[str, str], dict[str, _Fragment]],
) -> None:
    for name in (set(more[0]) | set(more[1])) & (set(into[0]) | set(into[1])):
        raise ValueError(f"{name!r} is defined in both files")
    into[0].update(more[0])
    into[1].update(more[1])


def parse_blocks(text: str, source: str = "<sql>", *, shared: str | None = None) -> dict[str, str]:
    """Split a .sql file into {name: statement}, fragments expanded; comments before a
    block stay with it. shared: the text of the blocks every dialect takes for this table
    (already in this dialect's parameter style), one scope with this file's."""
    try:
        blocks = _read_blocks(text)
        if shared is not None:
            _merge(blocks, _read_blocks(shared))
    except ValueError as exc:
        raise ValueError(f"{source}: {exc}") from None
    statements, fragments = blocks
    expander = _Expander(fragments, source)
    expanded = {name: expander.statement(name, body) for name, body in statements.items()}
    unused = sorted(set(fragments) - expander.used)
    if unused:
        raise ValueError(f"{source}: fragment(s) no query uses: {', '.join(unused)}")
    return expanded


# How each dialect's driver writes a named parameter: sqlite3 takes `:name` as the shared
# files do; psycopg takes `%(name)s`, and a literal % doubled.
# PyMySQL and aiomysql take pyformat as psycopg does (and render it on the client).
_PARAMETER_STYLE: dict[Dialect, str] = {
    "postgres": "pyformat",
    "sqlite": "named",
    "mariadb": "pyformat",
}
# A quoted string or a comment (left as they are but for %), a `:name` parameter (not the
# second colon of a `::` cast), or a lone %.
_SHARED_TOKEN = re.compile(rf"'(?:[^']|'')*'|--[^\n]*|(?<![:\w]):({_IDENT})|%")


def in_parameter_style(text: str, dialect: Dialect) -> str:
    """A shared file's text (`:name` parameters) as the dialect's driver takes it."""
    if _PARAMETER_STYLE[dialect] == "named":
        return text

    def rewrite(match: re.Match[str]) -> str:
        if match[1] is not None:
            return f"%({match[1]})s"
        return match[0].replace("%", "%%")

    return _SHARED_TOKEN.sub(rewrite, text)


def _sql_files(folder: Traversable) -> dict[str, Traversable]:
    if not folder.is_dir():
        return {}
    return {e.name: e for e in folder.iterdir() if e.name.endswith(".sql")}


@functools.cache
def queries(dialect: Dialect) -> dict[str, str]:
    """All named queries of one dialect, from every table's file and its shared twin."""
    found: dict[str, str] = {}
    root = resources.files("outbox_core") / "sql"
    own, shared = _sql_files(root / dialect), _sql_files(root / SHARED)
    for file in sorted(own.keys() | shared.keys()):
        source = " + ".join(
            f"{d}/{file}" for d, f in ((dialect, own), (SHARED, shared)) if file in f
        )
        common = shared[file].read_text("utf-8") if file in shared else None
        blocks = parse_blocks(
            own[file].read_text("utf-8") if file in own else "",
            source,
            shared=None if common is None else in_parameter_style(common, dialect),
        )
        for name, statement in blocks.items():
            if name in found:
                raise ValueError(f"{source}: query {name!r} is defined twice")
            found[name] = statement
    return found


def query(dialect: Dialect, name: str) -> str:
    try:
        return queries(dialect)[name]
    except KeyError:
        raise KeyError(f"no query {name!r} for {dialect}") from None


@dataclass(frozen=True)
class NumberedQuery:
    """A block with `$n` placeholders; names[i] is the parameter that binds to $(i+1)."""

    sql: str
    names: tuple[str, ...]


def to_numbered(sql: str) -> NumberedQuery:
    """`%(name)s` -> `$n` (one number per distinct name, in order of first use), `%%` -> `%`."""
    names: list[str] = []

    def replace(match: re.Match[str]) -> str:
        name = match.group(1)
        if name is None:
            if match.group(0) == "%":
                raise ValueError(f"a lone % in a pyformat statement: {sql[:60]!r}")
            return "%"
        if name not in names:
            names.append(name)
        return f"${names.index(name) + 1}"

    return NumberedQuery(_PYFORMAT.sub(replace, sql), tuple(names))


@functools.cache
def numbered(dialect: Dialect, name: str) -> NumberedQuery:
    """query(dialect, name) with numbered placeholders, for drivers that take no names."""
    return to_numbered(query(dialect, name))
