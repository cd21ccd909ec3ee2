"""Worker function: runs queued jobs with partial batch failures, on the process's engine and, where a job
needs them, the proxy's and Discord's parts (this is the one place the worker's parts are wired)."""

from aws_lambda_powertools.utilities.batch import process_partial_response

from engram.discord.runtime import get_discord
from engram.engine import get_engine
from engram.observability import instrumented
from engram.proxy.runtime import get_proxy
from engram.worker import Worker, processor

worker = Worker(get_engine, proxy=get_proxy, discord=get_discord)


@instrumented
def handler(event, context):
    """SQS batch in, `batchItemFailures` out."""
    return process_partial_response(
        event=event, record_handler=worker.handle, processor=processor, context=context
    )
