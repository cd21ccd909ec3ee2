"""The rules of tests/rules/sources.py on the in-memory stores and the embedded index (see conftest.py)."""

from tests.rules.sources import *  # noqa: F403 - the rules' own tests, collected here
