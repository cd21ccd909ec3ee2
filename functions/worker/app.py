"""Worker function: runs queued jobs with partial batch failures."""

from aws_lambda_powertools.utilities.batch import process_partial_response

from engram.observability import instrumented
from engram.worker import handle, processor


@instrumented
def handler(event, context):
    """SQS batch in, `batchItemFailures` out."""
    return process_partial_response(event=event, record_handler=handle, processor=processor, context=context)
