"""Credentials in URLs never reach the terminal or --json (issue 30, item 2, in part).

Before: a mirror URL with credentials (`https://user:TOKEN@host/...`) appeared in full in
`build`'s and `lock`'s error when a fetch failed. Every stderr line and the --json error object
now pass through envbuilder.core.redact.redact.
"""

from __future__ import annotations

import pytest

from envbuilder.core.redact import redact
from envbuilder.core.ui import UI

SECRET = "s3cr3t-T0KEN"


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        (f"https://user:{SECRET}@mirror.example/simple", "https://***@mirror.example/simple"),
        (
            f"cannot fetch http://{SECRET}@h:8080/a.whl: 404",
            "cannot fetch http://***@h:8080/a.whl: 404",
        ),
        (f"https://u:p@ss:{SECRET}@h/x", "https://***@h/x"),
        (
            f"https://h/x.whl?X-Amz-Signature={SECRET}&a=1",
            "https://h/x.whl?X-Amz-Signature=***&a=1",
        ),
        (f"https://h/simple?token={SECRET}", "https://h/simple?token=***"),
        (
            "https://h/simple/torch/ and user@example.org",
            "https://h/simple/torch/ and user@example.org",
        ),
    ],
)
def test_redact(text: str, shown: str) -> None:
    assert redact(text) == shown
    assert SECRET not in redact(text)


def test_every_stderr_line_and_the_json_error_are_redacted(
    capsys: pytest.CaptureFixture[str],
) -> None:
    ui = UI()
    ui.error(f"cannot fetch https://user:{SECRET}@mirror.example/a.whl")
    ui.warn(f"https://mirror.example/a.whl?token={SECRET}")
    err = capsys.readouterr().err
    assert SECRET not in err and "https://***@mirror.example/a.whl" in err, err
    assert redact("ssh://builder@host") == "ssh://builder@host"  # a user name, no secret
