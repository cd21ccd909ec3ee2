"""Rules every seam holds (each module's tests are collected by tests/unit and tests/integration)."""


def with_retrieval(service, **changes):
    """A service over the same stores, index, embedder and queue whose retrieval differs from the shipped
    defaults by `changes` (a setting the defaults have off, to test the machinery behind it)."""
    from dataclasses import replace

    from engram.retrieval import DEFAULT
    from engram.service import MemoryService

    return MemoryService(
        records=service.records,
        state=service.state,
        index=service.index,
        embedder=service.indexer.embedder,
        queue=service.queue,
        retrieval=replace(DEFAULT, **changes),
    )
