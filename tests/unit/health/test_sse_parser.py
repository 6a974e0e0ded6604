"""The SSE parser sees every framing detail an SDK would hide (field-bugs.md B11)."""

from __future__ import annotations

import json

from sparkpair_health.sse import assemble_tool_calls, iter_sse_events, parse_openai_stream


def chunk(
    content: str | None = None,
    *,
    finish: str | None = None,
    usage: dict | None = None,
    reasoning: str | None = None,
    choices: bool = True,
) -> str:
    delta = {}
    if content is not None:
        delta["content"] = content
    if reasoning is not None:
        delta["reasoning_content"] = reasoning
    obj: dict = {
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}] if choices else [],
    }
    if usage is not None:
        obj["usage"] = usage
    return "data: " + json.dumps(obj)


def lines(*events: str) -> list[str]:
    out: list[str] = []
    for e in events:
        out += [e, ""]
    return out


USAGE = {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}


def test_events_follow_the_sse_framing_rules() -> None:
    raw = [": keep-alive comment", "event: message", "id: 7", "data: a", "data:b", "", "", "data: c\r", ""]
    evs = list(iter_sse_events(raw))
    assert [(e.data, e.event, e.id) for e in evs] == [
        ("a\nb", "message", "7"),
        ("c", "", "7"),
    ]  # the last event id persists (WHATWG)


def test_an_event_without_its_closing_blank_line_is_still_seen() -> None:
    assert [e.data for e in iter_sse_events(["data: [DONE]"])] == ["[DONE]"]


def test_a_well_formed_stream_with_usage_has_no_framing_problem() -> None:
    s = parse_openai_stream(
        lines(chunk("Hel"), chunk("lo", finish="stop"), chunk(usage=USAGE, choices=False), "data: [DONE]")
    )
    assert s.content == "Hello" and s.finish_reasons == ["stop"] and s.done_count == 1
    assert s.framing_problems(want_usage=True) == []
    assert any("carry usage" in p for p in s.framing_problems(want_usage=False))


def test_two_done_events_are_a_problem() -> None:
    s = parse_openai_stream(lines(chunk("x", finish="stop"), "data: [DONE]", "data: [DONE]"))
    assert s.done_count == 2
    assert "2 'data: [DONE]' events" in s.framing_problems(want_usage=False)[0]


def test_no_done_and_data_after_done_and_non_json_are_problems() -> None:
    assert "0 'data: [DONE]'" in parse_openai_stream(lines(chunk("x"))).framing_problems()[0]
    s = parse_openai_stream(lines(chunk("x"), "data: [DONE]", chunk("late"), "data: {not json"))
    probs = " ".join(s.framing_problems())
    assert "after [DONE]" in probs and "not JSON" in probs


def test_a_missing_usage_chunk_and_a_usage_chunk_with_choices_are_problems() -> None:
    s = parse_openai_stream(lines(chunk("x", finish="stop"), "data: [DONE]"))
    assert "0 chunks carry usage" in s.framing_problems(want_usage=True)[0]
    s = parse_openai_stream(lines(chunk("x", finish="stop", usage=USAGE), "data: [DONE]"))
    assert "non-empty choices" in s.framing_problems(want_usage=True)[0]


def test_chunks_mixing_reasoning_and_content_are_recorded() -> None:
    s = parse_openai_stream(lines(chunk(reasoning="think"), chunk("ans", reasoning="end"), "data: [DONE]"))
    assert s.reasoning == "thinkend" and s.content == "ans" and s.mixed_chunks == [1]


def test_an_error_chunk_is_a_problem() -> None:
    s = parse_openai_stream(
        lines('data: {"error": {"message": "EngineDeadError", "code": 500}}', "data: [DONE]")
    )
    assert "error chunk" in " ".join(s.framing_problems())


def test_streamed_tool_call_fragments_are_joined_by_index() -> None:
    deltas = [
        {"index": 0, "id": "t1", "function": {"name": "get_weather", "arguments": ""}},
        {"index": 1, "id": "t2", "function": {"name": "get_time", "arguments": '{"ci'}},
        {"index": 0, "function": {"arguments": '{"city": '}},
        {"index": 0, "function": {"arguments": '"Paris"}'}},
        {"index": 1, "function": {"arguments": 'ty": "Oslo"}'}},
    ]
    calls = assemble_tool_calls(deltas)
    assert [(c["name"], json.loads(c["arguments"])) for c in calls] == [
        ("get_weather", {"city": "Paris"}),
        ("get_time", {"city": "Oslo"}),
    ]
