"""What `python` means inside the simulated Lambda sandbox for the streaming proxy's run.sh: the
runtime's Python without the host's site-packages, recording AWS calls, then `python -m <module> ...`."""

import os
import runpy
import sys

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
import recorder  # noqa: E402

sys.path.remove(here)
recorder.install()
args = sys.argv[1:]
if len(args) < 2 or args[0] != "-m":
    sys.exit(f"python shim: only `python -m module ...` is supported, got {args}")
sys.argv = [args[1], *args[2:]]
sys.path.insert(0, os.getcwd())
runpy.run_module(args[1], run_name="__main__", alter_sys=True)
