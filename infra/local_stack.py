"""The local stack: DynamoDB (dynalite on LevelDB, a Node child process), SQS (infra/local_sqs.py, journaled
to SQLite), the embedded Qdrant, the local embedder, the Memory API on uvicorn and the job pollers. Every
acknowledged write and every queued job survives a crash (kill -9); the vector index is rebuilt from the
records when it is lost. `make run` starts it; Ctrl-C stops it cleanly."""

from __future__ import annotations

import logging
import os
import pickle
import secrets
import signal
import sys
import threading
import time
from pathlib import Path
from typing import IO, TYPE_CHECKING

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # `python infra/local_stack.py` puts infra/ first, not the repo
    sys.path.insert(0, str(ROOT))

if TYPE_CHECKING:
    from engram.discord.gateway import GatewayCapture

log = logging.getLogger("engram.local")


def migrate_pickled_state(data_dir: Path, dynamodb) -> int:
    """Copy the records engram 1.0 kept in moto's pickle (aws-state.pickle) into the local DynamoDB, once;
    returns how many items moved. The pickle is kept, renamed, until you delete it. moto reads it: it is a
    test tool, not in `make run`'s install, so a data dir that still has one says how to get it."""
    saved = data_dir / "aws-state.pickle"
    if not saved.exists():
        return 0
    try:
        import boto3
        from moto.dynamodb.models import dynamodb_backends
        from moto.server import ThreadedMotoServer
    except ImportError:
        raise StackError(
            f"{saved} holds records from engram 1.0, which moto reads: run `.venv/bin/pip install "
            "moto[server]==5.2.5` once and start again to move them into the local DynamoDB"
        ) from None
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        for account, regions in pickle.loads(saved.read_bytes()).get("dynamodb", {}).items():
            dynamodb_backends[account] = regions
        host, port = server.get_host_and_port()
        old = boto3.client("dynamodb", endpoint_url=f"http://{host}:{port}", region_name="us-east-1")
        moved = 0
        for table in old.list_tables()["TableNames"]:
            for page in old.get_paginator("scan").paginate(TableName=table):
                for start in range(0, len(page["Items"]), 25):
                    requests = [{"PutRequest": {"Item": item}} for item in page["Items"][start : start + 25]]
                    unprocessed = {table: requests}
                    while unprocessed:
                        unprocessed = dynamodb.batch_write_item(RequestItems=unprocessed).get(
                            "UnprocessedItems"
                        )
                    moved += len(requests)
    finally:
        server.stop()
    saved.rename(saved.with_name("aws-state.pickle.migrated"))
    return moved


class StackError(Exception):
    """Why the stack cannot start, in a line for the person who ran it (no traceback: nothing is broken)."""


REGION = "us-east-1"
TABLES = {"MemoriesTable": "engram-memories", "StateTable": "engram-state"}
# A forget's index rewrite waits this long for the next forget of a burst (one rewrite for them all)
PURGE_AFTER_S = 2.0  # after a forget: a burst of forgets is one purge
CHANGE_PURGE_AFTER_S = 30.0  # after a single delete or change: batched, within a minute
PURGE_MARK = "purge-wanted"  # in the data dir while deleted words may still be in a file: durable


def owner_only(data_dir: Path) -> None:
    """The data dir holds people's words (records, the queue journal, vectors) and the keys: readable by
    its owner alone, folders 0700 and files 0600, what is there already tightened at start (a data dir
    made by an older engram, or copied in)."""
    data_dir.chmod(0o700)
    for path in data_dir.rglob("*"):
        if path.is_symlink():
            continue
        path.chmod(0o700 if path.is_dir() else path.stat().st_mode & 0o700 or 0o600)


class LocalStack:
    """Everything `make run` starts, startable from tests too."""

    def __init__(  # noqa: PLR0913 - every option a test can set; to become one LocalStackOptions value
        self,
        data_dir: Path,
        host: str = "127.0.0.1",
        port: int = 8710,
        api_key: str | None = None,
        embedder=None,
        sweep_every_s: float = 60.0,
        sweep_grace_ms: int = 60_000,
        catchup_every_s: float = 600.0,
        dynamodb_port: int = 0,
        sqs_port: int = 0,
        poll: bool = True,
        proxy_settings=None,
        mongo_database=None,
        discord_settings=None,
        index_wrapper=None,
        gateway: bool = False,
    ):
        self.data_dir = Path(data_dir)
        # tests: wrap the stack's vector index (one that can be taken down), as every part of it sees it
        self.index_wrapper = index_wrapper
        self.host, self.port = host, port
        self.api_key = api_key
        self.embedder = embedder
        self.sweep_every_s = sweep_every_s
        self.sweep_grace_ms = sweep_grace_ms
        self.catchup_every_s = catchup_every_s
        self.dynamodb_port, self.sqs_port = dynamodb_port, sqs_port
        self.proxy_settings = proxy_settings
        self.mongo_database = mongo_database
        self.discord_settings = discord_settings
        # Discord's gateway, captured by a thread of this process (make run: when Discord is set up and
        # DISCORD_GATEWAY is not off); tests against a fake without one leave it off
        self.gateway = gateway
        self.capture: GatewayCapture | None = None
        self.poll = poll
        self._stop = threading.Event()
        self.ready = threading.Event()  # search by meaning works (the embedder's model has loaded)
        self.model_load_s = 0.0
        # when the files must next be rewritten without deleted words (monotonic; None: nothing waits);
        # the data dir's PURGE_MARK says so durably, so a purge cut off by a crash runs at the next start
        self._purge_due: float | None = None
        self._purge_lock = threading.Lock()
        self._threads: list[threading.Thread] = []

    # ---------------------------------------------------------------------------------------------

    def _key_file(self, name: str) -> str:
        """A key generated once into the data dir (readable by its owner only)."""
        path = self.data_dir / name
        if not path.exists():
            path.write_text(secrets.token_urlsafe(32))
            path.chmod(0o600)
        return path.read_text().strip()

    def _api_key(self) -> str:
        return self.api_key or self._key_file("api-key")

    def start(self) -> LocalStack:
        """Start every part; returns when the API answers."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        owner_only(self.data_dir)
        self.hold_data_dir()
        for name, value in (("AWS_ACCESS_KEY_ID", "local"), ("AWS_SECRET_ACCESS_KEY", "local")):
            os.environ.setdefault(name, value)
        queues = self._start_aws()
        self._start_engine()
        self._start_workers(queues)
        self._start_doors()
        self._serve()
        return self

    def hold_data_dir(self) -> None:
        """One stack a data dir: a second one would open the same LevelDB and journal under the first. The
        lock is the kernel's (flock), so a stack killed with -9 leaves none behind."""
        import fcntl

        if getattr(self, "_lock_handle", None):
            return

        path = self.data_dir / "stack.lock"
        handle = path.open("a+")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip()
            handle.close()
            if holder != str(os.getpid()):  # this process's own earlier stack, left without stop(): take over
                raise StackError(
                    f"another engram stack (process {holder or 'unknown'}) is running on "
                    f"{self.data_dir.resolve()}: stop it first (Ctrl-C where it runs), or give this one "
                    "ENGRAM_DATA_DIR=<another dir>"
                ) from None
            handle = path.open("a+")
        handle.seek(0)
        handle.truncate()
        handle.write(str(os.getpid()))
        handle.flush()
        self._lock_handle: IO[str] | None = handle

    def _start_aws(self) -> dict[str, str]:
        """DynamoDB (dynalite on disk) and SQS (infra/local_sqs.py, journaled on disk) with the template's
        tables and queues; returns the queue URLs by logical id."""
        import boto3

        from infra.aws_template import create_queues, create_tables, load_template
        from infra.local_dynamodb import LocalDynamoDB
        from infra.local_sqs import LocalSqsServer
        from infra.queue_journal import JournaledSqs, QueueJournal

        self.local_dynamodb = LocalDynamoDB(self.data_dir / "dynamodb", port=self.dynamodb_port).start()
        try:
            self.local_sqs = LocalSqsServer(port=self.sqs_port).start()
        except OSError as exc:
            raise StackError(
                f"the local SQS cannot listen on 127.0.0.1:{self.sqs_port} ({exc.strerror}): "
                "another stack is running, or set ENGRAM_SQS_PORT"
            ) from None
        self.sqs_endpoint = self.local_sqs.endpoint
        self.dynamodb = boto3.client(
            "dynamodb", endpoint_url=self.local_dynamodb.endpoint, region_name=REGION
        )
        create_tables(self.dynamodb, TABLES)
        migrated = migrate_pickled_state(self.data_dir, self.dynamodb)
        if migrated:
            log.info("moved %d items from aws-state.pickle into the local DynamoDB", migrated)
        self.journal = QueueJournal(self.data_dir / "queue-journal.sqlite")
        self.sqs = JournaledSqs(
            boto3.client("sqs", endpoint_url=self.sqs_endpoint, region_name=REGION), self.journal
        )
        # The local worker is not a 180 s Lambda: a failed job comes back after 5 minutes, not 18.
        queues = create_queues(self.sqs, "engram", visibility_s=300)
        for logical_id, resource in load_template()["Resources"].items():
            # SQS forgets what outlives retention
            retention = (resource.get("Properties") or {}).get("MessageRetentionPeriod")
            if resource["Type"] == "AWS::SQS::Queue" and retention:
                self.journal.expire(f"engram-{logical_id}", float(retention))
        replayed = self.sqs.replay({url.rsplit("/", 1)[-1]: url for url in queues.values()})
        if replayed:
            log.info("%d queued jobs from before the last stop are queued again", replayed)
        self.queues = queues
        return queues

    def _start_engine(self) -> None:
        """The settings for this stack's stores and the engine on them."""
        from engram.config import Settings
        from engram.engine import build_engine, set_engine

        self.settings = Settings(
            memories_table=TABLES["MemoriesTable"],
            state_table=TABLES["StateTable"],
            aws_region=REGION,
            dynamodb_endpoint=self.local_dynamodb.endpoint,
            sqs_endpoint=self.sqs_endpoint,
            jobs_queue_url=self.queues["JobsQueue"],
            interactive_queue_url=self.queues["InteractiveQueue"],
            extract_queue_url=self.queues["ExtractQueue"],
            index_queue_url=self.queues["IndexQueue"],
            maintenance_queue_url=self.queues["MaintenanceQueue"],
            data_dir=self.data_dir,
            api_key=self._api_key(),
        )
        index = None
        if self.index_wrapper is not None:
            from engram.engine import build_index

            index = self.index_wrapper(build_index(self.settings))
        self.engine = build_engine(self.settings, index=index, embedder=self.embedder, sqs_client=self.sqs)
        set_engine(self.engine)

        # A forgotten user's queued jobs leave the journal at once (they would be dropped when run anyway)
        def drop_queued(bot: str, user: str) -> None:
            self.journal.forget_user(user, bot)

        # ... and LevelDB rewrites its files, so the deleted items' values are in none of them any more
        def compact_records(bot: str, user: str) -> None:
            if not self.local_dynamodb.compact():
                log.warning("the local DynamoDB did not finish compacting after a forget")

        # ... and the embedded index is rewritten from its live points (qdrant-edge keeps a deleted point's
        # payload in its segment and its updates in its WAL): in the background, once for a burst of forgets
        def purge_index(bot: str, user: str) -> None:
            self.want_purge(PURGE_AFTER_S)

        for hook in (drop_queued, compact_records, purge_index):
            self.engine.service.on_forget(hook)
        # a single delete or change leaves the old words in LevelDB's log and the index's pages too
        self.engine.service.on_change(lambda bot: self.want_purge(CHANGE_PURGE_AFTER_S))
        if (self.data_dir / PURGE_MARK).exists():  # cut off by a crash: done first thing
            log.info("a purge of deleted words was cut off by the last stop: it runs now")
            self.want_purge(0.0)

    def _start_workers(self, queues: dict[str, str]) -> None:
        """A poller per queue of a class of jobs on one worker handler, like the event source mappings on
        AWS (an /ask never waits behind a backfill), and the schedules: sweep, index check."""
        from engram.jobs import QUEUE_OF_CLASS
        from infra.poller import SqsPoller, load_function_handler

        worker = load_function_handler("worker")
        self.pollers = [SqsPoller(self.sqs, queues[q], worker, REGION) for q in QUEUE_OF_CLASS.values()]
        self.poller = self.pollers[0]
        if self.poll:
            for poller in self.pollers:
                poller.start()
        self._spawn("sweeper", self._sweep_loop)
        self._spawn("warm-embedder", self._warm_embedder)
        self._spawn("index-keeper", self._keep_index)
        self._spawn("index-purger", self._purge_loop)

    def _start_doors(self) -> None:
        """The LibreChat proxy and the Discord door on the engine."""
        from engram.config.proxy import with_secrets
        from engram.discord.runtime import build_discord, set_discord
        from engram.proxy.runtime import build_proxy, set_proxy

        proxy_settings = self.proxy_settings or with_secrets(self.settings.proxy)
        if not proxy_settings.proxy_key:  # LibreChat's key: never the admin key, unless you set them equal
            proxy_settings = proxy_settings.model_copy(update={"proxy_key": self._key_file("proxy-key")})
        self.proxy = build_proxy(proxy_settings, self.engine, mongo_database=self.mongo_database)
        set_proxy(self.proxy)
        self.discord = build_discord(self.discord_settings or self.settings.discord, self.engine)
        set_discord(self.discord)
        if self.discord.settings.application_id:  # the template's CatchUpRate schedule, locally
            self._spawn("discord-catchup", self._catchup_loop)
        if self.proxy.source is not None:  # the template's LibreChatReconcileRate schedule, locally
            self._spawn("librechat-reconcile", self._reconcile_loop)
        if self.gateway and self.discord.settings.application_id:
            from engram.discord.gateway import GatewayCapture as Capture

            bot, state = self.discord.settings.bot, self.engine.state
            self.capture = Capture(
                self.discord.settings,
                self.engine.queue.send,
                lambda users: state.consents.consenting(bot, users),
            )
            self._threads.append(self.capture.start_thread())

    def _serve(self) -> None:
        """The API on uvicorn; returns once it answers."""
        import uvicorn

        from engram.api.app import create_app
        from engram.discord.runtime import get_discord
        from engram.engine import get_engine
        from engram.proxy.runtime import get_proxy

        app = create_app(
            get_engine, proxy_factory=get_proxy, discord_settings_factory=lambda: get_discord().settings
        )
        config = uvicorn.Config(app, host=self.host, port=self.port, log_level="warning", lifespan="off")
        self.server = uvicorn.Server(config)
        self._spawn("uvicorn", self.server.run)
        deadline = time.monotonic() + 30
        while not self.server.started:
            if time.monotonic() > deadline or not self._threads[-1].is_alive():
                raise RuntimeError(f"the API did not start on {self.host}:{self.port}")
            time.sleep(0.02)
        if self.port == 0:
            self.port = self.server.servers[0].sockets[0].getsockname()[1]

    def settle(self, timeout_s: float = 60) -> None:
        """Tests: until every queued job has run, the pollers' rounds included (tests.support.settle)."""
        from infra.poller import settle

        settle(self.sqs, timeout_s)

    @property
    def url(self) -> str:
        """Base URL of the API."""
        return f"http://{self.host}:{self.port}"

    def _spawn(self, name, target) -> None:
        thread = threading.Thread(target=target, name=name, daemon=True)
        thread.start()
        self._threads.append(thread)

    def _sweep_loop(self) -> None:
        from engram.forgetting import STALLED_MS

        # At start, every forget still under way was cut off by the last stop: it is resumed at once
        stalled_ms = 0
        while not self._stop.is_set():
            try:
                self.engine.service.indexer.sweep(grace_ms=self.sweep_grace_ms)
                self.engine.service.expire_all()  # memories whose time ran out (reads hide them already)
                resumed = self.engine.service.forgetting.resume_stalled(stalled_ms)
                if resumed:
                    log.info("%d forgets cut off before they finished are resumed", resumed)
                stalled_ms = STALLED_MS
            except Exception:
                log.exception("sweep failed")
            self._stop.wait(self.sweep_every_s)

    def want_purge(self, within_s: float) -> None:
        """Deleted words may be in the files: rewrite them within `within_s` (sooner if already due), and
        say so on disk first, so a crash before then leaves the purge to the next start."""
        mark = self.data_dir / PURGE_MARK
        if not mark.exists():
            with open(mark, "w") as handle:
                handle.flush()
                os.fsync(handle.fileno())
        due = time.monotonic() + within_s
        with self._purge_lock:
            self._purge_due = due if self._purge_due is None else min(self._purge_due, due)

    def _purge_loop(self) -> None:
        while not self._stop.wait(0.5):
            with self._purge_lock:
                due = self._purge_due is not None and time.monotonic() >= self._purge_due
            if due:
                self._purge()

    def _purge(self) -> None:
        """Rewrite the embedded index without the deleted points (a Qdrant server's are the operator's) and
        have LevelDB compact its files; the mark goes once both are done, else it is tried again in 30 s."""
        with self._purge_lock:
            self._purge_due = None
        purge = getattr(self.engine.service.index, "purge_deleted", None)
        try:
            if purge is not None:
                log.info("index rewritten without deleted points: %d kept", purge())
            if not self.local_dynamodb.compact():
                raise RuntimeError("the local DynamoDB did not finish compacting")
            with self._purge_lock:
                if self._purge_due is None:  # nothing new asked for meanwhile
                    (self.data_dir / PURGE_MARK).unlink(missing_ok=True)
        except Exception:  # tried again: the words are deleted for every read either way
            log.exception("purge of deleted words failed; trying again in 30 s")
            self.want_purge(30.0)

    def _catchup_loop(self) -> None:
        from engram.jobs import CatchUpJob

        while not self._stop.wait(self.catchup_every_s):
            try:
                self.engine.queue.send(CatchUpJob())
            except Exception:
                log.exception("could not queue the Discord catch-up")

    def _reconcile_loop(self) -> None:
        from engram.jobs import LibreChatReconcileJob

        every_s = float(os.environ.get("ENGRAM_LIBRECHAT_RECONCILE_EVERY_S") or 3600)
        while not self._stop.wait(every_s):
            try:
                self.engine.queue.send(LibreChatReconcileJob(bot=self.proxy.settings.bot))
            except Exception:
                log.exception("could not queue the LibreChat reconcile")

    def _keep_index(self) -> None:
        """At start: rebuild an index that is empty next to records (deleted, lost), else reconcile it
        with the records (a crash between the two stores leaves orphans or missing points)."""
        keeper = self.engine.keeper
        try:
            done = keeper.rebuild() if keeper.needs_rebuild() else keeper.reconcile()
            log.info("index %s", done)
        except Exception:
            log.exception("index check failed")

    def _warm_embedder(self) -> None:
        if self._stop.is_set():
            return
        started = time.monotonic()
        try:
            self.engine.service.embedder.embed(["warm up"])
        except Exception as exc:  # search answers by words until the embedder does
            log.warning("embedder not ready: %s", exc)
            return
        self.model_load_s = time.monotonic() - started
        self.ready.set()

    def loading(self) -> bool:
        """Whether the embedder's model is still loading (a process must not exit normally meanwhile)."""
        return any(t.name == "warm-embedder" and t.is_alive() for t in self._threads)

    def stop(self, wait_for_model: bool = True) -> None:
        """Stop everything (every write is already on disk). `wait_for_model` False: a model still loading is
        left to load (the caller then ends the process with os._exit, which torch's loader survives)."""
        from engram.engine import set_engine

        self._stop.set()
        if self.capture is not None:
            self.capture.stop()
        if getattr(self, "server", None):
            self.server.should_exit = True
        for poller in getattr(self, "pollers", []):
            poller.halt()
        for poller in getattr(self, "pollers", []):
            poller.stop()
        for thread in self._threads:
            # A process that exits normally while torch is still loading aborts ("terminate called without
            # an active exception", exit -6): the warm-up is waited for unless the caller exits with _exit
            if thread.name == "warm-embedder":
                thread.join(timeout=300 if wait_for_model else 0)
            else:
                thread.join(timeout=10)
        if getattr(self, "engine", None) and (self.data_dir / PURGE_MARK).exists():
            self._purge()  # a forget or a delete just before the stop: its bytes do not outlive the process
        if getattr(self, "engine", None):
            self.engine.close()
            set_engine(None)
        from engram.discord.runtime import set_discord
        from engram.proxy.runtime import set_proxy

        set_proxy(None)
        set_discord(None)
        if getattr(self, "local_sqs", None):
            self.local_sqs.stop()
        if getattr(self, "journal", None):
            self.journal.close()
        if getattr(self, "local_dynamodb", None):
            self.local_dynamodb.stop()
        held = getattr(self, "_lock_handle", None)
        if held is not None:
            held.close()  # the data dir is free for the next stack
            self._lock_handle = None


# Secrets a container may be given as files (Docker and compose secrets: NAME_FILE=/run/secrets/name)
SECRET_NAMES = (
    "ENGRAM_API_KEY",
    "ENGRAM_PROXY_KEY",
    "UPSTREAMS",
    "DISCORD_BOT_TOKEN",
    "DISCORD_PUBLIC_KEY",
    "ENGRAM_QDRANT_API_KEY",
    "ENGRAM_REMOTE_EMBEDDINGS_KEY",
    "EXTRACT_API_KEY",
    "LIBRECHAT_MONGO_URI",
)


def secrets_from_files(environ=os.environ) -> list[str]:
    """Set NAME from the file NAME_FILE names, for each secret given so and not set itself; returns the
    names."""
    taken = []
    for name in SECRET_NAMES:
        path = environ.get(f"{name}_FILE")
        if path and not environ.get(name):
            try:
                environ[name] = Path(path).read_text().strip()
            except OSError as exc:
                sys.exit(
                    f"engram cannot start: {name}_FILE names {path}, which cannot be read ({exc.strerror})"
                )
            taken.append(name)
    return taken


def shown_key(key: str | None, variable: str, generated: Path) -> str:
    """A key as the start-up banner shows it: itself on a terminal; elsewhere (a container's log, a file a
    log shipper reads) only where it is, since a log is no place for a secret."""
    if sys.stdout.isatty():
        return key or "(none)"
    where = f"from {variable}" if os.environ.get(variable) else f"in {generated.resolve()}"
    return f"{where} (not printed: the output is not a terminal)"


STOP_BUDGET_S = 4.5  # Ctrl-C ends the process within this, whatever is loading or running


def ports_free(host: str, ports: list[int]) -> None:
    """A StackError naming the first of these fixed ports something already listens on."""
    import socket

    for port in (p for p in ports if p):
        with socket.socket() as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind((host, port))
            except OSError:
                raise StackError(
                    f"port {port} on {host} is taken (address already in use: another engram stack, or "
                    "another program): stop it, or choose others with ENGRAM_PORT, ENGRAM_DYNAMODB_PORT and "
                    "ENGRAM_SQS_PORT"
                ) from None


def say_when_ready(stack: LocalStack) -> None:
    """Print "ready" once search by meaning works (the model has loaded), from a thread."""

    def wait() -> None:
        if stack.ready.wait(timeout=600):
            print(
                f"ready: search by meaning works (the model loaded in {stack.model_load_s:.0f} s)", flush=True
            )

    threading.Thread(target=wait, name="say-ready", daemon=True).start()


def stop_within_budget(stack: LocalStack) -> None:
    """Stop the stack; past STOP_BUDGET_S (or with the model still loading) end the process at once: every
    acknowledged write and queued job is on disk already (the kill -9 suites hold it to that), and what a
    cut-short stop leaves (a purge, a compaction) is marked on disk and done at the next start."""
    started = time.monotonic()
    stopping = threading.Thread(target=stack.stop, kwargs={"wait_for_model": False}, daemon=True)
    stopping.start()
    stopping.join(STOP_BUDGET_S)
    took = time.monotonic() - started
    if stopping.is_alive():
        print(
            f"stopped after {took:.1f} s, the rest left for the next start; every write is on disk.",
            flush=True,
        )
    else:
        print(f"stopped in {took:.1f} s; every write is on disk.", flush=True)
    # Not a normal exit either way: torch's model loader aborts one while it runs (exit -6), and an
    # interpreter's own shutdown (joining threads, finalising torch and the engines) took seconds more
    os._exit(0)


def main() -> None:
    """Run until Ctrl-C (or SIGTERM: a container's stop); a second Ctrl-C ends the process at once."""
    os.umask(0o077)  # everything this process and its children (dynalite) write: its owner's alone
    from engram.observability import configure_local_logging

    configure_local_logging()
    secrets_from_files()
    host = os.environ.get("ENGRAM_HOST", "127.0.0.1")
    ports = [
        int(os.environ.get("ENGRAM_PORT", "8710")),
        # Fixed ports, so `sam local` (env.json) finds them: 0 picks free ones
        int(os.environ.get("ENGRAM_DYNAMODB_PORT") or 8711),
        int(os.environ.get("ENGRAM_SQS_PORT") or 8712),
    ]
    stack = LocalStack(
        data_dir=Path(os.environ.get("ENGRAM_DATA_DIR", ".engram")),
        host=host,
        port=ports[0],
        api_key=os.environ.get("ENGRAM_API_KEY") or None,
        catchup_every_s=float(os.environ.get("ENGRAM_CATCHUP_EVERY_S") or 600),
        dynamodb_port=ports[1],
        sqs_port=ports[2],
        gateway=os.environ.get("DISCORD_GATEWAY", "on").lower() not in ("off", "0", "false", "no"),
    )
    done = threading.Event()

    def on_signal(*_: object) -> None:
        if done.is_set():
            os._exit(130)  # asked twice: now
        done.set()

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, on_signal)
    from infra.local_dynamodb import NodeMissing

    print(f"engram {engram_version()}: starting (state in {stack.data_dir.resolve()})...", flush=True)
    try:
        stack.data_dir.mkdir(parents=True, exist_ok=True)
        stack.hold_data_dir()  # before the ports: a stack on this dir is the likelier reason they are taken
        ports_free("127.0.0.1", ports[1:])
        ports_free(host, ports[:1])
        stack.start()
    except (NodeMissing, StackError) as exc:
        stack.stop()
        sys.exit(f"engram cannot start: {exc}")
    say_when_ready(stack)
    print(
        f"engram is listening on {stack.url}: search by words now, by meaning once the model has loaded"
        " (10-60 s; 'ready' says so)",
        flush=True,
    )
    admin = shown_key(stack.settings.api_key, "ENGRAM_API_KEY", stack.data_dir / "api-key")
    proxy = shown_key(stack.proxy.settings.proxy_key, "ENGRAM_PROXY_KEY", stack.data_dir / "proxy-key")
    print(f"admin key (Memory API, ENGRAM_API_KEY): {admin}", flush=True)
    print(f"proxy key (LibreChat endpoints and /mcp, ENGRAM_PROXY_KEY): {proxy}", flush=True)
    print(f"state: {stack.data_dir.resolve()}  (Ctrl-C to stop)", flush=True)
    while not done.wait(0.2):  # a timed wait: the signal handler runs within 0.2 s, not when a lock is freed
        pass
    print("stopping...", flush=True)
    stop_within_budget(stack)


def engram_version() -> str:
    from engram import __version__

    return __version__


if __name__ == "__main__":
    main()
