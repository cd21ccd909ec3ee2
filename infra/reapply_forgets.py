"""After a point-in-time restore: forget again everyone who was forgotten after the restore's point.

A restore brings back the records, and the tombstones, of the moment restored to: every forget made since
then is undone in the restored table. Its tombstones still sit in the table you restored *from*. Run this
with the stack's environment pointing at the restored tables (ENGRAM_STATE_TABLE, ENGRAM_MEMORIES_TABLE,
the Qdrant settings) and name the old state table:

    python -m infra.reapply_forgets --from-table engram-prod-StateTable-OLD [--since 2026-11-30T12:00:00Z]

Each forget is run again through forget_user (records, vectors, contexts, consent, state, tombstone), so
the restored stack forgets exactly whom the old one had forgotten. Then POST /v1/index/rebuild."""

from __future__ import annotations

import argparse
from datetime import datetime


def reapply(dynamodb_client, from_table: str, service, since_ms: int = 0) -> list[tuple[str, str, dict]]:
    """Forget again, in the bound stack, everyone the old table's tombstones name (since `since_ms`)."""
    from engram.store.state import Tombstones

    done = []
    for bot, user, at in Tombstones.in_table(dynamodb_client, from_table):
        if at >= since_ms:
            done.append((bot, user, service.forget_user(bot, user)))
    return done


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--from-table", required=True, help="the state table the restore was made from")
    parser.add_argument("--since", help="only forgets at or after this ISO time (the restore's point)")
    args = parser.parse_args()
    import boto3

    from engram.config import get_settings
    from engram.engine import get_engine

    settings = get_settings()
    client = boto3.client(
        "dynamodb", region_name=settings.aws_region, endpoint_url=settings.dynamodb_endpoint
    )
    since = (
        int(datetime.fromisoformat(args.since.replace("Z", "+00:00")).timestamp() * 1000) if args.since else 0
    )
    for bot, user, deleted in reapply(client, args.from_table, get_engine().service, since):
        print(f"forgot {user} in {bot} again: {deleted['facts']} facts, {deleted['messages']} messages")


if __name__ == "__main__":
    main()
