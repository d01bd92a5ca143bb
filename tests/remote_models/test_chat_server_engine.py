"""The thinker on a model server apart from the gateway (``engines.chat_server``
with ``plugins.cascade.chat_thinker``), against ``fake_llm_server.py`` run as
its own process: messages and tools out, clauses and checked calls back, the
conversation a stable prefix, and a server that is dropped, down, silent,
refusing or full each a clear error."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from chat_helpers import TOOLS, Chat, running_engine
from model_servers import FakeServer

from duplex import effects as fx
from duplex.tools import ToolChoice, ToolSet
from plugins.base import Context, HistoryItem
from plugins.cascade.payloads import Draft, UserTurn


async def until(check: Any, what: str, tries: int = 400) -> None:
    """Poll the server's log until ``check()`` holds (it learns of a dropped
    stream on its own loop): bounded, so a broken promise fails, not hangs."""
    for _ in range(tries):
        if check():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"the server never saw {what}")


async def test_turns_stream_as_clauses_over_a_stable_prefix(fake_server: FakeServer) -> None:
    async with running_engine(fake_server.url, api_key="sk-test") as (engine, router):
        chat = Chat(engine, router)
        await chat.open(Context("Be brief.", (HistoryItem("user", "I am Anna."),), None))
        await chat.send(Draft("Hello"))  # drafts are not asked of a shared server
        first = await chat.reply(UserTurn(1, "item_1", "Hello there", True))
        assert first.error is None and first.words == "You said: Hello there. That is all."
        second = await chat.reply(UserTurn(2, "item_2", "How are you?", True))
        assert second.words == "You said: How are you. That is all."
        log = fake_server.log()
        one, two = log["requests"]
        assert one["model"] == "fake-model"  # the server's first, asked of /v1/models
        assert one["authorization"] == "Bearer sk-test"
        assert one["stream_options"] == {"include_usage": True}
        assert [m["role"] for m in one["messages"]] == ["system", "user", "user"]
        assert one["messages"][0]["content"] == "Be brief."
        # the second request is the first's messages, byte for byte, then the rest
        shared = one["raw_messages"].rstrip("]")
        assert two["raw_messages"].startswith(shared)
        assert two["messages"][3] == {"role": "assistant",
                                      "content": "You said: Hello there. That is all."}
        assert two["messages"][4] == {"role": "user", "content": "How are you?"}
        # and the server's prefix cache held it: cached tokens recorded and counted
        first_usage, second_usage = (p.usage for p in engine.prefills)
        assert first_usage.cached_tokens < second_usage.cached_tokens
        compact = json.dumps(one["messages"], separators=(",", ":"))[:-1]  # as it counts
        assert second_usage.cached_tokens == len(compact) // 4
        assert engine.counts["cached_tokens"] == (first_usage.cached_tokens
                                                  + second_usage.cached_tokens)
        assert engine.counts["ok"] == 2


async def test_a_call_is_checked_and_its_output_answers_it(fake_server: FakeServer) -> None:
    async with running_engine(fake_server.url) as (engine, router):
        chat = Chat(engine, router)
        await chat.open(Context(None, (), TOOLS))
        asked = await chat.reply(UserTurn(1, "item_1", "What is the weather in Paris?", True))
        assert asked.error is None and asked.words == ""
        assert [(c.name, json.loads(c.arguments)) for c in asked.calls] == [
            ("get_weather", {"city": "Paris"})]
        # the session names the call itself; its output answers the server's call
        output = HistoryItem("tool", "sunny, 21 C", "function_call_output",
                             call_id="call_session_1")
        await chat.send(Context(None, (output,), None))
        answer = await chat.reply(fx.StartResponse(chat.fence.with_turn(2), "resp_2", None))
        assert answer.words == "The tool says sunny, 21 C."
        request = fake_server.log()["requests"][1]
        assert request["tools"] == [{"type": "function", "function": {
            "name": "get_weather", "description": "Get the current weather in a city.",
            "parameters": dict(TOOLS.tools[0].parameters)}}]
        assert request["tool_choice"] == "auto"
        made, tool = request["messages"][-2:]
        assert made["tool_calls"][0]["function"] == {"name": "get_weather",
                                                     "arguments": '{"city": "Paris"}'}
        assert tool == {"role": "tool", "tool_call_id": made["tool_calls"][0]["id"],
                        "content": "sunny, 21 C"}


async def test_a_call_written_as_text_is_a_call_not_words(fake_server: FakeServer) -> None:
    async with running_engine(fake_server.url) as (engine, router):
        chat = Chat(engine, router)
        await chat.open(Context(None, (), ToolSet(TOOLS.tools, ToolChoice("required"))))
        asked = await chat.reply(UserTurn(1, "item_1", "A text call, please.", True))
        assert asked.error is None and asked.words == ""
        assert [(c.name, json.loads(c.arguments)) for c in asked.calls] == [
            ("get_weather", {"city": "Oslo"})]
        assert fake_server.log()["requests"][0]["tool_choice"] == "required"


async def test_a_call_that_breaks_its_schema_is_an_error(fake_server: FakeServer) -> None:
    async with running_engine(fake_server.url) as (engine, router):
        chat = Chat(engine, router)
        await chat.open(Context(None, (), TOOLS))
        bad = await chat.reply(UserTurn(1, "item_1", "Make a bad call.", True))
        assert not bad.calls
        assert bad.error is not None and "get_weather" in bad.error, bad
        assert "required 'city'" in bad.error, bad.error
        assert not engine.has_request(chat.rid)


async def test_a_barge_in_drops_the_stream_and_the_server_sees_it(
        fake_server: FakeServer) -> None:
    fake_server.control(delay_s=0.05)
    async with running_engine(fake_server.url) as (engine, router):
        chat = Chat(engine, router)
        await chat.open(Context("Answer at length.", (), None))
        await chat.send(UserTurn(1, "item_1", "Tell me everything", True))
        first = await router.next(chat.rid)  # the reply is streaming
        assert first.error is None
        await engine.abort([chat.rid])
        assert engine.disconnects == 1
        await until(lambda: fake_server.log()["disconnects"] == 1, "the disconnect")
        assert fake_server.log()["completed"] == 0


async def test_a_server_that_is_down_fails_the_turn_and_the_next_works_once_back(
        fake_server: FakeServer) -> None:
    async with running_engine(fake_server.url, model="fake-model",
                              timeout_s=5.0) as (engine, router):
        fake_server.stop()
        chat = Chat(engine, router)
        await chat.open(Context(None, (), None))
        down = await chat.reply(UserTurn(1, "item_1", "Hello", True))
        assert down.error is not None and "unreachable" in down.error, down
        assert fake_server.url in down.error
        assert engine.counts["ServerDown"] == 1
        fake_server.start()  # back, on the same port: a new request (the next epoch) works
        again = Chat(engine, router)
        await again.open(Context(None, (), None))
        back = await again.reply(UserTurn(1, "item_1", "Hello", True))
        assert back.error is None and back.words == "You said: Hello. That is all."


async def test_a_silent_server_fails_the_turn_within_the_timeout(
        fake_server: FakeServer) -> None:
    fake_server.control(mode="hang")
    async with running_engine(fake_server.url, model="fake-model",
                              timeout_s=0.5) as (engine, router):
        chat = Chat(engine, router)
        await chat.open(Context(None, (), None))
        silent = await chat.reply(UserTurn(1, "item_1", "Hello", True))
        assert silent.error is not None and "said nothing for 0.5 s" in silent.error, silent
        assert engine.counts["ServerSilent"] == 1


async def test_a_refusal_is_an_error_with_the_servers_reason(fake_server: FakeServer) -> None:
    fake_server.control(mode="refuse")
    async with running_engine(fake_server.url, model="fake-model") as (engine, router):
        chat = Chat(engine, router)
        await chat.open(Context(None, (), None))
        refused = await chat.reply(UserTurn(1, "item_1", "Hello", True))
        assert refused.error is not None, refused
        assert "HTTP 503" in refused.error and "overloaded, try later" in refused.error


async def test_streams_are_bounded_and_past_the_queue_a_turn_fails_at_once(
        fake_server: FakeServer) -> None:
    fake_server.control(mode="hold")
    async with running_engine(fake_server.url, model="fake-model", max_streams=1,
                              max_waiting=1) as (engine, router):
        chats = [Chat(engine, router) for _ in range(3)]
        for i, chat in enumerate(chats[:2]):
            await chat.open(Context(None, (), None))
            await chat.send(UserTurn(1, "item_1", f"Hello {i}", True))
        await until(lambda: fake_server.log()["open"] == 1, "the first stream")
        for _ in range(200):  # the second waits for the first's slot
            if engine.gate.waiting == 1:
                break
            await asyncio.sleep(0.01)
        assert (engine.gate.open, engine.gate.waiting) == (1, 1)
        await chats[2].open(Context(None, (), None))
        busy = await chats[2].reply(UserTurn(1, "item_1", "Hello 2", True))
        assert busy.error is not None and "busy" in busy.error, busy
        assert "--llm-max-streams 1" in busy.error
        fake_server.release()
        replies = [await chat.reply() for chat in chats[:2]]
        assert [r.words for r in replies] == ["You said: Hello 0. That is all.",
                                              "You said: Hello 1. That is all."]
        assert fake_server.log()["most_open"] == 1


async def test_a_broken_stream_is_an_error_that_says_how(fake_server: FakeServer) -> None:
    async with running_engine(fake_server.url, model="fake-model") as (engine, router):
        for mode, why in (("garbage", "'<html>oops</html>', not JSON"),
                          ("error_event", "failed the completion: the GPU fell over"),
                          ("cut", "ended the stream before the reply finished")):
            fake_server.control(mode=mode)
            chat = Chat(engine, router)
            await chat.open(Context(None, (), None))
            broken = await chat.reply(UserTurn(1, "item_1", "Hello", True))
            assert broken.error is not None and why in broken.error, (mode, broken)
        assert engine.counts["ServerBroken"] == 2 and engine.counts["ServerRefused"] == 1


async def test_a_server_that_names_no_model_asks_for_one(fake_server: FakeServer) -> None:
    fake_server.control(mode="nameless")
    async with running_engine(fake_server.url) as (engine, router):
        chat = Chat(engine, router)
        await chat.open(Context(None, (), None))
        nameless = await chat.reply(UserTurn(1, "item_1", "Hello", True))
        assert nameless.error is not None and "set --llm-model" in nameless.error, nameless
