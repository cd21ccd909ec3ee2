"""Qdrant snapshots on a schedule, kept in S3, and a restore that ends up where the records are (issue 46).

Against the recording stand-in for Qdrant's REST API (tests/fake_qdrant.py), which keeps snapshots as a
server with `snapshots_config` on S3 does (the object under snapshots/<collection>/ of a bucket: here a
moto server's, over HTTP), and recovers from a URL it fetches, as the server does."""

from __future__ import annotations

import boto3
import pytest

from engram.engine import build_engine, set_engine
from engram.jobs import IndexMaintenanceJob
from engram.vectors import Scope
from infra.poller import SqsPoller, load_function_handler
from infra.restore_index import restore
from tests.fake_qdrant import FakeQdrant
from tests.integration.conftest import moto_settings


@pytest.fixture
def s3():
    from botocore.config import Config
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    client = boto3.client(
        "s3",
        region_name="us-east-1",
        endpoint_url=f"http://{host}:{port}",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        config=Config(signature_version="s3v4"),  # as infra.restore_index makes it
    )
    client.create_bucket(Bucket="engram-snapshots")
    yield client
    server.stop()


def test_snapshots_go_to_s3_a_few_are_kept_and_a_restore_is_reconciled_with_the_records(
    aws, s3, embedder, tmp_path
):
    qdrant = FakeQdrant(api_key="qdrant-key").start()
    qdrant.snapshot_store = (s3, "engram-snapshots")
    settings = moto_settings(
        aws, tmp_path, qdrant_url=qdrant.url, qdrant_api_key="qdrant-key", qdrant_snapshots_kept=2
    )
    engine = build_engine(settings, embedder=embedder, sqs_client=aws["sqs"])
    set_engine(engine)
    worker = SqsPoller(aws["sqs"], aws["queue_url"], load_function_handler("worker"), "us-east-1", wait_s=0)
    try:
        service = engine.service
        kept, _ = service.add_fact("b", "The spare key is under the flowerpot.", user="alice")
        gone, _ = service.add_fact("b", "Bob's locker code is 4417.", user="bob")
        for _ in range(3):  # three scheduled snapshots: the oldest is dropped, in S3 too
            engine.queue.send(IndexMaintenanceJob(action="snapshot"))
            worker.drain()
        objects = s3.list_objects_v2(Bucket="engram-snapshots", Prefix="snapshots/engram/")["Contents"]
        keys = sorted(o["Key"] for o in objects)
        assert keys == ["snapshots/engram/engram-0002.snapshot", "snapshots/engram/engram-0003.snapshot"]
        assert ("POST", "/collections/engram/snapshots") in qdrant.requests

        # after the last snapshot: bob is forgotten, alice adds a memory, and the index is lost
        service.forget_user("b", "bob")
        new, _ = service.add_fact("b", "The bike lock code is 0912.", user="alice")
        service.index.delete(service.index.scroll_ids(Scope(bot="b"), None, 100)[0])
        assert service.index.count(Scope(bot="b")) == 0

        done = restore(settings, s3, "engram-snapshots", keys[-1])
        assert done.reconcile_queued and "X-Amz-Signature" in done.location
        assert ("PUT", "/collections/engram/snapshots/recover") in qdrant.requests
        # the snapshot's points are back, bob's among them, until the reconcile meets the records
        assert service.index.existing([int(kept.id), int(gone.id)]) == {int(kept.id), int(gone.id)}
        worker.drain()
        assert service.index.existing([int(kept.id), int(gone.id), int(new.id)]) == {
            int(kept.id),
            int(new.id),
        }
    finally:
        set_engine(None)
        engine.service.index.close()
        qdrant.stop()


def test_a_restore_from_a_snapshot_that_is_not_there_says_so_before_asking_qdrant(aws, s3, tmp_path):
    from botocore.exceptions import ClientError

    qdrant = FakeQdrant().start()
    settings = moto_settings(aws, tmp_path, qdrant_url=qdrant.url)
    try:
        with pytest.raises(ClientError, match="404"):
            restore(settings, s3, "engram-snapshots", "snapshots/engram/missing.snapshot")
        assert not [r for r in qdrant.requests if r[1].endswith("/recover")]
    finally:
        qdrant.stop()
