"""Shared fixtures. Real servers are started by the fixture modules below, never faked."""

from hypothesis import settings

pytest_plugins = ["tests.fixtures_redis", "tests.fixtures_postgres"]

# No property test has a deadline: cost is asserted by counting work, never by the clock,
# and on a loaded 2-core machine a slow example once failed a test whose outputs agreed.
settings.register_profile("jsonbudget", deadline=None)
settings.load_profile("jsonbudget")
