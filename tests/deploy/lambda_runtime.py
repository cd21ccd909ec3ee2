"""A stand-in for the Lambda Python runtime, run by the runtime's Python with `-S` (no site-packages):
sys.path is what Lambda gives a function (task root, the layer's /opt/python, the runtime's boto3), the
handler is imported once (init) and invoked with the events the test sends on stdin, one JSON line each.

    python3.11 -S lambda_runtime.py <task root> <layer python dir> <runtime site dir> <module.function>

Answers are lines on stdout starting with MARK (the function's own logs share stdout)."""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
import uuid

STARTED = time.perf_counter()
MARK = "\x1eENGRAM-RT "


def say(message: dict) -> None:
    sys.stdout.write(MARK + json.dumps(message, default=str) + "\n")
    sys.stdout.flush()


class Context:
    """The parts of the Lambda context object handlers and Powertools read."""

    def __init__(self, timeout_s: int):
        name = os.environ.get("AWS_LAMBDA_FUNCTION_NAME", "fn")
        self.function_name = name
        self.function_version = "$LATEST"
        self.memory_limit_in_mb = int(os.environ.get("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "128"))
        self.invoked_function_arn = (
            f"arn:aws:lambda:{os.environ.get('AWS_REGION')}:123456789012:function:{name}"
        )
        self.aws_request_id = str(uuid.uuid4())
        self.log_group_name = f"/aws/lambda/{name}"
        self.log_stream_name = "local"
        self._deadline = time.monotonic() + timeout_s

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self._deadline - time.monotonic()) * 1000))


def main() -> None:
    task_root, layer, runtime_site, handler_name = sys.argv[1:5]
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:0] = [task_root, layer, runtime_site]
    os.chdir(task_root)
    sys.path.insert(0, here)
    import recorder

    sys.path.remove(here)
    recorder.install()
    module_name, _, function_name = handler_name.rpartition(".")
    init_started = time.perf_counter()
    try:
        module = __import__(module_name)
        handler = getattr(module, function_name)
    except BaseException:
        say({"init_error": traceback.format_exc()})
        return
    say(
        {
            "ready": True,
            "init_ms": (time.perf_counter() - init_started) * 1000,
            "since_start_ms": (time.perf_counter() - STARTED) * 1000,
        }
    )
    timeout_s = int(os.environ.get("ENGRAM_TEST_TIMEOUT_S", "30"))
    for line in sys.stdin:
        event = json.loads(line)
        started = time.perf_counter()
        try:
            result, error = handler(event, Context(timeout_s)), None
        except BaseException:
            result, error = None, traceback.format_exc()
        say({"result": result, "error": error, "ms": (time.perf_counter() - started) * 1000})


if __name__ == "__main__":
    main()
