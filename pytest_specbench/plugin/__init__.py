"""The pytest side: hooks and fixtures (``hooks``, the entry point), the hook specification
(``hookspec``), command-line options and ini keys (``options``), the per-run state (``state``),
a cell's run (``runner``; its JSON record built in ``cell_record``), the results document
rewritten after each cell (``results``) and the xdist scheduler (``xdist_policy``).

The only subpackage that imports pytest; it may import every other one."""
