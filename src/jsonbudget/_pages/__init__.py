"""The core's page builder: items from a source, each encoded once, into one envelope.

Data flows one way: a source (``_sources``) yields items, `PageBuilder` encodes them
through the encoder (``_encode``), closes the envelope, and `Paginator` mints the
continuation in a cursor store (``_cursors``).
"""
