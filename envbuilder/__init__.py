"""envbuilder: reproducible, validated deep-learning environments for AMD GPUs.

Distributed as `dl-envbuilder` (DISTRIBUTION); the command and this package are `envbuilder`.
"""

#: The one version source: pyproject.toml reads it (`[tool.setuptools.dynamic]`), and
#: tests/test_version.py holds the docs that name a version to it.
__version__ = "0.1.0"

#: The name to install by (`pip install dl-envbuilder`): `envbuilder` on the default index is
#: an unrelated project (docs/install.md).
DISTRIBUTION = "dl-envbuilder"
