"""Credentials out of every URL envbuilder prints: one function, applied at the edges.

    redact(text) -> str     `scheme://user:password@host` -> `scheme://***@host`, and the
                            values of query parameters that carry secrets (token=, sig=, ...)

A mirror or registry URL may carry a token (`https://user:TOKEN@host/simple`, a presigned
`?X-Amz-Signature=`): it reaches messages through uv's and urllib's errors, a registry's answers
and envbuilder's own. Rather than each message remembering, the UI (every stderr line and the
--json error object) passes all text through `redact`, as uv redacts its own.
"""

from __future__ import annotations

import re

#: The userinfo of a URL: everything between `scheme://` and the last `@` before the host ends.
_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)([^/\s?#@]*(?:@[^/\s?#@]*)*)@")
#: Query parameters whose values are credentials (S3/GCS/Azure presigned URLs included).
_SECRET_QUERY = re.compile(
    r"(?i)([?&](?:token|access_token|auth|api_?key|key|password|passwd|secret|sig|signature"
    r"|x-amz-signature|x-amz-credential|x-amz-security-token|x-goog-signature"
    r"|x-goog-credential)=)[^&#\s]*"
)


def redact(text: str) -> str:
    """`text` with the credentials of every URL in it replaced by `***`."""
    return _SECRET_QUERY.sub(r"\1***", _USERINFO.sub(_userinfo, text))


def _userinfo(match: re.Match[str]) -> str:
    """A password (`user:pass@`) or an http(s) user name (a token: `https://TOKEN@host`) is
    replaced; a plain user name of another scheme (`ssh://builder@host`) names no secret."""
    scheme, info = match.group(1), match.group(2)
    if ":" in info or scheme.lower().startswith("http"):
        return f"{scheme}***@"
    return match.group(0)
