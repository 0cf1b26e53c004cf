"""The safety grammar: the one home of every pattern a value must match before it may reach a
generated file, a file name or a command line, and the words that say what would be right.

`envbuilder check` (through `envbuilder.spec.load` and the target descriptors) reports each
`*_problem` as a finding on the key the value came from; `envbuilder render`'s template filters
(`envbuilder.builders.render.environment`) refuse any value that does not match the same patterns,
so a value check accepts always renders, and check is at least as strict as render (it also refuses,
e.g., the user root and an env name whose lock file names pip would refuse).

Pure functions of strings: nothing here reads the spec, a file or the compatibility data.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from urllib.parse import urlsplit

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from envbuilder.core import quoting

#: An env name becomes part of image names and tags: Docker's path-component grammar (what else
#: it becomes, lock file and folder names, is checked by `env_name_problems`).
ENV_NAME_RE = re.compile(r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*")
ENV_NAME_MAX = 63
#: A target's name becomes part of lock, report and folder names (pylock.<env>-<target>.toml).
TARGET_NAME_RE = re.compile(r"[a-z][a-z0-9]*")
#: The files `envbuilder lock` writes: `<env>.lock.toml` and `pylock.<env>-<target>.toml`.
LOCK_FILE_RE = re.compile(
    rf"(?:{ENV_NAME_RE.pattern})\.lock\.toml"
    rf"|pylock\.(?:{ENV_NAME_RE.pattern})-(?:{TARGET_NAME_RE.pattern})\.toml"
)
INDEX_NAME_RE = re.compile(r"[a-z0-9](?:[a-z0-9._-]*[a-z0-9])?")
#: PEP 508 distribution names.
PACKAGE_NAME_RE = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?")
#: Debian policy 5.6.1: package names are lower case, at least two characters.
APT_NAME_RE = re.compile(r"[a-z0-9][a-z0-9+.-]+")
#: useradd's portable user names (check also refuses root: the image's user is uid 1000).
USER_RE = re.compile(r"[a-z_][a-z0-9_-]{0,31}")
#: envbuilder's rule for WSL distro names (letters, digits, '.', '_', '-'; starts alnum).
DISTRO_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
#: An interpreter name or absolute path inside the base image.
INTERPRETER_RE = re.compile(r"(?:/[A-Za-z0-9_.+-]+)+|[A-Za-z0-9_.+-]+")
#: Docker image references (distribution/reference grammar), tag and/or digest.
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?"
_DOMAIN = rf"(?:{_LABEL}(?:\.{_LABEL})*(?::[0-9]+)?/)?"
IMAGE_RE = re.compile(
    rf"(?P<name>{_DOMAIN}{_COMPONENT}(?:/{_COMPONENT})*)"
    r"(?::(?P<tag>[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}))?"
    r"(?:@(?P<digest>sha256:[a-f0-9]{64}))?"
)
#: A path inside an image (absolute, or relative to the build context): no space, no quote.
PATH_RE = re.compile(r"/[A-Za-z0-9._/-]*|[A-Za-z0-9._-][A-Za-z0-9._/-]*")
#: An OCI label key (reverse-DNS, lower case).
LABEL_KEY_RE = re.compile(r"[a-z0-9][a-z0-9.-]*")
PYTHON_RE = re.compile(r"3\.[0-9]{1,2}")
ROCM_RE = re.compile(r"[0-9]+\.[0-9]+(?:\.[0-9]+){0,2}")  # 6.4, 6.4.1, 6.4.2.1
CUDA_RE = re.compile(r"[0-9]+\.[0-9]+")
UBUNTU_RE = re.compile(r"[0-9]{2}\.[0-9]{2}")
WINDOWS_PATH_RE = re.compile(r"[A-Za-z]:\\.*")
#: Characters that end or escape a quoted word in sh, a Dockerfile or PowerShell.
SHELL_META = frozenset("'\"`$;\\")
#: PEP 751, "File Name": a lock file is `pylock.toml` or matches this (no dot inside the name);
#: pip and uv take a file for a pylock by this rule (packaging.pylock.is_valid_pylock_path).
PYLOCK_FILE_RE = re.compile(r"pylock\.([^.]+)\.toml")
#: Device names Windows reserves in every folder (with any extension): a folder or file with one
#: of these names cannot be created there, so a checkout with dockerfiles/<env> fails.
WINDOWS_RESERVED = frozenset(
    {"con", "prn", "aux", "nul", *(f"com{i}" for i in range(10)), *(f"lpt{i}" for i in range(10))}
)


def unsafe_char(value: str, allowed: str = "") -> str | None:
    """The first character of `value` that cannot be carried safely, described; None if none."""
    for ch in value:
        if ch in ("\n", "\r"):
            return "a newline"
        if ch == "\x00":
            return "a NUL byte"
        if not ch.isprintable() and ch != " ":
            return f"a control character (U+{ord(ch):04X})"
        if ch in SHELL_META and ch not in allowed:
            return f"{ch!r}"
    if "$(" in value:
        return "'$('"
    return None


# --- names -----------------------------------------------------------------------------------


def env_name_problem(name: str) -> str | None:
    """Why `name` cannot be an env name (a Docker image name/tag and WSL distro name part)."""
    if ENV_NAME_RE.fullmatch(name) and len(name) <= ENV_NAME_MAX:
        return None
    return (
        "environment name cannot be a Docker image name/tag or WSL distro name; use "
        "lower-case letters, digits and single '.', '_' or '-' between them (at most 63 "
        "characters), e.g. 'rocm64'"
    )


def env_name_problems(env: str, pylock_names: Sequence[str]) -> list[str]:
    """Why names derived from an env's name (already a Docker path component) are invalid: its
    PEP 751 lock files `pylock_names` (no dot) and its folders on Windows (no device name)."""
    out = []
    bad = [n for n in pylock_names if not PYLOCK_FILE_RE.fullmatch(n)]
    if bad:
        out.append(
            f"env name has a dot: its lock files ({bad[0]}, ...) would not be PEP 751 "
            "names (pylock.<name>.toml, no dot in <name>), which pip and uv refuse; use "
            f"{env.replace('.', '-')!r}"
        )
    if env in WINDOWS_RESERVED:
        out.append(
            f"{env!r} is a device name Windows reserves: the env's folders "
            f"(dockerfiles/{env}, windows/{env}) cannot exist in a Windows checkout; use "
            f"e.g. '{env}-env'"
        )
    return out


def index_name_problem(name: str) -> str | None:
    if INDEX_NAME_RE.fullmatch(name):
        return None
    return "index name must be lower-case letters, digits, '.', '_' or '-', e.g. 'pytorch-rocm64'"


def package_name_problem(name: str) -> str | None:
    if PACKAGE_NAME_RE.fullmatch(name):
        return None
    return "is not a package name; use the distribution name, e.g. torch"


def apt_problem(name: str) -> str | None:
    if APT_NAME_RE.fullmatch(name):
        return None
    return (
        f"{name!r} is not a Debian package name (lower-case letters, digits, '+', '-', '.'; "
        'at least two characters, e.g. "libnuma1")'
    )


def user_problem(user: str) -> str | None:
    if not USER_RE.fullmatch(user):
        return (
            f"{user!r} is not a valid user name; use lower-case letters, digits, '_' and "
            "'-', starting with a letter (e.g. \"envbuilder\")"
        )
    if user == "root":
        return 'must not be root: the image\'s user has uid 1000; use e.g. "envbuilder"'
    return None


def distro_problem(env: str, distro: str, derived: bool = False) -> str | None:
    """`derived`: the name is the default one, envbuilder-<env name>, not written in the spec."""
    if DISTRO_RE.fullmatch(distro):
        return None
    if derived:
        return (
            f"the default distro name {distro!r} (from the env name) is longer than 64 "
            f'characters, WSL\'s limit; set [env.{env}.wsl2] distro = "..." or use a '
            "shorter env name"
        )
    return (
        f"{distro!r} cannot be a WSL distro name; use letters, digits, '.', '_' or '-', "
        "starting with a letter or digit, at most 64 characters (e.g. "
        '"envbuilder-rocm64")'
    )


def interpreter_problem(python: str) -> str | None:
    if INTERPRETER_RE.fullmatch(python):
        return None
    return (
        f'{python!r} is not an interpreter name or absolute path; write e.g. "python3" or '
        '"/usr/bin/python3.12"'
    )


def image_problem(image: str) -> str | None:
    """Why `image` is not an image reference (an error)."""
    if IMAGE_RE.fullmatch(image):
        return None
    return (
        f"{image!r} is not a Docker image reference; write NAME:TAG, e.g. "
        '"debian:bookworm-slim" or "rocm/dev-ubuntu-24.04:6.4.1"'
    )


def image_untagged(image: str) -> str | None:
    """A warning for a valid reference with neither tag nor digest (it would mean :latest)."""
    m = IMAGE_RE.fullmatch(image)
    if m is None or m.group("tag") is not None or m.group("digest") is not None:
        return None
    return (
        f"{image!r} has no tag (it would mean :latest, which moves); write NAME:TAG, e.g. "
        '"debian:bookworm-slim"'
    )


# --- text, URLs, paths ----------------------------------------------------------------------


def text_problem(value: str) -> str | None:
    """Free text that lands in labels and comments: one printable line."""
    bad = unsafe_char(value, allowed="'\";\\$`")
    return f"contains {bad}; write a single printable line" if bad else None


def url_problem(url: str) -> str | None:
    """An http(s) URL with nothing a shell line could trip over."""
    bad = unsafe_char(url)
    parts = urlsplit(url) if bad is None else None
    if (
        bad
        or parts is None
        or parts.scheme not in ("http", "https")
        or not parts.netloc
        or " " in url
    ):
        what = f"contains {bad}" if bad else "is not an http(s) URL"
        return f'{what}; write e.g. "https://download.pytorch.org/whl/rocm6.4"'
    return None


def mirror_problem(mirror: str) -> str | None:
    """A mirror is an absolute folder or an http(s) URL."""
    if mirror.startswith(("http://", "https://")):
        return url_problem(mirror)
    bad = unsafe_char(mirror)
    if bad or not mirror.startswith("/"):
        what = f"contains {bad}" if bad else "is neither an absolute folder nor an http(s) URL"
        return f'{what}; write e.g. "/opt/wheels" or "https://mirror.example/simple"'
    return None


def windows_path_problem(value: str) -> str | None:
    bad = unsafe_char(value, allowed="\\")
    if bad or not WINDOWS_PATH_RE.fullmatch(value):
        what = f"contains {bad}" if bad else "is not an absolute Windows path"
        return f'{what}; write e.g. "C:\\Program Files\\AMD\\ROCm\\6.4\\"'
    return None


# --- requirements and variables -------------------------------------------------------------


def requirement_problem(spec: str) -> str | None:
    """PEP 508 strings; quotes and ';' only inside an environment marker."""
    bad = unsafe_char(spec, allowed="'\";")
    if bad:
        return f'contains {bad}; a requirement is one line of PEP 508 (e.g. "torch==2.9.1")'
    try:
        req = Requirement(spec)
    except InvalidRequirement as exc:
        first = str(exc).splitlines()[0]
        return f'not a valid PEP 508 requirement ({first}); write e.g. "torch==2.9.1"'
    head = spec if req.marker is None else _before_marker(spec)
    if any(ch in head for ch in "'\";"):
        return (
            "quotes or ';' outside an environment marker; write "
            "\"name==1.0; python_version < '3.13'\""
        )
    if req.url is not None and req.url.startswith("file:"):
        # `envbuilder lock` refuses it: a lock names public URLs, never this machine's files
        return (
            "a direct reference to a local file cannot be locked (a lock records public "
            "URLs); put the file in a folder, make that folder an index's mirror and pin "
            "the package to that index"
        )
    if req.url is not None and not req.url.startswith(("https://", "http://")):
        return 'a direct reference must be an http(s) URL; write "name @ https://..."'
    return None


def _before_marker(spec: str) -> str:
    # A URL requirement separates its marker with " ;"; a plain one with ";".
    idx = spec.find(" ;") if "@" in spec.split(";", 1)[0] else spec.find(";")
    return spec if idx < 0 else spec[:idx]


def requirements(packages: Sequence[str]) -> tuple[tuple[str, ...], list[str]]:
    """The good requirements of `packages` (one per package, in order) and a message for each
    refused one."""
    seen: dict[str, str] = {}
    problems: list[str] = []
    for spec in packages:
        problem = requirement_problem(spec)
        if problem:
            problems.append(f"{spec!r}: {problem}")
            continue
        name = str(canonicalize_name(Requirement(spec).name))
        if name in seen:
            problems.append(
                f"{spec!r}: {name} is already required by {seen[name]!r}; write one "
                "requirement per package"
            )
            continue
        seen[name] = spec
    return tuple(seen.values()), problems


def env_var_problem(name: str, value: str) -> str | None:
    """Names are what `quoting.env_name` takes; values are one printable line (renderers quote;
    what each target's quoting refuses beyond that: the target descriptors' variable quoting)."""
    if quoting.env_name_refusal(name):
        return (
            "is not a valid environment variable name; use letters, digits and '_', not "
            "starting with a digit (e.g. NCCL_DEBUG)"
        )
    if any(ch in ("\n", "\r", "\x00") or (not ch.isprintable() and ch != " ") for ch in value):
        return (
            "value contains a newline, NUL or control character; an environment value must "
            "be one printable line"
        )
    return None
