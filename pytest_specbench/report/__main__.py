"""``python -m pytest_specbench.report``: see :func:`pytest_specbench.report.summary.main`."""

from .summary import main

raise SystemExit(main())
