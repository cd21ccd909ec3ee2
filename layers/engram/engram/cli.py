"""The `engram` command: the Memory API from a shell, through engram.client.

    engram search --bot demo --user ana favourite beverage
    engram export --bot demo > demo.ndjson

It reads ENGRAM_URL (default http://127.0.0.1:8710, what `make run` listens on) and ENGRAM_API_KEY (else
.engram/api-key in the current directory, where `make run` writes it). Errors are one line on stderr."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TextIO

import httpx

from .client import Engram, EngramError, Memory

DEFAULT_URL = "http://127.0.0.1:8710"
LOCAL_KEY = Path(".engram") / "api-key"


class Usage(Exception):
    """Something the person typing must change (exit 2)."""


def api_key(environ: dict[str, str]) -> str:
    key = environ.get("ENGRAM_API_KEY", "").strip()
    if key:
        return key
    if LOCAL_KEY.is_file():
        return LOCAL_KEY.read_text().strip()
    raise Usage("set ENGRAM_API_KEY to the Memory API's admin key (make run writes it to .engram/api-key)")


def _line(memory: Memory) -> str:
    scope = " ".join(
        f"{name}={value}"
        for name, value in (("user", memory.userId), ("server", memory.serverId), ("project", memory.project))
        if value
    )
    score = f" ({memory.score:.2f})" if memory.score is not None else ""
    return f"{memory.id}{score} {memory.text}" + (f"  [{scope}]" if scope else "")


def _scope(args: argparse.Namespace) -> dict[str, Any]:
    return {"user": args.user, "server": args.server, "project": args.project}


def _print_memories(memories: Sequence[Memory], args: argparse.Namespace, out: TextIO) -> None:
    if args.json:
        for memory in memories:
            out.write(memory.model_dump_json(exclude_none=True) + "\n")
        return
    for memory in memories:
        out.write(_line(memory) + "\n")
    if not memories:
        out.write("nothing found\n")


def search(engram: Engram, args: argparse.Namespace, out: TextIO) -> None:
    found = engram.search(args.bot, " ".join(args.words), kind=args.kind, limit=args.limit, **_scope(args))
    _print_memories(found.memories, args, out)
    if found.meaning is False and not args.json:
        sys.stderr.write(
            "(words only: the embedder is still loading or off; meaning joins once it is warm)\n"
        )


def add(engram: Engram, args: argparse.Namespace, out: TextIO) -> None:
    memory = engram.add(args.bot, " ".join(args.words), **_scope(args))
    out.write((memory.model_dump_json(exclude_none=True) if args.json else _line(memory)) + "\n")


def list_(engram: Engram, args: argparse.Namespace, out: TextIO) -> None:
    options = {"kind": args.kind, **_scope(args)}
    if args.all:
        _print_memories(list(engram.all(args.bot, **options)), args, out)
        return
    page = engram.list(args.bot, limit=args.limit, before=args.before, **options)
    _print_memories(page.memories, args, out)
    if page.next and not args.json:
        sys.stderr.write(f"(more: --before {page.next}, or --all)\n")


def export(engram: Engram, args: argparse.Namespace, out: TextIO) -> None:
    for line in engram.export(args.bot, args.user):
        out.write(line + "\n")


def import_(engram: Engram, args: argparse.Namespace, out: TextIO) -> None:
    source = sys.stdin if args.file == "-" else open(args.file, encoding="utf-8")  # noqa: SIM115
    with source:
        result = engram.import_(args.bot, [line.rstrip("\n") for line in source if line.strip()])
    out.write(json.dumps(result) + "\n")


def forget(engram: Engram, args: argparse.Namespace, out: TextIO) -> None:
    if not args.yes:
        raise Usage(f"this deletes everything of {args.user!r} in bot {args.bot!r} for good: add --yes")
    out.write(json.dumps(engram.forget(args.bot, args.user)) + "\n")


def keys(engram: Engram, args: argparse.Namespace, out: TextIO) -> None:
    if args.revoke:
        engram.revoke_key(args.bot, args.user, args.revoke)
        out.write(f"revoked {args.revoke}\n")
    elif args.mint is not None:
        key = engram.mint_key(args.bot, args.user, args.mint or None)
        out.write((key.model_dump_json() if args.json else f"{key.id} {key.key}") + "\n")
        if not args.json:
            sys.stderr.write("(the key is shown this once: engram keeps only its digest)\n")
    else:
        for key in engram.keys(args.bot, args.user):
            out.write(
                (key.model_dump_json() if args.json else f"{key.id} {key.createdAt} {key.name or ''}") + "\n"
            )


Command = Callable[[Engram, argparse.Namespace, TextIO], None]


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="engram", description="engram's Memory API from a shell.")
    top.add_argument("--url", help=f"the stack (default: ENGRAM_URL, else {DEFAULT_URL})")
    top.add_argument("--json", action="store_true", help="one JSON object a line")
    commands = top.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, run: Command, help_: str, scoped: bool = True) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, help=help_, description=help_)
        sub.add_argument("--bot", required=True)
        if scoped:
            sub.add_argument("--user")
            sub.add_argument("--server")
            sub.add_argument("--project")
        sub.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
        sub.set_defaults(run=run)
        return sub

    found = command("search", search, "search memories by words and meaning, best first")
    found.add_argument("--kind", choices=["fact", "message"], default="fact")
    found.add_argument("--limit", type=int)
    found.add_argument("words", nargs="+")
    added = command("add", add, "remember a fact")
    added.add_argument("words", nargs="+")
    listed = command("list", list_, "list memories, newest first")
    listed.add_argument("--kind", choices=["fact", "message"], default="fact")
    listed.add_argument("--limit", type=int)
    listed.add_argument("--before", help="page on from this memory id")
    listed.add_argument("--all", action="store_true", help="every page")
    exported = command("export", export, "the bot's (or a user's) records as NDJSON on stdout", scoped=False)
    exported.add_argument("--user")
    imported = command("import", import_, "store an export (NDJSON) into a bot", scoped=False)
    imported.add_argument("file", help="an export file, or - for stdin")
    forgot = command("forget", forget, "delete everything of a user in a bot, for good", scoped=False)
    forgot.add_argument("--user", required=True)
    forgot.add_argument("--yes", action="store_true", help="yes, for good")
    keyed = command(
        "keys", keys, "a user's keys for the proxy and /mcp: list, --mint, --revoke", scoped=False
    )
    keyed.add_argument("--user", required=True)
    keyed.add_argument("--mint", nargs="?", const="", metavar="NAME", help="mint a key (named NAME)")
    keyed.add_argument("--revoke", metavar="KEY_ID")
    return top


def main(
    argv: Sequence[str] | None = None, environ: dict[str, str] | None = None, out: TextIO = sys.stdout
) -> int:
    env = dict(os.environ if environ is None else environ)
    args = parser().parse_args(argv)
    url = args.url or env.get("ENGRAM_URL") or DEFAULT_URL
    try:
        with Engram(url, api_key(env)) as engram:
            args.run(engram, args, out)
    except Usage as exc:
        sys.stderr.write(f"engram: {exc}\n")
        return 2
    except EngramError as exc:
        sys.stderr.write(f"engram: {exc}\n")
        return 1
    except httpx.TransportError as exc:
        sys.stderr.write(
            f"engram: cannot reach {url} ({type(exc).__name__}): is the stack running (make run)?\n"
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
