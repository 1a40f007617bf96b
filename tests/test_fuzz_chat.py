"""Fuzzing what a model's reply can hold (issue #12 for chat): any text, tool-call tags and fragments of both
call forms mixed in, goes through the reply parser and the conversation without an exception; every call
it finds either runs or comes back to the model as an error."""
from __future__ import annotations

from hypothesis import given, strategies as st

from fuzzing import budgets, fuzz_settings
from qgpu_min.chat.session import Conversation, ScriptedChatModel
from qgpu_min.chat.toolcall import format_call, split_reply
from qgpu_min.chat.tools import Gpu

PIECES = ["<tool_call>", "</tool_call>", "<function=", "</function>", "<parameter=", "</parameter>", ">", "\n",
          "{", "}", "\"name\"", ":", "\"arguments\"", "\"gpu_calc\"", "\"run_cuda\"", "expression", "[1, 2]",
          "sum(", ")", " @ ", "\"", "\\", "null", "1e999", "-"]
REPLY = st.lists(st.one_of(st.sampled_from(PIECES), st.text(max_size=8)), max_size=30).map("".join)


@budgets(150, 3000)
def test_any_reply_parses_into_text_and_calls(budget):
    @fuzz_settings(budget)
    @given(REPLY)
    def check(reply):
        text, calls = split_reply(reply)
        assert isinstance(text, str) and "<tool_call>" not in text
        for call in calls:
            assert call.error is None or call.error            # a reason when it cannot be read
            assert isinstance(call.arguments, dict)
    check()


@budgets(40, 600)
def test_any_reply_in_a_conversation_is_answered_or_refused(budget):
    @fuzz_settings(budget)
    @given(st.lists(REPLY, min_size=1, max_size=3), st.sampled_from(["normal", "advanced"]))
    def check(replies, mode):
        model = ScriptedChatModel(replies + ["done"])
        answer = Conversation(model, mode, Gpu("interp"), max_rounds=3).ask("q")
        for result in answer.tools:
            assert result.ok or result.text.startswith("error: ")
    check()


def test_a_well_formed_call_inside_noise_still_runs():
    reply = "</tool_call> noise <function=x>" + format_call("gpu_calc", {"expression": "2 * 21"}) + " <tool_call"
    answer = Conversation(ScriptedChatModel([reply, "42"]), "normal", Gpu("interp")).ask("q")
    assert [t.value for t in answer.tools if t.ok] == [42]
