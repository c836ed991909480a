"""r27: the tuner measured an item holding a datetime whose tzinfo fails with orjson,
which calls that tzinfo mid-write and crashes the process (orjson 3.11.9)."""

from __future__ import annotations

from tests.limited import run_limited


def test_regression_tune_of_a_datetime_whose_tzinfo_raises_crashed_the_process() -> None:
    done = run_limited(
        """
        import datetime as dt
        from jsonbudget import bounded_dumps, tune

        class RaisingTZ(dt.tzinfo):
            def utcoffset(self, d):
                raise RuntimeError("boom")

            def dst(self, d):
                return None

        item = {"t": dt.datetime(2024, 1, 1, tzinfo=RaisingTZ())}
        report = tune([item] * 3)
        # measured as the encoder writes it: the datetime as an unencodable marker
        print(report.item_sizes == (len(bounded_dumps(item, max_bytes=1 << 20)),) * 3)
        """
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True"]
