"""The one comparison of two greedy generations (``sparkpair_health.checks.compare``): a near-tie
passes, anything else fails naming the position, both tokens and their logprobs."""

from __future__ import annotations

from sparkpair_health.checks.compare import (
    TIE_GAP,
    Step,
    compare_answers,
    compare_greedy,
    steps_of_chunks,
    stream_text_before,
)


def step(tok: str, lp: float, *alts: tuple[str, float]) -> Step:
    return Step(tok, lp, ((tok, lp), *alts))


A = [step("The", -0.01), step(" sky", -0.02), step(" is", -0.1, (" was", -0.3)), step(" blue", -0.05)]


def test_identical_generations_agree_throughout() -> None:
    got = compare_greedy(A, list(A))
    assert got.ok and got.identical and got.position is None and got.compared == 4


def test_a_near_tie_passes_and_the_comparison_stops_there() -> None:
    b = [A[0], A[1], step(" was", -0.25, (" is", -0.35)), step(" green", -0.1)]
    got = compare_greedy(A, b)
    assert got.ok and got.near_tie and got.position == 2 and got.compared == 2
    assert got.evidence is not None and [round(g, 2) for g in got.evidence["gaps"]] == [0.2, 0.1]
    assert "part at token 2 on a near-tie" in got.note(("first", "second"))


def test_a_token_outside_the_other_sides_top_5_fails_naming_position_tokens_and_logprobs() -> None:
    b = [A[0], A[1], step(" purple", -9.0, (" is", -0.4))]
    got = compare_greedy(A, b, ("alone", "batched"))
    assert not got.ok
    assert "token 2 differs: alone ' is' (logprob -0.100; ' purple' there: none)" in got.problem
    assert "batched ' purple' (logprob -9.000; ' is' there: -0.400)" in got.problem
    assert "' purple' is not among alone's top 5 at token 2" in got.problem


def test_a_gap_above_the_bound_is_not_a_near_tie() -> None:
    a = [step("x", -0.01, ("y", -0.01 - TIE_GAP - 0.5))]
    b = [step("y", -0.2, ("x", -0.3))]
    got = compare_greedy(a, b)
    assert not got.ok and f"first's gap 1.500 nats is above the near-tie bound {TIE_GAP:g}" in got.problem


def test_one_side_ending_where_the_other_goes_on_fails() -> None:
    got = compare_greedy(A, A[:3])
    assert not got.ok and "second ends after 3 tokens where first goes on with ' blue'" in got.problem


def test_an_answer_without_logprobs_fails_saying_so() -> None:
    got = compare_answers({"choices": [{"message": {}}]}, {"choices": [{"logprobs": {"content": []}}]})
    assert not got.ok and "the first answer carries no logprobs.content" in got.problem


def chunk(delta: dict, toks: list[str] | None) -> dict:
    ch: dict = {"index": 0, "delta": delta}
    if toks is not None:
        ch["logprobs"] = {"content": [{"token": t, "logprob": -0.1, "top_logprobs": []} for t in toks]}
    return {"choices": [ch]}


def test_a_stream_is_read_token_by_token_and_its_text_before_a_position_is_known() -> None:
    chunks = [
        chunk({"role": "assistant", "content": ""}, None),
        chunk({"reasoning": "hm "}, ["hm "]),
        chunk({}, ["</think>"]),
        chunk({"content": "Yes"}, ["Yes"]),
        chunk({"content": ", sure"}, [",", " sure"]),
    ]
    steps = steps_of_chunks(chunks)
    assert steps is not None and [s.token for s in steps] == ["hm ", "</think>", "Yes", ",", " sure"]
    assert stream_text_before(chunks, 3) == {"content": "Yes", "reasoning": "hm ", "arguments": ""}
    assert stream_text_before(chunks, 4)["content"] == "Yes"  # a chunk straddling the position is left out
