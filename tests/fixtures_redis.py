"""Fixture: a real redis-server on loopback (filled in by the cursor-store work)."""
