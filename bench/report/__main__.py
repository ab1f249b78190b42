"""``python -m bench.report``: see :mod:`bench.report`."""

from bench.report import main

main()
