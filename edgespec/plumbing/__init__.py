"""The plumbing the algorithm stands on, none of it about decoding: the Jinja2 sandbox for chat
templates (sandbox), field checks of the JSON files read (schema), verified sha256 stamps
(integrity), Ctrl-C and SIGTERM around native calls (interrupts), huge pages and lazily zeroed
buffers (hugepages), this machine's CPU and GPU (machine), $EDGESPEC_HOME and its JSON stores
(paths), and a progress bar (progress). These modules import nothing from edgespec but its
errors; import each by its own name (edgespec.plumbing.paths, ...)."""
