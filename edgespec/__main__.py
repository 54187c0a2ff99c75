"""`python -m edgespec`: the `edgespec` command, where no console script is on PATH."""

from edgespec.app.cli import main

raise SystemExit(main())
