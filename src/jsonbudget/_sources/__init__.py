"""The core's sources: where page items come from (sequences, files, SQL databases).

``base`` holds the `Source` protocol and the in-memory sources, ``files`` the JSON array
and JSON Lines files, ``sql`` the SQLite and PostgreSQL sources.
"""
