"""envbuilder: reproducible, validated deep-learning environments for AMD GPUs."""

__version__ = "0.1.0"
