"""The rules of tests/rules/windows.py on the in-memory stores and the embedded index (see conftest.py)."""

from tests.rules.windows import *  # noqa: F403 - the rules' own tests, collected here
