"""Fixture: a real PostgreSQL on loopback (filled in by the sources work)."""
