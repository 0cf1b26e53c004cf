"""A replica of the ROCm pip SDK's package indexes for tests (envbuilder-independent).

`load_catalog()` reads tests/data/replica/packages.toml (stand-ins with the real names,
versions, tags and dependency metadata); `serve()` writes them as PEP 503 indexes and serves
them on 127.0.0.1; `uvcompile` runs uv against them the way envbuilder does. Everything here is
test data and test machinery: nothing of it ships, and the shipped locks stay real."""
