"""The core's cursors: opaque continuation tokens bound to a `Scope`, held by a store.

``scope`` fingerprints who asked and what; ``store`` holds the token codec, the
`CursorStore` protocol and the in-memory store; ``sqlite_store`` and ``redis_store`` are
the durable and the shared ones.
"""
