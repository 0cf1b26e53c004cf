"""Deployment targets: one descriptor module each (docker, wsl2, windows, native), what a target
is in `base`, and the one list of targets in `registry`.

    from envbuilder.targets import registry
    registry.get("docker")                  the docker TargetDescriptor
    registry.names()                        every target, in order
    builders.lookup.builder_for(registry.get("native"))   its Builder (envbuilder.builders.venv)

A descriptor module registers itself when imported; the registry imports the built-in ones (and
installed plugins, entry point group "envbuilder.targets") on first use. How to add a target:
docs/architecture.md.
"""
