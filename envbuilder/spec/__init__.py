"""Stage 1, the spec: environments.toml loaded, checked against the compat rules, and
the starter spec `envbuilder init` writes."""
