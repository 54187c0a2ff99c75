"""The application layer: the `edgespec` command and what only it needs (benchmarks, the
demo, the demo model download, doctor). It sits on the core (edgespec.loader and below);
nothing in the core imports it."""
