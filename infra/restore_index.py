"""Restore a Qdrant server's collection from one of the snapshots engram's schedule had it take.

Qdrant writes its snapshots to S3 itself (its `storage.snapshots_config`, docs/operating.md) but cannot
read one back from there: it recovers from a URL it can fetch. So this makes a pre-signed URL for the
snapshot's object (with the credentials of whoever runs it), has Qdrant recover the collection from it,
and queues a reconcile: the snapshot is as old as it is, and the records are the truth — points of
memories deleted or forgotten since go, memories written since get their points.

    python -m infra.restore_index --bucket engram-qdrant-snapshots --key snapshots/engram/engram-....snapshot

Run it with the stack's environment (ENGRAM_QDRANT_URL and its key, ENGRAM_COLLECTION, the queues)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

# Long enough for Qdrant to download a snapshot of 100 M points (hundreds of GB) from S3
URL_LIFETIME_S = 6 * 3600


@dataclass(frozen=True)
class Restored:
    location: str  # what Qdrant was told to recover from (a pre-signed URL: its signature is a secret)
    reconcile_queued: bool


def restore(settings, s3_client, bucket: str, key: str, recover_timeout_s: float = 3_600.0) -> Restored:
    """Recover the collection from s3://bucket/key and queue the reconcile that brings it up to date."""
    from engram.clock import now_ms
    from engram.engine import build_index
    from engram.jobs import IndexMaintenanceJob, build_queue
    from engram.vectors.server import QdrantServerIndex

    if not settings.qdrant_url:
        raise SystemExit(
            "ENGRAM_QDRANT_URL is not set: the embedded engine keeps no snapshots (a rebuild remakes it)"
        )
    index = build_index(settings)
    assert isinstance(index, QdrantServerIndex)
    s3_client.head_object(Bucket=bucket, Key=key)  # a clear error for a wrong name, before Qdrant's
    location = s3_client.generate_presigned_url(
        "get_object", Params={"Bucket": bucket, "Key": key}, ExpiresIn=URL_LIFETIME_S
    )
    try:
        index.recover(location, timeout_s=recover_timeout_s)
    finally:
        index.close()
    build_queue(settings).send(IndexMaintenanceJob(action="reconcile", started=now_ms()))
    return Restored(location=location, reconcile_queued=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bucket", required=True, help="the bucket Qdrant writes its snapshots to")
    parser.add_argument("--key", required=True, help="the snapshot's object key (snapshots/<collection>/...)")
    args = parser.parse_args()
    import boto3
    from botocore.config import Config

    from engram.config import get_settings

    settings = get_settings()
    # SigV4: S3 refuses SigV2 in newer regions, and a SigV2 URL leaks the access key id in the clear
    s3 = boto3.client("s3", region_name=settings.aws_region, config=Config(signature_version="s3v4"))
    restore(settings, s3, args.bucket, args.key)
    print(f"recovered {settings.collection} from s3://{args.bucket}/{args.key}; a reconcile is queued")


if __name__ == "__main__":
    main()
