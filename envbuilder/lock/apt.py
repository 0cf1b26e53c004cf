"""The system packages are locked too: exact apt versions per build stage, resolved at lock time
in a container of the pinned base image, recorded in `<env>.lock.toml`, installed by version.

    [targets.docker.apt.runtime]          one table per stage of the rendered Dockerfile that
    libexpat1 = "2.5.0-1+deb12u1"         installs apt packages: every package that stage's
    python3 = "3.11.2-1+b1"               `apt-get install` adds or upgrades on top of the
    ...                                   stages below it, and the packages it names that are
                                          there already, each with its exact version

Resolving (`envbuilder lock`, needs the Docker engine and the base image's package archive): one
container of the base image by digest points apt at the snapshot archive of the lock's time (the
same sources the rendered images write first: envbuilder.lock.aptsnapshot), runs `apt-get update`,
lists the installed packages (`dpkg-query`) and asks `apt-get install --simulate
--no-install-recommends` for the packages of each stage together with those of the stages it
builds on. Every `Inst` line is a package that
build would install or upgrade, with its version; a stage's pins are what its simulation adds to
the one before. Rendering writes `apt-get install ... pkg=version ...` (envbuilder.core.plan), so a
build installs exactly those; when the archive no longer serves one of them, `apt-get` stops and
`explain_build_failure` turns its message into one that names the package and the command that
locks what the archive serves now.

Not pinned here: packages a step installs by other means (the ROCm WSL stack's amdgpu-install,
which adds AMD's repository and installs from it), and the archive's signing state.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from envbuilder.core.errors import BuildError, EnvbuilderError, LockError, output_tail

if TYPE_CHECKING:
    from envbuilder.image.engine import Client

#: A Debian package name (Policy 5.6.1), optionally arch-qualified (`libc6:amd64`).
PACKAGE_RE = re.compile(r"[a-z0-9][a-z0-9+.-]+(:[a-z0-9-]+)?\Z")
#: A Debian version (Policy 5.6.12): [epoch:]upstream[-revision].
VERSION_RE = re.compile(r"[0-9A-Za-z.+~:-]+\Z")
#: A stage of the rendered Dockerfile (envbuilder.core.plan stage names).
STAGE_RE = re.compile(r"[a-z][a-z0-9-]*\Z")
#: `apt-get install --simulate` output: "Inst NAME [OLD] (NEW SOURCES [ARCH])".
_INST = re.compile(r"^Inst (\S+) (?:\[(\S+)\] )?\((\S+) ")
#: apt-get's messages for a version or package the archive does not serve.
_MISSING_VERSION = re.compile(r"E: Version '([^']+)' for '([^']+)' was not found")
_MISSING_PACKAGE = re.compile(r"E: (?:Unable to locate package|Package '?)([a-z0-9][a-z0-9+.:-]*)")
#: A .deb the archive's index lists but its pool does not serve (a snapshot replica lacking it).
_MISSING_FILE = re.compile(
    r"Failed to fetch (\S+/pool/\S*/([a-z0-9][a-z0-9+.-]*)_([^_/\s]+)_[a-z0-9]+\.deb)\s+404"
)
#: A sources line naming a snapshot archive: (its URL, its timestamp).
_SNAPSHOT_URL = re.compile(r"(http://snapshot\.[a-z.]+/\S*?/([0-9]{8}T[0-9]{6}Z))")

#: A target's apt pins: stage -> package -> version.
AptPins = Mapping[str, Mapping[str, str]]


# ----------------------------------------------------------------------------- the lock's tables


def parse_apt_table(value: Any, where: str) -> dict[str, dict[str, str]]:
    """Validate `targets.<t>.apt` as read from TOML: stage names, package names and versions
    in Debian's grammar (so nothing else reaches a rendered RUN line). LockError naming the key
    otherwise."""
    relock = "run `envbuilder lock --refresh-apt` to write it again"
    if not isinstance(value, dict):
        raise LockError(f"{where}.apt must be a table of stages; {relock}")
    out: dict[str, dict[str, str]] = {}
    for stage, packages in value.items():
        if not STAGE_RE.fullmatch(stage) or not isinstance(packages, dict):
            raise LockError(
                f"{where}.apt.{stage} must be a stage name with a table of "
                f'package = "version"; {relock}'
            )
        for name, version in packages.items():
            if not PACKAGE_RE.fullmatch(name):
                raise LockError(
                    f"{where}.apt.{stage}: {name!r} is not a Debian package name; {relock}"
                )
            if not isinstance(version, str) or not VERSION_RE.fullmatch(version):
                raise LockError(
                    f"{where}.apt.{stage}.{name} = {version!r} is not a Debian version; {relock}"
                )
        out[stage] = dict(sorted(packages.items()))
    return dict(sorted(out.items()))


def json_schema() -> dict[str, Any]:
    """The JSON schema of a target's `apt` table (envbuilder.lock.schema.json_schema embeds
    it)."""

    def anchored(pattern: re.Pattern[str]) -> str:
        return "^" + pattern.pattern.removesuffix("\\Z") + "$"

    versions = {
        "type": "object",
        "propertyNames": {"pattern": anchored(PACKAGE_RE)},
        "additionalProperties": {"type": "string", "pattern": anchored(VERSION_RE)},
    }
    return {
        "type": "object",
        "propertyNames": {"pattern": anchored(STAGE_RE)},
        "additionalProperties": versions,
    }


# ----------------------------------------------------------------------------- what a plan installs


@dataclass(frozen=True)
class AptStage:
    """A stage of a target's plan that runs `apt-get install`: its name, the stages below it
    (bottom first) that install apt packages too, and the packages it names."""

    name: str
    below: tuple[str, ...]
    packages: tuple[str, ...]


def apt_stages(stages: Sequence[Any]) -> list[AptStage]:
    """The AptStages of a plan's stages (envbuilder.core.plan.Stage), in build order."""
    by_name = {s.name: s for s in stages if s.name}
    out: list[AptStage] = []
    for stage in stages:
        names = tuple(
            p
            for step in stage.steps
            if getattr(step, "kind", "") == "apt-install"
            for p in step.packages
        )
        if not stage.name or not names:
            continue
        below: list[str] = []
        parent = by_name.get(stage.base)
        while parent is not None:
            if any(getattr(s, "kind", "") == "apt-install" for s in parent.steps):
                below.insert(0, parent.name)
            parent = by_name.get(parent.base)
        out.append(AptStage(stage.name, tuple(below), names))
    return out


def plan_apt_stages(env: Any, target: str) -> list[AptStage]:
    """The apt stages of `env`'s plan for `target` (its descriptor's `plan`; none for targets
    without one). The pins of the lock do not change which stages install what."""
    from envbuilder.core import plan
    from envbuilder.core.errors import RenderError
    from envbuilder.targets import registry

    descriptor = registry.get(target)
    if descriptor.plan is None or target not in env.targets:
        return []
    rocm = env.release
    try:
        built = descriptor.plan(env, plan.PlanInputs(rocm, plan.LockPins(), {}))
    except RenderError:
        return []  # `envbuilder check` / `render` report what is wrong with the spec
    return apt_stages(built.stages)


def coverage_problem(stages: Sequence[AptStage], pins: AptPins | None) -> str | None:
    """Why `pins` do not lock every package the stages name (None when they do)."""
    for stage in stages:
        locked = (pins or {}).get(stage.name)
        if locked is None:
            return f"the apt packages of stage {stage.name!r} are not locked"
        missing = [p for p in stage.packages if p not in locked]
        if missing:
            return (
                f"stage {stage.name!r} installs {', '.join(missing)}, which the lock does not pin"
            )
    extra = sorted(set(pins or {}) - {s.name for s in stages})
    if extra:
        return f"the lock pins apt packages of stage(s) {', '.join(extra)}, which the plan lacks"
    return None


# ----------------------------------------------------------------------------- resolving


_MARK = "### envbuilder "

#: What to resolve in one container: target -> its apt stages (all on the same base image).
Requests = Mapping[str, Sequence[AptStage]]


def resolve_script(requests: Requests, sources: Sequence[str] = ()) -> str:
    """The sh script the resolving container runs (root, in the base image). `sources`: the sh
    lines that point apt at the snapshot archive the image will read (aptsnapshot.shell_lines),
    run first, so every version resolved is one that snapshot serves."""
    lines = [
        "set -e",
        *sources,
        "export DEBIAN_FRONTEND=noninteractive",
        # retries as in the rendered Dockerfiles (common/dockerfile.j2): the snapshot archive
        # rate-limits (issue 34); `--simulate` fetches nothing
        "apt-get -o Acquire::Retries=5 update -qq >/dev/null",
        f"echo '{_MARK}installed'",
        "dpkg-query -W -f '${Package} ${Version} ${db:Status-Abbrev}\\n'",
    ]
    for target, stages in sorted(requests.items()):
        for stage in stages:
            words = " ".join(shlex.quote(p) for p in _chain_packages(stages, stage))
            lines += [
                f"echo '{_MARK}stage {target}/{stage.name}'",
                f"apt-get install --simulate --no-install-recommends -q {words}",
            ]
    return "\n".join(lines) + "\n"


def _chain_packages(stages: Sequence[AptStage], stage: AptStage) -> list[str]:
    by_name = {s.name: s for s in stages}
    names: list[str] = []
    for name in (*stage.below, stage.name):
        for package in by_name[name].packages:
            if package not in names:
                names.append(package)
    return names


def _sections(output: str) -> dict[str, list[str]]:
    sections: dict[str, list[str]] = {}
    current: str | None = None
    for line in output.splitlines():
        if line.startswith(_MARK):
            current = line[len(_MARK) :].strip()
            sections[current] = []
        elif current is not None:
            sections[current].append(line)
    return sections


def parse_resolution(output: str, requests: Requests) -> dict[str, dict[str, dict[str, str]]]:
    """The pins (target -> stage -> package -> version) from the resolving container's output
    (see resolve_script)."""
    sections = _sections(output)
    installed: dict[str, str] = {}
    for line in sections.get("installed", []):
        parts = line.split()
        if len(parts) >= 3 and parts[2].startswith("ii"):
            installed[parts[0]] = parts[1]
    return {
        target: _target_pins(target, stages, sections, installed)
        for target, stages in requests.items()
    }


def _target_pins(
    target: str,
    stages: Sequence[AptStage],
    sections: Mapping[str, list[str]],
    installed: Mapping[str, str],
) -> dict[str, dict[str, str]]:
    unions: dict[str, dict[str, str]] = {}
    pins: dict[str, dict[str, str]] = {}
    for stage in stages:
        union = _inst_lines(sections.get(f"stage {target}/{stage.name}"), stage.name)
        before: dict[str, str] = {}
        for name in stage.below:
            before.update(unions.get(name, {}))
        added = {p: v for p, v in union.items() if before.get(p) != v}
        for package in stage.packages:
            version = before.get(package) or union.get(package) or installed.get(package)
            if version is None:
                raise LockError(
                    f"apt resolved no version of {package} (stage {stage.name} of "
                    f"{target}); check the package name"
                )
            added.setdefault(package, version)
        unions[stage.name] = union
        pins[stage.name] = dict(sorted(added.items()))
    return pins


def _inst_lines(lines: list[str] | None, stage: str) -> dict[str, str]:
    if lines is None:
        raise LockError(
            f"the apt resolution of stage {stage} gave no output (the container stopped early)"
        )
    found: dict[str, str] = {}
    for line in lines:
        match = _INST.match(line)
        if match:
            found[match[1]] = match[3]
    return found


def resolve_apt(
    client: Client,
    base: str,
    requests: Requests,
    environ: Mapping[str, str],
    sources: Sequence[str] = (),
) -> dict[str, dict[str, dict[str, str]]]:
    """Resolve the pins of `requests` (target -> stages) in one container of `base` (an image
    reference with digest, which the engine has or can pull). `environ`: the proxies to hand to
    apt. LockError saying what apt said when it cannot."""
    wanted = {t: stages for t, stages in requests.items() if stages}
    if not wanted:
        return {t: {} for t in requests}
    code, output = _run_in_base(client, base, resolve_script(wanted, sources), environ)
    if code != 0:
        tail = output_tail(output, 15, indent="    ")
        raise LockError(
            f"resolving the apt packages in {base} failed (exit {code}); apt "
            f"said:\n{tail}\nCheck the package names in the spec (apt = [...]) and "
            "that the base image's package archive is reachable (proxies: "
            "HTTP_PROXY/HTTPS_PROXY)"
        )
    return {**{t: {} for t in requests}, **parse_resolution(output, wanted)}


def _run_in_base(
    client: Client, base: str, script: str, environ: Mapping[str, str]
) -> tuple[int, str]:
    """(exit code, output) of `script` run as root in a container of `base` (pulled when the
    engine lacks it), with the proxies of `environ`."""
    from envbuilder.core.imagedefs import ROLE_LABEL, needs_host_network, proxy_build_args
    from envbuilder.image import engine

    proxies = proxy_build_args(environ)
    try:
        if engine.existing_image(client, base) is None:
            engine.pull_image(client, base)
        code, output, _files = engine.run_in_container(
            client,
            base,
            ["/bin/sh", "-c", script],
            engine.ContainerRun(
                user="0",
                environment=proxies,
                network_mode="host" if needs_host_network(proxies) else None,
                labels={ROLE_LABEL: "apt-lock"},
                timeout_s=900,
            ),
        )
    except EnvbuilderError as exc:
        raise LockError(f"cannot resolve the apt packages in {base}: {exc}") from None
    return code, output


def engine_resolver(
    base: str, requests: Requests, sources: Sequence[str] = ()
) -> dict[str, dict[str, dict[str, str]]]:
    """resolve_apt through the engine DOCKER_HOST names, with this process's proxies (and
    ENVBUILDER_APT_PROXY), apt pointed at `sources` first."""
    import os

    from envbuilder.image.engine import connect

    try:
        client = connect()
    except EnvbuilderError as exc:
        raise NoEngineError(f"no Docker engine to resolve them in: {exc}") from None
    return resolve_apt(client, base, requests, os.environ, sources)


class NoEngineError(LockError):
    """The apt versions cannot be resolved here: no Docker engine answers. `envbuilder lock`
    writes the lock without them and warns; `lock --check` fails until they are locked."""


# ----------------------------------------------------------------------------- build failures


def explain_build_failure(error: BuildError, env: str, target: str) -> BuildError:
    """The build error to show: when apt stopped because the archive no longer serves a
    locked version (or package), a message naming it and the command that re-locks; the
    error as it was otherwise."""
    text = str(error)
    what = _missing_pin(text)
    if what is None:
        return error
    snapshot = _SNAPSHOT_URL.search(text)
    if snapshot is None:
        return BuildError(
            f"{env}/{target}: the package archive no longer serves {what}, which "
            f"lockfiles/{env}.lock.toml pins ([targets.{target}.apt]); lock the versions it "
            f"serves now with `envbuilder lock --env {env} --refresh-apt`, then `envbuilder "
            f"render --env {env}` and build again (the image's digest changes with them).\n{text}"
        )
    return BuildError(
        f"{env}/{target}: the snapshot archive apt reads ({snapshot[1]}, the lock's time "
        f"{snapshot[2]}) does not serve {what}, which lockfiles/{env}.lock.toml pins "
        f"([targets.{target}.apt]). The pins were resolved in that very snapshot, so the "
        "archive this machine reaches for it is not the snapshot the lock was made against: "
        "check ENVBUILDER_APT_PROXY (the apt proxy or snapshot replica this machine uses) or "
        f"re-resolve the pins there with `envbuilder lock --env {env} --refresh-apt`, then "
        f"`envbuilder render --env {env}` (the image's digest changes with them).\n{text}"
    )


def _missing_pin(text: str) -> str | None:
    """`NAME VERSION` (or NAME) that apt said its archive does not serve, or None."""
    missing = _MISSING_VERSION.search(text)
    if missing:
        return f"{missing[2]} {missing[1]}"
    gone_file = _MISSING_FILE.search(text)
    if gone_file:
        from urllib.parse import unquote

        return f"{gone_file[2]} {unquote(gone_file[3])} (its .deb: {gone_file[1]})"
    gone = _MISSING_PACKAGE.search(text)
    if gone is None or "=" not in text:
        return None
    return gone[1].rstrip("'")


# ----------------------------------------------------------------------------- lock --check


def check_lock(
    env: Any,
    lock: Any,
    only: Sequence[str] | None = None,
) -> tuple[list[str], list[str]]:
    """(stale, notes) of `lock --check` about apt pins (no network): a target whose base is
    pinned by digest must pin every package its plan installs; one recorded by tag (no engine
    when it was locked) gets a note."""
    stale: list[str] = []
    notes: list[str] = []
    for target in env.targets:
        entry = lock.targets.get(target)
        if entry is None or (only and target not in only):
            continue
        problem = coverage_problem(plan_apt_stages(env, target), entry.apt)
        if problem is None:
            continue
        fix = f"run `envbuilder lock --env {env.name}` (needs the Docker engine)"
        if entry.base_image and "@sha256:" in entry.base_image:
            stale.append(f"{env.name}/{target}: {problem}; {fix}")
        else:
            notes.append(f"{env.name}/{target}: {problem} (the base has no digest)")
    return stale, notes
