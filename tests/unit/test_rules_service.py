"""The rules of tests/rules/service.py on the in-memory stores and the embedded index (see conftest.py)."""

from tests.rules.service import *  # noqa: F403 - the rules' own tests, collected here
