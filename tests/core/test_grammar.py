"""The safety grammar is one grammar: render's template filters accept exactly what the patterns
`envbuilder check` holds the same values to accept (issue 14: the patterns were written four
times, and render's were looser than check's)."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from envbuilder.builders.render import environment
from envbuilder.core import grammar, quoting

#: template filter -> the grammar pattern check uses for the same values
FILTERS = {
    "image_ref": grammar.IMAGE_RE,
    "unix_name": grammar.USER_RE,
    "distro_name": grammar.DISTRO_RE,
    "path": grammar.PATH_RE,
    "label_key": grammar.LABEL_KEY_RE,
}
#: values the old, separate render patterns let through and check refused
ONCE_LOOSER = {
    "image_ref": ["-x:1", "Debian:12", "a//b:1", "x@sha256:short"],
    "distro_name": ["-x", ".hidden", "_x"],
}
ALPHABET = st.sampled_from([*"aZ09._-/:@ $\"'\n", "sha256:" + "a" * 64, "é"])


def _accepts(name: str, value: str) -> bool:
    try:
        environment().filters[name](value)
    except quoting.QuotingError:
        return False
    return True


@pytest.mark.parametrize("name", sorted(ONCE_LOOSER))
def test_render_refuses_what_check_refuses(name: str) -> None:
    for value in ONCE_LOOSER[name]:
        assert FILTERS[name].fullmatch(value) is None
        assert not _accepts(name, value), value


@given(st.sampled_from(sorted(FILTERS)), st.lists(ALPHABET, max_size=6).map("".join))
def test_filters_accept_exactly_the_grammar(name: str, value: str) -> None:
    pattern: re.Pattern[str] = FILTERS[name]
    assert _accepts(name, value) == (pattern.fullmatch(value) is not None)


def test_check_is_at_least_as_strict_as_render() -> None:
    """Every value check's grammar accepts for a key renders (root is a valid Linux name, but
    check refuses it: the image's user has uid 1000)."""
    assert grammar.user_problem("root") is not None and _accepts("unix_name", "root")
    for image in (
        "debian:bookworm-slim",
        "127.0.0.1:5000/x/y:1",
        "debian:bookworm-slim@sha256:" + "a" * 64,
    ):
        assert grammar.image_problem(image) is None and _accepts("image_ref", image)
