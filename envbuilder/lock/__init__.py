"""Stage 2, the lock: resolution (uv, apt, pip-SDK, base images), the lock files, the
wheel cache, what a re-lock changed, and the SBOM written from a lock."""
