"""The Discord front door: interaction webhooks, consent, backfill and /ask, all on Lambda and SQS."""
