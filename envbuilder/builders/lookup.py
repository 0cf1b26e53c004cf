"""A target's builder, from its descriptor.

A descriptor names its builder by a string ("envbuilder.builders.docker:DockerBuilder"), so that
`check` and `render` never import the engine code. The import happens here, in the builders
layer: no module of `targets/` imports a builder, by name or otherwise, and the two packages have
no circle (importlib imports included; tests/test_layers.py).
"""

from __future__ import annotations

import importlib

from envbuilder.targets.base import Builder, TargetDescriptor


def builder_for(descriptor: TargetDescriptor) -> Builder:
    """A new instance of `descriptor`'s builder (its module imported on first use)."""
    module, _, attr = descriptor.builder.partition(":")
    # the marker tells tests/test_layers.py which package this name is in (its test checks it)
    loaded = importlib.import_module(module)  # import-by-name: envbuilder.builders
    builder: Builder = getattr(loaded, attr)()
    return builder
