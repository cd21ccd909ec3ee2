"""HTTP surfaces (FastAPI)."""
