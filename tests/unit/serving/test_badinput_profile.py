"""Bad input to the profile loader (``sparkpair_serving.profile.load_profile``): a ProfileError
naming the file and what is wrong with it, never the file's text, never a parser left running.
(The same errors through ``sparkpair health``: tests/unit/health/test_badinput_health.py.)"""

from __future__ import annotations

from pathlib import Path

import pytest
from sparkpair_serving.profile import ProfileError, load_profile


def test_profile_that_is_a_folder_says_folder(tmp_path: Path) -> None:
    d = tmp_path / "p.yaml"
    d.mkdir()
    for given in (d, tmp_path):
        with pytest.raises(ProfileError, match="is a folder"):
            load_profile(given)


def test_bare_profile_name_still_resolves_to_configs_profiles() -> None:
    assert load_profile("tiny-demo").name


def test_a_profile_with_yaml_aliases_is_refused_before_it_expands(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A few hundred bytes of nested aliases would expand to billions of nodes."""
    from sparkpair_serving.profile import ProfileError, load_profile

    bomb = tmp_path / "bomb.yaml"
    rows = ['a: &a ["x","x","x","x","x","x","x","x","x"]']
    rows += [f"{n}: &{n} [{','.join(['*' + p] * 9)}]" for p, n in zip("abcdefgh", "bcdefghi", strict=True)]
    bomb.write_text("\n".join(rows) + "\nname: *i\n")
    with pytest.raises(ProfileError, match=r"an alias \(\*a\); wanted plain YAML without anchors/aliases"):
        load_profile(str(bomb))


def test_a_profile_over_the_size_cap_is_refused_unread(tmp_path: Path) -> None:
    """A 50 MB profile kept the YAML parser busy for over a minute."""
    from sparkpair_serving.profile import PROFILE_LIMIT_BYTES

    big = tmp_path / "big.yaml"
    big.write_bytes(b"name: " + b"x" * PROFILE_LIMIT_BYTES + b"\n")
    with pytest.raises(ProfileError, match=f"larger than {PROFILE_LIMIT_BYTES} bytes"):
        load_profile(big)


@pytest.mark.parametrize(
    "content", [b"root:x:0:0:secret-gecos:/root:/bin/bash\n", b"token: [unclosed secret-value\n"]
)
def test_a_file_that_is_not_a_profile_is_not_quoted_in_the_error(tmp_path: Path, content: bytes) -> None:
    """A path such as /etc/passwd named by mistake: the error gives the type or the line, not the text."""
    f = tmp_path / "passwd"
    f.write_bytes(content)
    with pytest.raises(ProfileError) as e:
        load_profile(f)
    assert "secret" not in str(e.value) and str(f) in str(e.value), str(e.value)
