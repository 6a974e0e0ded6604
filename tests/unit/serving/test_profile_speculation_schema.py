"""The DSpark default profile says why for each server value, and the profile schema refuses a
speculation block that contradicts the serve arguments or would render something else (the
rendered serve command: tests/unit/health/test_profile_speculation.py)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from sparkpair_serving.profile import ProfileError, load_profile

REPO = Path(__file__).resolve().parents[3]


def test_every_server_value_of_the_default_profile_has_a_reason_comment_close_above_it() -> None:
    lines = [x.strip() for x in (REPO / "configs/profiles/deepseek-v4-flash.yaml").read_text().splitlines()]
    server = [x for x in lines[lines.index("server:") + 1 : lines.index("checks:")] if x]
    for i, s in enumerate(server):
        if s.startswith("- --") or s.split(":")[0] in ("model", "max_model_len", "speculation"):
            assert any(x.startswith("#") for x in server[max(0, i - 4) : i]), f"no reason comment above {s!r}"


@pytest.mark.parametrize(
    ("change", "fragment"),
    [
        (
            lambda d: d["server"]["args"].__setitem__(d["server"]["args"].index("36"), "12"),
            "--max-cudagraph-capture-size is 12; wanted max_num_seqs x (k + 1) = 6 x (5 + 1) = 36",
        ),
        (
            lambda d: d["server"]["args"].extend(["--speculative-config", "{}"]),
            "wanted only server.speculation",
        ),
        (
            lambda d: d["server"]["speculation"].__setitem__("draft_sample_method", "random"),
            "server.speculation.draft_sample_method",
        ),
        (
            lambda d: d["server"]["speculation"].__setitem__("num_speculative_tokens", 0),
            "server.speculation.num_speculative_tokens",
        ),
    ],
    ids=["capture-size", "two-spec-configs", "sample-method", "k-zero"],
)
def test_a_profile_contradicting_its_speculation_is_refused_naming_the_value(
    tmp_path: Path,
    change,
    fragment: str,  # type: ignore[no-untyped-def]
) -> None:
    d = yaml.safe_load((REPO / "configs/profiles/deepseek-v4-flash.yaml").read_text())
    change(d)
    f = tmp_path / "p.yaml"
    f.write_text(yaml.safe_dump(d))
    with pytest.raises(ProfileError) as e:
        load_profile(f)
    assert fragment in str(e.value) and str(f) in str(e.value)


@pytest.mark.parametrize(
    ("spec", "fragment"),
    [
        (
            {"method": "ngram", "num_speculative_tokens": 5, "extra": {"num_speculative_tokens": 40}},
            "speculation.extra sets ['num_speculative_tokens']",
        ),
        ({"method": " dspark\n", "num_speculative_tokens": 5}, "should match pattern"),
        ({"method": "dspark", "num_speculative_tokens": True}, "valid integer"),
    ],
    ids=["extra-overrides-k", "method-with-spaces", "k-is-a-bool"],
)
def test_a_speculation_block_that_would_render_something_else_is_refused(spec: dict, fragment: str) -> None:
    from sparkpair_serving.profile import SpeculationSpec

    with pytest.raises(ValueError, match=re.escape(fragment)):
        SpeculationSpec.model_validate(spec)
