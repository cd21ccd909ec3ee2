"""The rules of tests/rules/lifecycle.py on the in-memory stores and the embedded index (see conftest.py)."""

from tests.rules.lifecycle import *  # noqa: F403 - the rules' own tests, collected here
