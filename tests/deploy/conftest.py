"""The stack as `sam build` makes it, its template's resources in a moto server, and the outside world
(Discord, Ollama, a model provider, Qdrant's REST API) as fakes on 127.0.0.1. Tests take Qdrant down
to see the functions start and degrade exactly as the README promises."""

from __future__ import annotations

import contextlib
import json
import tempfile
import time
from pathlib import Path

import boto3
import pytest
from nacl.signing import SigningKey

from tests.deploy import harness
from tests.fake_discord import APP_ID, TOKEN, FakeDiscord
from tests.fake_qdrant import FakeQdrant
from tests.fake_upstream import FakeUpstream

KEY = "fidelity-api-key"
PROXY_KEY = "fidelity-proxy-key"
UPSTREAM_KEY = "sk-held-by-engram"
QDRANT_KEY = "qdrant-key-in-ssm"
DISALLOWED = "c12,c99"


class Deployment:
    """Everything a fidelity test reaches: the built functions, moto's clients, the fakes."""

    def __init__(
        self,
        stack: harness.Stack,
        build: Path,
        python: str,
        runtime_dir: Path,
        endpoint: str,
        discord: FakeDiscord,
        upstream: FakeUpstream,
        qdrant: FakeQdrant,
        signer: SigningKey,
        workdir: Path,
    ):
        self.stack, self.build, self.python, self.runtime_dir = stack, build, python, runtime_dir
        self.endpoint, self.discord, self.upstream, self.signer = endpoint, discord, upstream, signer
        self.qdrant = qdrant
        self.workdir = workdir
        self.sqs = boto3.client("sqs", endpoint_url=endpoint, region_name=harness.REGION)
        self.dynamodb = boto3.client("dynamodb", endpoint_url=endpoint, region_name=harness.REGION)
        self.shim_dir = workdir / "bin"
        self.shim_dir.mkdir(exist_ok=True)
        shim = self.shim_dir / "python"
        shim.write_text(f'#!/bin/sh\nexec "{python}" -S "{harness.HERE / "python_shim.py"}" "$@"\n')
        shim.chmod(0o755)
        self.running: list = []

    def function(self, logical: str) -> harness.Function:
        return self.stack.function(logical, self.build)

    def call_log(self, logical: str) -> Path:
        return self.workdir / f"{logical}.calls.jsonl"

    def environment(self, logical: str, **outside: str) -> dict[str, str]:
        """The function's Lambda environment; Discord's API is the only outside address it needs told."""
        fn = self.function(logical)
        return fn.lambda_environment(
            self.endpoint,
            self.call_log(logical),
            self.runtime_dir,
            self.shim_dir,
            {"DISCORD_API_BASE": self.discord.url, **outside},
        )

    def start(self, logical: str, **outside: str) -> harness.Invocations:
        """A fresh process of the function, initialised (a cold start)."""
        process = harness.Invocations(
            self.function(logical), self.python, self.environment(logical, **outside), self.runtime_dir
        )
        self.running.append(process)
        return process

    def probe(self, logical: str, source: str, **variables: str) -> harness.Invocations:
        """A process with `logical`'s environment (plus `variables`) and layers whose handler is `source`
        (a module defining handler(event, context)): to look at what the built code sees."""
        fn = self.function(logical)
        root = self.workdir / f"probe-{logical}-{len(self.running)}"
        root.mkdir()
        (root / "probe.py").write_text(source)
        probe = harness.Function(**{**fn.__dict__, "code": root, "handler": "probe.handler"})
        env = {**self.environment(logical), **variables}
        process = harness.Invocations(probe, self.python, env, self.runtime_dir)
        self.running.append(process)
        return process

    def start_web(self, logical: str) -> harness.WebAdapterProcess:
        """A fresh process of a Lambda Web Adapter function, ready as the adapter sees it. The layer is
        where the runtime would mount it (/opt/python), and the app gets a free port instead of 8080."""
        env = self.environment(logical, PORT=str(harness.free_port()))
        env["PYTHONPATH"] = ":".join(str(p) for p in self.function(logical).layers)
        process = harness.WebAdapterProcess(self.function(logical), env)
        self.running.append(process)
        return process

    def calls(self, logical: str) -> list[dict]:
        return harness.read_calls(self.call_log(logical))

    def queue_url(self, logical: str) -> str:
        return self.stack.physical[logical]["Ref"]

    def receive(self, logical: str, n: int = 10) -> list[dict]:
        """Messages now on a queue (received, so hidden for the visibility timeout)."""
        out = []
        while True:
            got = self.sqs.receive_message(
                QueueUrl=self.queue_url(logical),
                MaxNumberOfMessages=10,
                WaitTimeSeconds=0,
                AttributeNames=["All"],
            ).get("Messages", [])
            out += got
            if not got or len(out) >= n:
                return out

    def discard(self, logical: str) -> None:
        """Take everything now on a queue off it (PurgeQueue allows one call a minute)."""
        for m in self.receive(logical, n=10_000):
            self.sqs.delete_message(QueueUrl=self.queue_url(logical), ReceiptHandle=m["ReceiptHandle"])

    def drain(
        self, queue: str, worker: harness.Invocations, batch_size: int, max_batches: int = 200
    ) -> list[dict]:
        """Feed a queue to the worker as Lambda's poller does: receive a batch, invoke, delete what
        succeeded. A failed message comes back when its visibility timeout ends (18 min in the
        template); here that end is brought forward once the queue has nothing else to give, so a job
        that failed on a busy machine (a moto call timing out) is retried as Lambda would retry it,
        and one that keeps failing reaches the dead-letter queue after maxReceiveCount.
        Returns the worker's answers."""
        from infra.poller import sqs_event

        arn = self.stack.physical[queue]["Arn"]
        url = self.queue_url(queue)
        answers = []
        failed_handles: dict[str, str] = {}  # message id -> its latest receipt handle
        for _ in range(max_batches):
            got = self.sqs.receive_message(
                QueueUrl=url, MaxNumberOfMessages=batch_size, WaitTimeSeconds=0, AttributeNames=["All"]
            ).get("Messages", [])
            if not got:
                counts = self.sqs.get_queue_attributes(
                    QueueUrl=url,
                    AttributeNames=["ApproximateNumberOfMessagesDelayed", "ApproximateNumberOfMessages"],
                )["Attributes"]
                # a job delayed on the queue (a rate limit's retry_after), or one whose delay ended between
                # the receive and this look (on a loaded machine the look comes later than the delay's end:
                # it is visible now, no longer delayed, and breaking here lost it)
                if int(counts["ApproximateNumberOfMessagesDelayed"]) or int(
                    counts["ApproximateNumberOfMessages"]
                ):
                    time.sleep(0.2)
                    continue
                if not failed_handles:
                    break
                for handle in failed_handles.values():  # their visibility timeout ends now
                    self.sqs.change_message_visibility(
                        QueueUrl=url, ReceiptHandle=handle, VisibilityTimeout=0
                    )
                failed_handles.clear()
                continue
            answer = worker.invoke(sqs_event(got, arn, harness.REGION))
            assert answer["error"] is None, answer["error"] + worker.stderr
            answers.append(answer)
            failed = {f["itemIdentifier"] for f in answer["result"]["batchItemFailures"]}
            failed_handles.update(
                {m["MessageId"]: m["ReceiptHandle"] for m in got if m["MessageId"] in failed}
            )
            done = [m for m in got if m["MessageId"] not in failed]
            if done:
                self.sqs.delete_message_batch(
                    QueueUrl=url,
                    Entries=[{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(done)],
                )
        return answers

    def close(self) -> None:
        for process in self.running:
            process.close()


def parameters(
    qdrant_url: str, discord: FakeDiscord, upstream: FakeUpstream, signer: SigningKey
) -> dict[str, str]:
    """Parameter values a deployer would give `sam deploy`, pointing at the fakes."""
    return {
        "QdrantUrl": qdrant_url,
        "Embedder": "ollama",
        "OllamaUrl": discord.url,
        "EmbeddingModel": "all-minilm",
        "DiscordApplicationId": APP_ID,
        "DiscordPublicKey": signer.verify_key.encode().hex(),
        "DiscordChannelsDisallowed": DISALLOWED,
        "OllamaChatModel": "llama3",
        "ExtractBaseUrl": upstream.url + "/v1",
        "ExtractModel": "small-model",
    }


@contextlib.contextmanager
def make_deployment():
    """Build, transform, provision and start the fakes; yields a Deployment (the bench uses it too)."""
    from moto.server import ThreadedMotoServer

    build = harness.sam_build()
    python = harness.runtime_python("python3.11")
    runtime_dir = harness.runtime_site(python)
    discord = FakeDiscord().start()
    upstream = FakeUpstream().start()
    qdrant = FakeQdrant(api_key=QDRANT_KEY).start()
    signer = SigningKey.generate()
    params = parameters(qdrant.url, discord, upstream, signer)
    template = harness.sam_transform(params)
    stack = harness.Stack(template, params)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://127.0.0.1:{port}"
    import httpx

    httpx.post(f"{endpoint}/moto-api/reset").raise_for_status()  # moto's state is process-wide: start clean
    clients = {
        name: boto3.client(
            name,
            endpoint_url=endpoint,
            region_name=harness.REGION,
            aws_access_key_id="x",
            aws_secret_access_key="x",
        )
        for name in ("dynamodb", "sqs", "ssm")
    }
    secrets = f"/engram/{stack.parameters['Stage']}"  # where the template reads a stage's secrets
    stack.provision(
        clients["dynamodb"],
        clients["sqs"],
        clients["ssm"],
        secrets={
            f"{secrets}/api-key": KEY,
            f"{secrets}/proxy-key": PROXY_KEY,
            f"{secrets}/qdrant-api-key": QDRANT_KEY,
            f"{secrets}/upstreams": json.dumps(
                [{"name": "oa", "baseUrl": upstream.url, "api": "openai", "apiKey": UPSTREAM_KEY}]
            ),
            f"{secrets}/discord-bot-token": TOKEN,
        },
    )
    try:
        with tempfile.TemporaryDirectory() as workdir:
            d = Deployment(
                stack, build, python, runtime_dir, endpoint, discord, upstream, qdrant, signer, Path(workdir)
            )
            try:
                yield d
            finally:
                d.close()
    finally:
        server.stop()
        discord.stop()
        upstream.stop()
        qdrant.stop()


@pytest.fixture(scope="session")
def deployment():
    with make_deployment() as d:
        yield d
