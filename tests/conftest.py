"""Shared fixtures. Real servers are started by the fixture modules below, never faked."""

import sys
from collections.abc import Iterator

import pytest
from hypothesis import settings

pytest_plugins = ["tests.fixtures_provider", "tests.fixtures_redis", "tests.fixtures_postgres"]

# No property test has a deadline: cost is asserted by counting work, never by the clock,
# and on a loaded 2-core machine a slow example once failed a test whose outputs agreed.
settings.register_profile("jsonbudget", deadline=None)
settings.load_profile("jsonbudget")


@pytest.fixture(autouse=True)
def _regression_a_test_left_the_tracer_changed() -> Iterator[None]:
    """Coverage measures through the trace function: a test that set its own and then
    cleared it stopped coverage for every later test in its process, and CI fell under
    its floor on a run whose tests all passed. Each test must leave both hooks as found."""
    before = sys.gettrace(), sys.getprofile()
    yield
    after = sys.gettrace(), sys.getprofile()
    assert after[0] is before[0], f"the test left the trace function {after[0]!r}"
    assert after[1] is before[1], f"the test left the profile function {after[1]!r}"
