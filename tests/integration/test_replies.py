"""The rules of tests/rules/replies.py on DynamoDB (moto) and both index implementations: the answer's link
to its question travels in the point's payload, which each index must keep and give back."""

from tests.rules.replies import *  # noqa: F403 - the rules' own tests, run here on every seam
