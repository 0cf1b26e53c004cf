"""Write a PEP 751 pylock describing the distributions installed in the running interpreter.

    python tests/data/probe/make_pylock.py OUT.toml [--drop NAME ...] [--add NAME==VERSION ...]
        [--set NAME==VERSION ...]

For the probe's conformance tests and benchmarks: a lock that the running environment matches
(then --drop/--add/--set make one it does not). Standard library only, so it runs in any venv.
Packages carry no artifacts (sdist/wheels), which the probe does not read.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import re
import sys
from pathlib import Path


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def installed() -> dict[str, str]:
    """{canonical name: version}, the first distribution of each name on sys.path."""
    found: dict[str, str] = {}
    for dist in importlib.metadata.distributions():
        name = dist.metadata["Name"] if dist.metadata else None
        if name and _canonical(name) not in found:
            found[_canonical(name)] = dist.version
    return found


def render(packages: dict[str, str]) -> str:
    """The pylock text (names sorted, so the output is stable)."""
    py = f"{sys.version_info.major}.{sys.version_info.minor}"
    lines = [
        'lock-version = "1.0"',
        f'requires-python = ">={py}"',
        'created-by = "envbuilder-tests"',
        "",
    ]
    for name in sorted(packages):
        lines += ["[[packages]]", f'name = "{name}"', f'version = "{packages[name]}"', ""]
    return "\n".join(lines)


def _pin(text: str) -> tuple[str, str]:
    name, sep, version = text.partition("==")
    if not sep:
        raise argparse.ArgumentTypeError(f"want NAME==VERSION, got {text!r}")
    return _canonical(name), version


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("--drop", action="append", default=[], type=_canonical)
    parser.add_argument("--add", action="append", default=[], type=_pin)
    parser.add_argument("--set", action="append", default=[], type=_pin)
    args = parser.parse_args(argv)
    packages = installed()
    for name in args.drop:
        packages.pop(name, None)
    for name, version in [*args.add, *args.set]:
        packages[name] = version
    Path(args.out).write_text(render(packages), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
