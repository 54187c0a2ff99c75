"""Back-ends behind the Runtime protocol (edgespec.runtime), opened by
edgespec.backends.open_runtime according to what the model file is."""
