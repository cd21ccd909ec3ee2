"""The rules of tests/rules/lifecycle.py on DynamoDB under moto and both index implementations (the
`service` fixture of this directory)."""

from tests.rules.lifecycle import *  # noqa: F403 - the rules' own tests, run here on DynamoDB
