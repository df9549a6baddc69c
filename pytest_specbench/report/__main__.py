"""``python -m pytest_specbench.report``: see :func:`pytest_specbench.report.summary.main`;
``python -m pytest_specbench.report merge SHARD.json ... -o RUN.json``: see
:func:`pytest_specbench.report.merge.main`."""

import sys

if sys.argv[1:2] == ["merge"]:
    from .merge import main as merge_main

    raise SystemExit(merge_main(sys.argv[2:]))

from .summary import main

raise SystemExit(main())
