"""The one place a secret is read from AWS: an SSM SecureString by name, decrypted, kept 5 minutes (a rotated
value is picked up without a restart). The settings name the parameter; the value is read only where it is
needed, so a function that never needs a secret never holds one (the interactions function reads none)."""

from __future__ import annotations

# How long a fetched value is trusted before SSM is asked again
MAX_AGE_S = 300


class MissingSecret(LookupError):
    """The SSM parameter named does not exist (that part of engram is not set up on this stack)."""


def secure_parameter(name: str) -> str:
    """The decrypted value of an SSM SecureString; MissingSecret when no parameter has that name."""
    from aws_lambda_powertools.utilities import parameters

    try:
        value: str = parameters.get_parameter(name, decrypt=True, max_age=MAX_AGE_S)
    except parameters.exceptions.GetParameterError as exc:
        if "ParameterNotFound" in repr(exc.__cause__ or exc):
            raise MissingSecret(f"the SSM parameter {name} does not exist") from exc
        raise
    return value
