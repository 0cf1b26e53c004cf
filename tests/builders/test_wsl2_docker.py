"""The wsl2 target's Docker path on a small rootfs (no network, no torch): build an image that
has the nondeterminism real builds have (useradd's shadow day, logs, ldconfig's cache, a password
hash, a kernel), build it twice without cache, export both through the normalizer, compare
sha256s, check Microsoft's rules, then `docker import` the `.wsl`, run its first launch (the oobe
script creates the default user, as in Microsoft's modern format) and run a command as that user
-- the engine path validation uses.

The full env build (torch, the probe) is tests/builders/test_wsl2_build.py.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from typing import Any

import pytest

from envbuilder.builders import wsl2, wsl2_run
from envbuilder.core.errors import ValidationError
from envbuilder.image import wsl as wsltar
from envbuilder.image.wsl import icon

pytestmark = [pytest.mark.docker, pytest.mark.slow]

SDE = 1_790_000_000
DOCKERFILE = """\
FROM debian:bookworm-slim
RUN useradd --create-home --uid 1001 --shell /bin/bash someone \\
 && echo 'someone:secret' | chpasswd \\
 && mkdir -p /usr/lib/wsl /boot \\
 && date +%s%N > /var/log/build-time.log \\
 && head -c 64 /dev/urandom > /boot/vmlinuz-6.1.0-fake \\
 && ldconfig \\
 && head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \\n' > /etc/machine-id
COPY wsl.conf /etc/wsl.conf
COPY wsl-distribution.conf /etc/wsl-distribution.conf
COPY oobe.sh /usr/lib/wsl/oobe.sh
COPY tiny.ico /usr/lib/wsl/tiny.ico
RUN chmod 0755 /usr/lib/wsl/oobe.sh
"""
WSL_CONF = "[boot]\nsystemd = false\n"
DIST_CONF = (
    "[oobe]\ncommand = /usr/lib/wsl/oobe.sh\ndefaultUid = 1000\ndefaultName = tiny\n"
    "[shortcut]\nicon = /usr/lib/wsl/tiny.ico\n"
)
# Like the rendered oobe.sh: creates uid 1000 at first launch, changes nothing a second time.
OOBE = """#!/bin/sh
set -eu
if ! getent passwd 1000 >/dev/null; then
    useradd --create-home --uid 1000 --user-group --shell /bin/bash envbuilder
    echo "created envbuilder"
fi
"""


@pytest.fixture(scope="module")
def tiny_images(
    docker_client: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, str]]:
    """Two builds of one Dockerfile, the second without the layer cache."""
    from envbuilder.image import engine

    context = tmp_path_factory.mktemp("tiny-context")
    (context / "Dockerfile").write_text(DOCKERFILE)
    (context / "wsl.conf").write_text(WSL_CONF)
    (context / "wsl-distribution.conf").write_text(DIST_CONF)
    (context / "oobe.sh").write_text(OOBE)
    (context / "tiny.ico").write_bytes(icon.icon_bytes())
    first = engine.build_image(docker_client, context, "envbuilder-test/wsl-tiny:a", {}, {})
    second = engine.build_image(
        docker_client, context, "envbuilder-test/wsl-tiny:b", {}, {}, nocache=True
    )
    yield first, second
    for tag in ("envbuilder-test/wsl-tiny:a", "envbuilder-test/wsl-tiny:b"):
        docker_client.images.remove(tag, force=True)


@pytest.fixture(scope="module")
def tiny_wsl(
    docker_client: Any, tiny_images: tuple[str, str], tmp_path_factory: pytest.TempPathFactory
) -> tuple[wsltar.WslResult, ...]:
    out = tmp_path_factory.mktemp("tiny-dist")
    return tuple(
        wsl2.export_image(docker_client, image, out / f"tiny-{i}.wsl", SDE)
        for i, image in enumerate(tiny_images)
    )


def test_two_builds_differ_as_images_but_not_as_wsl(
    tiny_images: tuple[str, str], tiny_wsl: tuple[wsltar.WslResult, ...]
) -> None:
    assert tiny_images[0] != tiny_images[1]  # the builds really differ (logs, machine-id, ...)
    first, second = tiny_wsl
    assert first.sha256 == second.sha256
    assert first.path.read_bytes() == second.path.read_bytes()


def test_exported_tar_keeps_microsoft_rules(tiny_wsl: tuple[wsltar.WslResult, ...]) -> None:
    findings = wsltar.check_wsl_tar(tiny_wsl[0].path, source_date_epoch=SDE)
    assert [str(f) for f in findings] == []  # Microsoft's modern format: no warning either


def test_export_dropped_what_the_build_left(tiny_wsl: tuple[wsltar.WslResult, ...]) -> None:
    dropped = tiny_wsl[0].stats.dropped
    for name in (
        "etc/resolv.conf",
        ".dockerenv",
        "boot/vmlinuz-6.1.0-fake",
        "var/log/build-time.log",
        "var/cache/ldconfig/aux-cache",
    ):
        assert name in dropped, name


def test_first_launch_read_from_the_tar(tiny_wsl: tuple[wsltar.WslResult, ...]) -> None:
    # no user with the default uid in the tar: WSL starts as the uid the oobe script creates
    assert wsl2_run.first_launch(tiny_wsl[0].path) == wsl2_run.FirstLaunch(
        "/usr/lib/wsl/oobe.sh", "1000"
    )


def test_imported_wsl_runs_as_default_user(
    docker_client: Any, tiny_wsl: tuple[wsltar.WslResult, ...]
) -> None:
    result = tiny_wsl[0]
    tag = wsl2.imported_tag("tiny", result.sha256)
    launch = wsl2_run.first_launch(result.path)
    assert launch.command is not None
    try:
        image = wsl2.import_wsl(docker_client, result.path, tag)
        # A stand-in "probe": the same ProbeRun shape validation uses, through a login shell.
        script = (
            'printf \'{"uid": %s, "user": "%s", "resolv": %s}\' "$(id -u)" "$(id -un)" '
            '"$(test -s /etc/resolv.conf && echo true || echo false)" > "$0"'
        )
        run = wsl2_run.ProbeRun(
            ("/bin/sh", "-lc", script, wsl2_run.REPORT_PATH),
            {"/tmp/envbuilder/probe.pyz": b"not used"},
        )
        runner = wsl2_run.DockerEngine(docker_client, image)
        runner.first_launch(launch.command, lambda *a: None)
        assert runner.image == f"{tag}-oobe"
        code, output, report = runner.run(run, launch.user, lambda *a: None)
        assert code == 0, output
        assert report is not None
        assert json.loads(report)["uid"] == 1000
        assert json.loads(report)["user"] == "envbuilder"
        # what validate records as the report's engine
        described = runner.describe()
        assert described["product"] == "docker"
        assert described["version"] == docker_client.version()["Version"]
        # the first launch is kept for this .wsl: a second validation reuses it
        again = wsl2_run.DockerEngine(docker_client, image)
        again.first_launch(launch.command, lambda *a: None)
        assert again.image == runner.image
    finally:
        for name in (tag, f"{tag}-oobe"):
            docker_client.images.remove(name, force=True)


def test_a_failing_first_launch_is_a_clear_error(
    docker_client: Any, tiny_wsl: tuple[wsltar.WslResult, ...]
) -> None:
    result = tiny_wsl[0]
    tag = wsl2.imported_tag("tiny-broken", result.sha256)
    try:
        image = wsl2.import_wsl(docker_client, result.path, tag)
        with pytest.raises(
            ValidationError,
            match=r"first-launch command .* failed \(exit 3\)"
            r"(.|\n)*no such group",
        ):
            wsl2_run.run_first_launch(docker_client, image, "echo 'no such group' >&2; exit 3")
        assert not docker_client.images.list(name=f"{tag}-oobe")  # nothing committed
    finally:
        docker_client.images.remove(tag, force=True)


def test_shadow_in_tar_has_no_hash(tiny_wsl: tuple[wsltar.WslResult, ...]) -> None:
    import tarfile

    with tarfile.open(tiny_wsl[0].path) as tar:
        fh = tar.extractfile("etc/shadow")
        assert fh is not None
        lines = fh.read().decode().splitlines()
    user = next(line for line in lines if line.startswith("someone:"))
    assert user.split(":")[1] == "*"  # chpasswd wrote a hash; the .wsl carries none


def test_no_leftover_files(tiny_wsl: tuple[wsltar.WslResult, ...]) -> None:
    folder = tiny_wsl[0].path.parent
    assert sorted(p.name for p in folder.iterdir()) == ["tiny-0.wsl", "tiny-1.wsl"]
    shutil.rmtree(folder)
