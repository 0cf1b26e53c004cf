"""Everything that talks to a container engine goes through envbuilder.image.engine (issue 29,
"One typed engine interface"): no other module of the package imports the docker SDK or calls
the SDK's collections of a client (`client.api.*`, `client.images.*`, `client.containers.*`)
or its engine-wide calls (`client.info()`, `client.version()`, ...). An ast check, so a new
direct call anywhere fails here, whatever the module imports."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "envbuilder"

#: The engine layer itself: envbuilder/image/engine.py and the two modules split from it that
#: touch the SDK (its exceptions, its ssh:// transport), or the package it may become.
ENGINE = (
    "envbuilder/image/engine.py",
    "envbuilder/image/engine_errors.py",
    "envbuilder/image/engine_ssh.py",
    "envbuilder/image/engine/",
)

#: Modules still calling the SDK directly, each with why. Keep it empty: every engine call goes
#: through envbuilder.image.engine (the writer and repro moved there with issue 29).
ALLOWED: frozenset[str] = frozenset()

#: The docker SDK's collections of a DockerClient: `X.<attr>.<anything>` or `X.<attr>(...)`.
SDK_COLLECTIONS = frozenset({"api", "images", "containers"})
#: The DockerClient's own engine-wide calls, flagged on a receiver named like a client
#: (`client`, `self._client`, `docker_client`).
CLIENT_CALLS = frozenset({"info", "version", "ping", "login", "df", "events", "close"})


def _receiver_name(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return ""


def violations(source: str, where: str = "<source>") -> list[str]:
    """Each direct use of the docker SDK in `source`: "where:line what"."""
    found: list[str] = []
    tree = ast.parse(source, filename=where)
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [
                f"{where}:{node.lineno} import {alias.name}"
                for alias in node.names
                if alias.name == "docker" or alias.name.startswith("docker.")
            ]
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level == 0 and (module == "docker" or module.startswith("docker.")):
                found.append(f"{where}:{node.lineno} from {module} import ...")
        elif isinstance(node, ast.Attribute):
            parent = parents.get(node)
            if node.attr in SDK_COLLECTIONS and isinstance(parent, ast.Attribute | ast.Call):
                found.append(f"{where}:{node.lineno} .{node.attr} of {ast.unparse(node.value)}")
            elif (
                node.attr in CLIENT_CALLS
                and isinstance(parent, ast.Call)
                and parent.func is node
                and _receiver_name(node.value).endswith("client")
            ):
                found.append(f"{where}:{node.lineno} {ast.unparse(node)}()")
    return found


def _modules() -> dict[str, str]:
    """Path relative to the repository -> source, of every module of the package."""
    return {
        path.relative_to(ROOT).as_posix(): path.read_text(encoding="utf-8")
        for path in sorted(PACKAGE.rglob("*.py"))
    }


def _is_engine(rel: str) -> bool:
    return rel in ENGINE[:-1] or rel.startswith(ENGINE[-1])


def outside_the_engine(modules: dict[str, str]) -> list[str]:
    """The direct SDK uses in `modules` (path -> source) outside the engine layer and ALLOWED."""
    return [
        hit
        for rel, source in modules.items()
        if not _is_engine(rel) and rel not in ALLOWED
        for hit in violations(source, rel)
    ]


def test_only_the_engine_layer_calls_the_docker_sdk() -> None:
    modules = _modules()
    assert len(modules) > 100, "found too few modules: wrong folder?"
    found = outside_the_engine(modules)
    assert not found, (
        "direct docker SDK use outside envbuilder/image/engine.py (add a typed function there "
        "and call it):\n" + "\n".join(found)
    )


def test_the_engine_layer_is_where_the_sdk_is_called() -> None:
    engine = {rel: s for rel, s in _modules().items() if _is_engine(rel)}
    assert engine, "envbuilder/image/engine.py is gone: update ENGINE"
    assert any(violations(source, rel) for rel, source in engine.items())


def test_every_allowed_module_still_needs_its_entry() -> None:
    for rel in sorted(ALLOWED):
        path = ROOT / rel
        assert path.is_file(), f"{rel} is gone: remove it from ALLOWED"
        assert violations(path.read_text(encoding="utf-8"), rel), (
            f"{rel} no longer calls the SDK directly: remove it from ALLOWED"
        )


@pytest.mark.parametrize(
    "source",
    [
        "import docker\n",
        "import docker.errors as errors\n",
        "from docker.errors import APIError\n",
        "from docker import DockerClient\n",
        "def f(client):\n    return client.images.get('x').attrs\n",
        "def f(self):\n    self._client.api.build(path='.')\n",
        "def f(c):\n    c.containers.create('img', ['true'])\n",
        "def f(client):\n    return client.images.list(name='r')\n",
        "def f(client):\n    return client.info()['RegistryConfig']\n",
        "def f(docker_client):\n    return docker_client.version()\n",
        "def f(self):\n    self.client.ping()\n",
        "def f(client):\n    api = client.api.inspect_image\n",
    ],
)
def test_a_new_direct_call_is_caught(source: str) -> None:
    assert violations(source), f"not caught:\n{source}"


@pytest.mark.parametrize(
    "source",
    [
        "from envbuilder.image import engine\n"
        "def f(client):\n    return engine.image_info(client, 'x')\n",
        "from envbuilder.image.engine import Client\n",
        "def f(report):\n    return report.version()\n",  # not a client
        "def f(spec):\n    return spec.images\n",  # a plain attribute, no SDK call
        "from .docker import x\n",  # a relative module named docker is not the SDK
        "import dockerfile\n",
    ],
)
def test_what_is_not_a_direct_call(source: str) -> None:
    assert not violations(source)


def test_a_new_direct_call_fails_the_package_check() -> None:
    """The package check over the real modules with one direct call added to one of them, and
    a new module with another: it names both, and nothing else."""
    modules = _modules()
    rel = "envbuilder/image/transfer.py"
    modules[rel] += "\n\ndef _sneaky(client):\n    return client.images.get('x').id\n"
    modules["envbuilder/lock/newmodule.py"] = "import docker.errors\n"
    line = len(modules[rel].splitlines())
    assert outside_the_engine(modules) == [
        f"{rel}:{line} .images of client",
        "envbuilder/lock/newmodule.py:1 import docker.errors",
    ]
    # The same in the engine layer is not reported.
    only_there = {ENGINE[0]: "import docker\n"}
    assert outside_the_engine(only_there) == []
