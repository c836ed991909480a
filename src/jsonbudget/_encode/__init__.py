"""The core's encoder: values to bounded JSON bytes with in-band markers.

``encoder`` holds the public `Encoder` and its one-call verbs and the internal interface
the page builder and the guards use; ``render`` is the fitting of values the fast path
does not take (``strings`` cuts strings, ``markers`` writes the markers); ``bound`` is the
size walk (compiled in ``_speedups.c``, with a Python twin) that decides whether one
orjson call may encode a value whole.
"""
