"""The rules of tests/rules/replies.py on the in-memory stores and the embedded index (see conftest.py)."""

from tests.rules.replies import *  # noqa: F403 - the rules' own tests, collected here
