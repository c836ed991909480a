"""The tools wing: the ``jsonbudget`` command line, its demo and the limit tuner."""
