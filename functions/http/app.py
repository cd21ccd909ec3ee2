"""HTTP function: the Memory API on API Gateway (HTTP API) through Mangum."""

from mangum import Mangum

from engram.api.app import create_app

handler = Mangum(create_app(), lifespan="off")
