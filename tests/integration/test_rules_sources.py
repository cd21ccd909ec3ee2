"""The rules of tests/rules/sources.py on DynamoDB under moto (the byLine and byScope indexes they read)
and both index implementations (the `service` fixture of this directory)."""

from tests.rules.sources import *  # noqa: F403 - the rules' own tests, run here on DynamoDB
