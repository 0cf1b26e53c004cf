"""The image layer the builders use: the Docker engine and registries, the run flags of a
container, and the deterministic tar, OCI and `.wsl` writers."""
