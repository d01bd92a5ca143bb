"""duplex/events.py: the beta dialect (``to_beta``) and the words of an item.

The expected beta names are written out here, not read from the module, so a
renamed entry in ``_BETA_NAMES`` fails a test instead of agreeing with itself
(research/peers.md §3.1 lists both dialects).
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from duplex import events as ev
from duplex.events import ServerEvent as E

BETA_RENAMES = {
    "response.output_audio.delta": "response.audio.delta",
    "response.output_audio.done": "response.audio.done",
    "response.output_audio_transcript.delta": "response.audio_transcript.delta",
    "response.output_audio_transcript.done": "response.audio_transcript.done",
    "response.output_text.delta": "response.text.delta",
    "response.output_text.done": "response.text.done",
    "conversation.item.added": "conversation.item.created",
}


@pytest.mark.parametrize("kind", list(E), ids=str)
def test_to_beta_renames_exactly_the_ga_only_names(kind: E) -> None:
    out = ev.to_beta(ev.event(kind, n=1))
    if kind is E.ITEM_DONE:
        assert out is None  # beta has no conversation.item.done
        return
    assert out == {"type": BETA_RENAMES.get(kind.value, kind.value), "n": 1}


def test_to_beta_renames_content_parts_of_an_item() -> None:
    item = {"id": "i1", "content": [{"type": "output_audio", "transcript": "hi"},
                                    {"type": "output_text", "text": "yo"},
                                    {"type": "input_audio", "transcript": None}]}
    out = ev.to_beta(ev.event(E.ITEM_ADDED, item=item))
    assert out is not None
    assert [p["type"] for p in out["item"]["content"]] == ["audio", "text", "input_audio"]
    assert out["item"]["content"][0]["transcript"] == "hi"
    assert out["item"]["id"] == "i1"


@pytest.mark.parametrize("item", [None, "i1", {"id": "i1"}, {"id": "i1", "type": "message"}],
                         ids=["none", "str", "bare", "no-content"])
def test_to_beta_leaves_items_without_content_as_they_are(item: Any) -> None:
    out = ev.to_beta(ev.event(E.ITEM_RETRIEVED, item=item))
    assert out is not None
    assert out["item"] == item


def test_to_beta_renames_the_items_of_a_finished_response() -> None:
    item = ev.assistant_item("i1", "completed", "hello", audio=True)
    response = ev.response_object("r1", "completed", modalities=("audio",), output=[item])
    out = ev.to_beta(ev.event(E.RESPONSE_DONE, response=response))
    assert out is not None
    assert out["response"]["output"][0]["content"] == [{"type": "audio", "transcript": "hello"}]
    assert out["response"]["id"] == "r1"


@pytest.mark.parametrize("response", [None, "r1", {"id": "r1", "output": []}, {"id": "r1"}],
                         ids=["none", "str", "empty-output", "no-output"])
def test_to_beta_leaves_responses_without_output_as_they_are(response: Any) -> None:
    out = ev.to_beta(ev.event(E.RESPONSE_CREATED, response=response))
    assert out is not None
    assert out["response"] == response


PARTS = st.fixed_dictionaries(
    {"type": st.sampled_from(["output_audio", "output_text", "input_audio", "input_text"])},
    optional={"text": st.text(max_size=5), "transcript": st.text(max_size=5)},
)
ITEMS = st.none() | st.fixed_dictionaries(
    {"id": st.text(max_size=4)}, optional={"content": st.lists(PARTS, max_size=3)})
GA_EVENTS = st.builds(
    lambda kind, item, output, extra: {
        **extra, "type": kind.value, "item": item,
        "response": {"id": "r", "output": [i for i in output if i is not None]},
    },
    st.sampled_from([k for k in E if k is not E.ITEM_DONE]),
    ITEMS, st.lists(ITEMS, max_size=2),
    st.dictionaries(st.sampled_from(["delta", "item_id", "audio_end_ms"]),
                    st.integers() | st.text(max_size=4), max_size=2),
)


@settings(max_examples=200, deadline=None, database=None)
@given(GA_EVENTS)
def test_to_beta_is_a_pure_rename(ga: dict[str, Any]) -> None:
    before = copy.deepcopy(ga)
    beta = ev.to_beta(ga)
    assert ga == before  # the journaled GA event is shared: never mutated
    assert beta is not None and beta.keys() == ga.keys()
    for key in ga.keys() - {"type", "item", "response"}:
        assert beta[key] == ga[key]
    # only the part types differ; every other field of every part survives
    items = [(ga["item"], beta["item"]), *zip(ga["response"]["output"],
                                               beta["response"]["output"], strict=True)]
    for ga_item, beta_item in items:
        for ga_part, beta_part in zip((ga_item or {}).get("content", []),
                                      (beta_item or {}).get("content", []), strict=True):
            assert beta_part["type"] == ga_part["type"].removeprefix("output_")
            assert {k: v for k, v in beta_part.items() if k != "type"} == \
                {k: v for k, v in ga_part.items() if k != "type"}


@pytest.mark.parametrize(
    ("content", "text"),
    [
        (None, ""),
        ([], ""),
        ([{"type": "input_text", "text": "hi"}, {"type": "input_audio", "transcript": "yo"}],
         "hi yo"),
        ([{"type": "input_audio", "transcript": None}], ""),  # not transcribed yet
        ([{"type": "output_text", "text": 5}], ""),  # client junk is not words
        (["hello", {"type": "input_text", "text": "there"}], "there"),  # a part not a mapping
        ([{"text": ""}, {"text": "a"}, {"transcript": ""}, {"text": "b"}], "a b"),
        ([{"text": "", "transcript": "heard"}], "heard"),  # empty text falls to transcript
    ],
)
def test_item_text(content: Any, text: str) -> None:
    assert ev.item_text({"content": content}) == text


def test_item_text_of_an_item_without_content_is_empty() -> None:
    assert ev.item_text({"id": "i1"}) == ""
