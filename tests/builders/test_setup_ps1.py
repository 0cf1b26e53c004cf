"""windows/<env>/setup.ps1 as PowerShell reads it: Get-Help must find the script's help block,
and relative -Path/-Lock must be made absolute before .NET's [IO.File] methods see them.

PowerShell is not installable here (Debian has no `powershell` package), so the help check is a
transcription of the rules PowerShell applies (PowerShell/PowerShell,
src/System.Management.Automation/help/HelpCommentsParser.cs): `GetCommentBlock` groups comments
that start on the line after the previous one ends; a group is help only when every line is a
help keyword (`.SYNOPSIS`, `.PARAMETER NAME`, ...), a line of a keyword's section, or blank
before the first keyword (`AnalyzeCommentBlock`); a section ends at any line that looks like a
keyword (`GetSection`). For a script, the first group that is help, before the first code token,
is the script's help ("Script help can be preceded in the script only by comments and blank
lines", learn.microsoft.com about_Comment_Based_Help).
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
from test_render import make_project  # tests/ is on sys.path (rootless tests)

from envbuilder.builders.render import render_env
from envbuilder.core.model import EnvSpec, Spec
from envbuilder.core.project import Project

DIRECTIVE = re.compile(r"^\s*\.(\w+)(\s+(\S.*))?\s*$")
BLANK = re.compile(r"^\s*$")
SECTION_KEYWORDS = {
    "SYNOPSIS",
    "DESCRIPTION",
    "NOTES",
    "LINK",
    "EXAMPLE",
    "INPUTS",
    "OUTPUTS",
    "COMPONENT",
    "ROLE",
    "FUNCTIONALITY",
}
ARGUMENT_KEYWORDS = {
    "PARAMETER",
    "FORWARDHELPTARGETNAME",
    "FORWARDHELPCATEGORY",
    "REMOTEHELPRUNSPACE",
    "EXTERNALHELP",
}


@dataclasses.dataclass
class Comment:
    first_line: int
    last_line: int
    lines: list[str]  # the text as CollectCommentText gives it


def leading_comments(text: str) -> list[Comment]:
    """The comment tokens before the script's first code token (line and block comments)."""
    lines = text.splitlines()
    out: list[Comment] = []
    i = 0
    while i < len(lines):
        stripped = lines[i].strip()
        if not stripped:
            i += 1
        elif stripped.startswith("<#"):
            end = next(j for j in range(i, len(lines)) if "#>" in lines[j])
            body = "\n".join(lines[i : end + 1]).strip()[2:-2]
            out.append(Comment(i, end, body.split("\n")))
            i = end + 1
        elif stripped.startswith("#"):
            out.append(Comment(i, i, [stripped.lstrip("#")]))
            i += 1
        else:
            break
    return out


def comment_blocks(comments: list[Comment]) -> list[list[Comment]]:
    """GetCommentBlock: a comment starting on the line after the previous one ends joins it."""
    blocks: list[list[Comment]] = []
    for comment in comments:
        if blocks and comment.first_line <= blocks[-1][-1].last_line + 1:
            blocks[-1].append(comment)
        else:
            blocks.append([comment])
    return blocks


def _section(lines: list[str], i: int) -> tuple[str, int]:
    """GetSection: the lines after keyword line `i` up to the next keyword-like line."""
    taken: list[str] = []
    i += 1
    while i < len(lines):
        if not taken and BLANK.match(lines[i]):
            i += 1
            continue
        if DIRECTIVE.match(lines[i]):
            break
        taken.append(lines[i].strip())
        i += 1
    return "\n".join(taken).strip(), i - 1


def help_sections(block: list[Comment]) -> dict[str, str] | None:
    """AnalyzeCommentBlock: the block's help sections, or None when it is not help."""
    lines = [line for comment in block for line in comment.lines]
    sections: dict[str, str] = {}
    i = 0
    while i < len(lines):
        match = DIRECTIVE.match(lines[i])
        if match:
            keyword = match.group(1).upper()
            if match.group(3) is not None:
                if keyword not in ARGUMENT_KEYWORDS:
                    return None
                keyword = f"{keyword} {match.group(3).strip().upper()}"
            elif keyword not in SECTION_KEYWORDS:
                return None
            sections[keyword], i = _section(lines, i)
        elif not BLANK.match(lines[i]):
            return None
        i += 1
    return sections or None


def script_help(text: str) -> dict[str, str] | None:
    """What Get-Help shows for the script: the first leading comment block that is help."""
    for block in comment_blocks(leading_comments(text)):
        sections = help_sections(block)
        if sections is not None:
            return sections
    return None


# --- fixtures --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> tuple[Project, Spec]:
    return make_project(tmp_path_factory.mktemp("ps1"), locked=True)


def setup_ps1(project: Project, spec: Spec, env: EnvSpec) -> str:
    files = render_env(project, spec, env, "windows")
    return files[project.root / "windows" / env.name / "setup.ps1"].decode("utf-8-sig")


def windows_envs(spec: Spec) -> list[EnvSpec]:
    envs = [e for e in spec.select(None) if "windows" in e.targets]
    assert envs, "the shipped spec has no windows env"
    return envs


# --- the help block --------------------------------------------------------------------------


def test_the_transcribed_rules_reject_a_header_glued_to_the_help() -> None:
    """The layout rendered before the fix: generated-header comments on the lines right above
    `<#`. PowerShell sees one block starting with non-keyword text: no help at all."""
    glued = (
        "# setup.ps1: generated by envbuilder; do not edit.\r\n<#\r\n.SYNOPSIS\r\n"
        "Makes a venv.\r\n#>\r\nparam([string] $Path)\r\n"
    )
    assert script_help(glued) is None
    apart = glued.replace("\r\n<#", "\r\n\r\n<#")
    assert script_help(apart) == {"SYNOPSIS": "Makes a venv."}


def test_get_help_finds_synopsis_description_and_both_parameters(
    project: tuple[Project, Spec],
) -> None:
    proj, spec = project
    for env in windows_envs(spec):
        text = setup_ps1(proj, spec, env)
        sections = script_help(text)
        assert sections is not None, f"{env.name}: PowerShell would find no help block"
        assert set(sections) == {
            "SYNOPSIS",
            "DESCRIPTION",
            "PARAMETER PATH",
            "PARAMETER LOCK",
            "EXAMPLE",
        }, env.name
        assert env.name in sections["SYNOPSIS"]
        assert env.description in sections["DESCRIPTION"]
        assert "relative path" in sections["PARAMETER PATH"]
        # the generated header stays a separate, earlier block (and is not help)
        blocks = comment_blocks(leading_comments(text))
        assert "generated by envbuilder" in blocks[0][0].lines[0]
        assert help_sections(blocks[0]) is None


@pytest.mark.parametrize(
    "description", [".NET-ready ROCm env", ".SYNOPSIS", ".PARAMETER X", "ends the block #> <# here"]
)
def test_a_description_cannot_break_the_help(
    project: tuple[Project, Spec], description: str
) -> None:
    """A description line that looks like a help keyword would end the section (or make the
    whole block not help); the env's name leads the line, so it never does."""
    proj, spec = project
    env = dataclasses.replace(windows_envs(spec)[0], description=description)
    sections = script_help(setup_ps1(proj, spec, env))
    assert sections is not None
    assert set(sections) >= {"SYNOPSIS", "DESCRIPTION", "PARAMETER PATH", "PARAMETER LOCK"}


# --- relative paths --------------------------------------------------------------------------


def test_path_and_lock_are_resolved_before_any_use(project: tuple[Project, Spec]) -> None:
    """[IO.File] resolves a relative path against the process's current directory, which
    PowerShell's Set-Location does not change: -Path and -Lock are made absolute (against the
    PowerShell location) right after the parameters, before the first line that uses them."""
    proj, spec = project
    for env in windows_envs(spec):
        code = [
            line.strip()
            for line in setup_ps1(proj, spec, env).splitlines()
            if line.strip() and not line.strip().startswith("#")
        ]
        end_of_params = code.index(")")
        resolve_path = code.index("$Path = $PSCmdlet.GetUnresolvedProviderPathFromPSPath($Path)")
        resolve_lock = code.index("$Lock = $PSCmdlet.GetUnresolvedProviderPathFromPSPath($Lock)")
        uses = [
            n
            for n, line in enumerate(code)
            if n > end_of_params
            and re.search(r"\$(Path|Lock)\b", line)
            and "GetUnresolvedProviderPath" not in line
        ]
        assert uses and end_of_params < max(resolve_path, resolve_lock) < min(uses), env.name
        # the script is an advanced script, so $PSCmdlet exists
        assert "[CmdletBinding()]" in code[:end_of_params]


def test_committed_setup_scripts_have_their_help() -> None:
    root = Path(__file__).resolve().parents[2] / "windows"
    scripts = sorted(root.glob("*/setup.ps1"))
    assert scripts
    for script in scripts:
        assert script_help(script.read_bytes().decode("utf-8-sig")) is not None, script
