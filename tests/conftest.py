"""Shared fixtures. Real servers are started by the fixture modules below, never faked."""

pytest_plugins = ["tests.fixtures_redis", "tests.fixtures_postgres"]
