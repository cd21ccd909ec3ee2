"""The rules of tests/rules/forgetting.py on the in-memory stores and the embedded index (see conftest.py)."""

from tests.rules.forgetting import *  # noqa: F403 - the rules' own tests, collected here
