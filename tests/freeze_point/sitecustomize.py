"""Loaded by the `make run` process a test starts with this directory on PYTHONPATH: when
ENGRAM_TEST_FREEZE names a call ("module:Class.method:n[:before]"), that call's n-th run in this process
stops its thread for good (after the call, or before it), and so does every later run in any thread (a
job or the index keeper doing the same work), and says so in ENGRAM_TEST_FREEZE_FILE. The test
then reads the stack as a user would, with the work frozen at exactly that step, and kills it with
kill -9. Nothing of engram's code is changed: the process is `make run`'s own."""

from __future__ import annotations

import functools
import importlib
import os
import threading

_SPEC = os.environ.get("ENGRAM_TEST_FREEZE", "")


def _install(spec: str, flag: str) -> None:
    module_name, qualname, nth, *when = spec.split(":")
    owner_name, method = qualname.split(".")
    owner = getattr(importlib.import_module(module_name), owner_name)
    original = getattr(owner, method)
    calls = {"n": 0}
    lock = threading.Lock()

    def freeze() -> None:
        with open(flag, "w") as out:
            out.write(spec)
        threading.Event().wait()  # for ever: the test kills the process

    @functools.wraps(original)
    def wrapper(*args, **kwargs):
        with lock:
            calls["n"] += 1
            hit = calls["n"] >= int(
                nth
            )  # every thread that gets there later stops too: the step is the process's
        if hit and when == ["before"]:
            freeze()
        result = original(*args, **kwargs)
        if hit:
            freeze()
        return result

    setattr(owner, method, wrapper)


if _SPEC:
    _install(_SPEC, os.environ["ENGRAM_TEST_FREEZE_FILE"])
