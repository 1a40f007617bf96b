"""Chat (issue #9): tool calls in both of Qwen's forms, the chat template, the conversation loop with
scripted replies and real launches (advanced mode's retries, errors back to the model, the rounds limit),
the conversation's state untouched by a launch, and `qgpu-min chat` with --script."""
from __future__ import annotations

import json
import sys

import numpy as np
import pytest
from click.testing import CliRunner

from qgpu_min.chat.session import Conversation, RuntimeChatModel, ScriptedChatModel
from qgpu_min.chat.template import TemplateError, render, template_text
from qgpu_min.chat.toolcall import format_call, split_reply
from qgpu_min.chat.tools import CUDA, Gpu, tool_specs
from qgpu_min.cli import main

INTERP = Gpu("interp")
SAXPY = """__global__ void saxpy(int a, const int* x, int* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}"""


# ---- tool calls ----------------------------------------------------------------------------------------------
def test_both_call_forms_are_read_in_order_with_the_text_around_them():
    reply = ("Let me compute both.\n" + format_call("gpu_calc", {"expression": "[1, 2] @ [3, 4]"}) +
             '\n<tool_call>\n{"name": "gpu_calc", "arguments": {"expression": "sum([1, 2])"}}\n</tool_call>')
    text, calls = split_reply(reply)
    assert text == "Let me compute both."
    assert [(c.name, c.arguments, c.error) for c in calls] == [
        ("gpu_calc", {"expression": "[1, 2] @ [3, 4]"}, None), ("gpu_calc", {"expression": "sum([1, 2])"}, None)]


def test_xml_parameters_decode_json_values_and_keep_text():
    _, [call] = split_reply(format_call("run_cuda", {"source": "int x;\n", "args": ["[1,2]", "3"], "grid": "2"}))
    assert call.arguments == {"source": "int x;\n", "args": ["[1,2]", "3"], "grid": "2"}


@pytest.mark.parametrize("body, why", [
    ('{"name": "f", "arguments": {"a": 1}', "not closed"),
    ('<tool_call>{"name": "f", "arguments": }</tool_call>', "not valid JSON"),
    ('<tool_call>{"nom": "f"}</tool_call>', "string \"name\""),
    ('<tool_call>{"name": "f", "arguments": [1]}</tool_call>', "must be a JSON object"),
    ('<tool_call>{"name": "f", "arguments": "nope"}</tool_call>', "not a JSON object"),
    ("<tool_call><function=f><parameter=a>1</parameter></tool_call>", "not closed with </function>"),
    ("<tool_call><function=f>stray<parameter=a>1</parameter></function></tool_call>", "outside <parameter"),
    ("<tool_call>call f(1)</tool_call>", "must be a JSON object"),
])
def test_malformed_calls_become_errors_not_exceptions(body, why):
    _, [call] = split_reply(body if body.startswith("<tool_call>") else "<tool_call>" + body)
    assert call.error and why in call.error


def test_a_json_string_of_arguments_is_accepted():
    _, [call] = split_reply('<tool_call>{"name": "f", "arguments": "{\\"a\\": 2}"}</tool_call>')
    assert call.arguments == {"a": 2} and call.error is None


# ---- the template --------------------------------------------------------------------------------------------
def test_default_template_lists_tools_and_groups_tool_responses():
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Q"},
                {"role": "assistant", "content": "calling"}, {"role": "tool", "content": "1"},
                {"role": "tool", "content": "2"}]
    text = render(template_text(None), messages, tool_specs("normal"))
    assert text.startswith("<|im_start|>system\nBe brief.\n\n# Tools")
    assert '"name": "gpu_calc"' in text and "a @ b" in text
    assert "<|im_start|>user\n<tool_response>\n1\n</tool_response>\n<tool_response>\n2\n</tool_response><|im_end|>" \
        in text
    assert text.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert render(template_text(None), messages[1:2], enable_thinking=True).endswith("<|im_start|>assistant\n<think>\n")


def test_a_checkpoint_template_wins_and_its_errors_are_clear(tmp_path):
    (tmp_path / "chat_template.jinja").write_text("{% for m in messages %}[{{ m.role }}:{{ m.content }}]{% endfor %}"
                                                  "{% if tools %}T{{ tools | length }}{% endif %}")
    assert render(template_text(tmp_path), [{"role": "user", "content": "hi"}], tool_specs("advanced")) == "[user:hi]T1"
    (tmp_path / "chat_template.jinja").write_text("{{ raise_exception('only user turns') }}")
    with pytest.raises(TemplateError, match="refused the conversation: only user turns"):
        render(template_text(tmp_path), [])
    (tmp_path / "chat_template.jinja").write_text("{% for m in messages %}")
    with pytest.raises(TemplateError, match="does not compile"):
        render(template_text(tmp_path), [])


def test_assistant_calls_render_in_the_qwen35_form():
    messages = [{"role": "user", "content": "Q"},
                {"role": "assistant", "content": "", "tool_calls": [{"name": "gpu_calc", "arguments": {"expression": "1"}}]}]
    text = render(template_text(None), messages, add_generation_prompt=False)
    # after the last user turn, with the empty think block the generation prompt gave it
    assert "<|im_start|>assistant\n<think>\n\n</think>\n\n" + format_call("gpu_calc", {"expression": "1"}) + \
        "<|im_end|>" in text


# ---- the conversation ----------------------------------------------------------------------------------------
def _cuda_call(source: str, args: list[str], **launch) -> str:
    return format_call(CUDA, {"source": source, "args": args, **launch})


def test_advanced_mode_retries_after_a_compile_error_and_answers_from_the_launch():
    broken = SAXPY.replace("y[i] = a", "y[i] = b")
    model = ScriptedChatModel([_cuda_call(broken, ["2", "[1,2,3]", "[10,20,30]", "3"]),
                               _cuda_call(SAXPY, ["2", "[1,2,3]", "[10,20,30]", "3"]),
                               "y is [12, 24, 36]."])
    conv = Conversation(model, "advanced", INTERP)
    answer = conv.ask("Compute 2*x+y for x=[1,2,3], y=[10,20,30] with a CUDA kernel.")
    first, second = answer.tools
    assert not first.ok and first.text.startswith("error:") and "b" in first.text
    assert second.ok and second.value["y"] == [12, 24, 36] and second.source == SAXPY
    assert answer.text == "y is [12, 24, 36]." and answer.rounds == 3 and answer.finished
    # the error went back to the model, in the next prompt, inside a tool response
    assert "<tool_response>\n" + first.text in model.prompts[1]
    assert '"y": [12, 24, 36]' in model.prompts[2]


def test_results_come_from_the_launch(monkeypatch):
    from qgpu_min.host import launch as launch_module
    real = launch_module.launch

    def wrong(*args, **kwargs):
        r = real(*args, **kwargs)
        r.arrays["y"] = r.arrays["y"] + 1
        return r
    monkeypatch.setattr(launch_module, "launch", wrong)
    model = ScriptedChatModel([_cuda_call(SAXPY, ["2", "[1,2,3]", "[10,20,30]", "3"]), "done"])
    answer = Conversation(model, "advanced", INTERP).ask("q")
    assert answer.tools[0].value["y"] == [13, 25, 37]


@pytest.mark.parametrize("reply, why", [
    (format_call("rm_rf", {"path": "/"}), "unknown function 'rm_rf'; available: run_cuda"),
    (format_call(CUDA, {"args": ["1"]}), "needs the argument 'source'"),
    (format_call(CUDA, {"source": SAXPY, "args": "2"}), "'args' must be a list"),
    (_cuda_call(SAXPY, ["2", "[1,2,3]", "[10,20,30]"]), "takes 4 arguments"),
    (_cuda_call(SAXPY, ["[2]", "[1,2,3]", "[10,20,30]", "3"]), "is a scalar"),
    (_cuda_call(SAXPY, ["2", "[1,2,3]", "[10,20,30]", "3"], block="0"), "at least 1"),
    (_cuda_call("__global__ void f(volatile int* a) { while (a[0] == 0) {} }", ["[0]"]), "step limit"),
    (_cuda_call("__global__ void f(int* a) { a[100000] = 1; }", ["[0]"]), "out of range"),
    ("<tool_call>{broken</tool_call>", "not valid JSON"),
])
def test_bad_calls_and_failing_kernels_go_back_to_the_model(reply, why):
    model = ScriptedChatModel([reply, "sorry"])
    answer = Conversation(model, "advanced", INTERP).ask("q")
    [result] = answer.tools
    assert not result.ok and why in result.text, result.text
    assert answer.text == "sorry" and "<tool_response>\nerror:" in model.prompts[1]


def test_the_rounds_run_out_and_an_interrupted_question_leaves_nothing_behind():
    call = _cuda_call(SAXPY, ["2", "[1]", "[1]", "1"])
    conv = Conversation(ScriptedChatModel([call] * 3), "advanced", INTERP, max_rounds=2)
    answer = conv.ask("q")
    assert not answer.finished and len(answer.tools) == 2

    class Interrupting:
        def reply(self, prompt, on_text=None):
            raise KeyboardInterrupt
    conv.model, before = Interrupting(), list(conv.messages)
    with pytest.raises(KeyboardInterrupt):
        conv.ask("another")
    assert conv.messages == before


def test_a_launch_leaves_the_conversation_state_untouched(tmp_path):
    """The chat's own DeltaNet state (our runtime on a synthetic checkpoint) is the same, bit for bit, before
    and after a tool's launch on the GPU in the weights: a launch is its own sequence."""
    from qgpu_min.model.forward import load_model
    from qgpu_min.model.generate import Sampling
    from qgpu_min.model.synthetic import write_synthetic_checkpoint
    path = write_synthetic_checkpoint(tmp_path / "tiny", "tiny")
    runtime = RuntimeChatModel(load_model(path), max_new_tokens=4, sampling=Sampling(greedy=True))
    runtime.reply(render(template_text(None), [{"role": "user", "content": "hello"}]))
    snapshot = [np.array(a, copy=True) for a in _arrays(runtime.state)]
    from qgpu_min.chat.toolcall import parse_call
    from qgpu_min.chat.tools import run_tool
    result = run_tool(parse_call(json.dumps({"name": CUDA, "arguments": {
        "source": SAXPY, "args": ["3", "[1,2]", "[5,5]", "2"]}})), "advanced", Gpu("circuit"))
    assert result.ok and result.value["y"] == [8, 11] and result.launches[0]["tokens"]["generated"] > 0
    assert all(np.array_equal(a, b) for a, b in zip(snapshot, _arrays(runtime.state)))


def _arrays(state) -> list[np.ndarray]:
    return [v for v in vars(state).values() if isinstance(v, np.ndarray)] + \
        [a for v in vars(state).values() if isinstance(v, list) for a in v if isinstance(a, np.ndarray)]


def test_runtime_model_reuses_the_fed_prefix(tmp_path):
    from qgpu_min.model.forward import load_model
    from qgpu_min.model.generate import Sampling
    from qgpu_min.model.synthetic import write_synthetic_checkpoint
    path = write_synthetic_checkpoint(tmp_path / "tiny", "tiny")
    model = load_model(path)
    runtime = RuntimeChatModel(model, max_new_tokens=3, sampling=Sampling(greedy=True))
    first = render(template_text(None), [{"role": "user", "content": "hello"}])
    runtime.reply(first)
    state = runtime.state
    longer = runtime.model.tokenizer.decode(runtime.fed) + "<|im_end|>\n<|im_start|>user\nmore<|im_end|>\n"
    again = runtime.reply(longer)
    assert runtime.state is state                       # extended, not started over
    fresh = RuntimeChatModel(model, max_new_tokens=3, sampling=Sampling(greedy=True)).reply(longer)
    assert again == fresh                               # and the same reply as a fresh sequence gives


def test_normal_mode_answers_with_the_calculator_on_the_gpu_in_the_weights():
    model = ScriptedChatModel([format_call("gpu_calc", {"expression": "[1, 2, 3] @ [4, 5, 6]"}), "It is 32."])
    answer = Conversation(model, "normal", Gpu("circuit")).ask("What is [1,2,3] dot [4,5,6]?")
    [result] = answer.tools
    assert result.ok and result.value == 32 and result.text == "32" and answer.text == "It is 32."
    assert result.launches == [{"op": "a @ b", "kernel": "calc_dot", "grid": [1, 1], "block": [3, 1],
                                "backend": "circuit", "tokens": {"prompt": 305, "generated": 46}}]
    assert "<tool_response>\n32\n</tool_response>" in model.prompts[1]


@pytest.mark.parametrize("expression, why", [("[1, 2] @ [1, 2, 3]", "inner sizes differ"), ("foo(3)", "foo"),
                                             ("1 // 0", "zero"), ("sum(" + "[1]" * 2, "column")])
def test_normal_mode_errors_go_back_to_the_model(expression, why):
    model = ScriptedChatModel([format_call("gpu_calc", {"expression": expression}), "hmm"])
    [result] = Conversation(model, "normal", INTERP).ask("q").tools
    assert not result.ok and result.text.startswith("error:") and why in result.text, result.text


def test_eval_chat_grades_what_the_gpu_computed_and_the_answer_quotes(monkeypatch):
    import importlib.util
    from pathlib import Path
    spec = importlib.util.spec_from_file_location("eval_chat", Path(__file__).parent.parent / "tools" / "eval_chat.py")
    ev = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "eval_chat", ev)        # its dataclasses look their module up there
    spec.loader.exec_module(ev)
    q = ev.QUESTIONS[0]
    right = ScriptedChatModel([format_call("gpu_calc", {"expression": f"{ev.A} @ {ev.B}"}), f"The dot product is {q.answer}."])
    assert ev.grade(q, Conversation(right, "normal", INTERP).ask(q.text))["ok"]
    unquoted = ScriptedChatModel([format_call("gpu_calc", {"expression": f"{ev.A} @ {ev.B}"}), "It is large."])
    r = ev.grade(q, Conversation(unquoted, "normal", INTERP).ask(q.text))
    assert r["gpu_computed"] and not r["quoted"] and not r["ok"]
    guessed = ScriptedChatModel([f"The dot product is {q.answer}."])
    r = ev.grade(q, Conversation(guessed, "normal", INTERP).ask(q.text))
    assert r["quoted"] and not r["gpu_computed"] and not r["ok"]
    assert len([x for x in ev.QUESTIONS if x.mode == "normal"]) == 24 and len(ev.QUESTIONS) == 29


# ---- the command ---------------------------------------------------------------------------------------------
def test_chat_command_runs_a_scripted_conversation_with_a_launch(tmp_path):
    from qgpu_min.model.synthetic import write_synthetic_checkpoint
    path = write_synthetic_checkpoint(tmp_path / "tiny", "tiny")
    script = tmp_path / "replies.json"
    script.write_text(json.dumps([_cuda_call(SAXPY, ["2", "[1,2,3]", "[10,20,30]", "3"]), "It is [12, 24, 36]."]))
    r = CliRunner().invoke(main, ["chat", "--model", str(path), "--mode", "advanced", "--gpu", "interp",
                                  "--script", str(script), "--json", "Compute saxpy."])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["answer"] == "It is [12, 24, 36]." and out["tool_calls"][0]["ok"]
    assert json.loads(out["tool_calls"][0]["result"]) == {"x": [1, 2, 3], "y": [12, 24, 36]}
    r = CliRunner().invoke(main, ["chat", "--model", str(path), "--mode", "advanced", "--gpu", "interp",
                                  "--script", str(script), "Compute saxpy."])
    assert r.exit_code == 0 and "[GPU] run_cuda(kernel, args ['2', '[1,2,3]', '[10,20,30]', '3'])" in r.stdout
    assert "the kernel that ran:\n" + SAXPY in r.stdout


def test_chat_command_refuses_bad_input(tmp_path):
    from qgpu_min.model.synthetic import write_synthetic_checkpoint
    path = write_synthetic_checkpoint(tmp_path / "tiny", "tiny")
    bad = tmp_path / "bad.json"
    bad.write_text('{"not": "a list"}')
    r = CliRunner().invoke(main, ["chat", "--model", str(path), "--script", str(bad), "q"])
    assert r.exit_code == 1 and "must be a JSON list of strings" in r.output
    r = CliRunner().invoke(main, ["chat", "--model", str(path), "--json"])
    assert r.exit_code == 2 and "--json answers one QUESTION" in r.output


def test_streamed_replies_hide_tool_call_blocks_wherever_the_pieces_split():
    from qgpu_min.chat.commands import _Hider
    text = "Let me see.\n" + format_call("gpu_calc", {"expression": "1 <tool"}) + "\nDone <tool. a<b <"
    for step in (1, 2, 3, 5, 11, len(text)):
        h = _Hider()
        shown = "".join(h.feed(text[i:i + step]) for i in range(0, len(text), step)) + h.flush()
        assert shown == "Let me see.\n\nDone <tool. a<b <\n", step
    h = _Hider()
    assert h.feed(format_call("gpu_calc", {"expression": "1"})) + h.flush() == ""    # a reply that only calls


class TokenScriptModel:
    """A model that emits chosen token ids (the reply scripts, tokenized, each ended by <|im_end|>): the
    runtime path of chat (generation, stop tokens, streaming detokenization, the reuse of fed tokens) with no
    weights. A state is the list of ids fed into it; `count` is every id fed, in all states."""

    def __init__(self, real, replies: list[str]) -> None:
        self.tokenizer, self.config, self.path = real.tokenizer, real.config, real.path
        end = self.tokenizer.encode("<|im_end|>")
        self.script = [self.tokenizer.encode(r) + end for r in replies]
        self.count, self.k, self.states = 0, 0, []

    def new_state(self) -> list:
        return []

    def prefill(self, state: list, ids) -> np.ndarray:
        self.k = 0                       # a prompt: the next reply starts
        return self._fed(state, list(ids))

    def decode(self, state: list, token: int) -> np.ndarray:
        self.k += 1
        return self._fed(state, [token])

    def _fed(self, state: list, ids: list[int]) -> np.ndarray:
        state += ids
        self.count += len(ids)
        self.states.append(state)
        logits = np.full(self.config.vocab_size, -1e9, np.float32)
        logits[self.script[0][self.k]] = 0.0
        if self.k == len(self.script[0]) - 1:
            self.script.pop(0)
        return logits


def test_runtime_chat_model_with_scripted_tokens_calls_the_gpu(tmp_path):
    """Token by token: the model's ids become the reply text, the tool call in it runs on the GPU in the weights,
    the next prompt extends the fed ids (only its new tokens are prefilled) and the answer is the second reply."""
    from qgpu_min.model.forward import load_model
    from qgpu_min.model.generate import Sampling
    from qgpu_min.model.synthetic import write_synthetic_checkpoint
    real = load_model(write_synthetic_checkpoint(tmp_path / "tiny", "tiny"))
    fake = TokenScriptModel(real, [format_call("gpu_calc", {"expression": "cumsum([3, -1, 4])"}),
                                   "The prefix sums are [3, 2, 6]."])
    runtime = RuntimeChatModel(fake, max_new_tokens=200, sampling=Sampling(greedy=True))
    conv = Conversation(runtime, "normal", Gpu("circuit"))
    answer = conv.ask("Prefix sums of 3, -1, 4?")
    assert answer.text == "The prefix sums are [3, 2, 6]." and answer.tools[0].value == [3, 2, 6]
    assert answer.tools[0].launches[0]["backend"] == "circuit" and answer.tools[0].launches[0]["tokens"]["generated"] > 0
    second_prompt = real.tokenizer.encode(render(conv.template, conv.messages[:3], conv.tools))
    reply = real.tokenizer.encode("The prefix sums are [3, 2, 6].")
    assert fake.states[-1] == second_prompt + reply         # the sequence the answer came from, token for token
    first_prompt = real.tokenizer.encode(render(conv.template, conv.messages[:1], conv.tools))
    assert fake.count < len(first_prompt) + len(second_prompt)  # the second prompt's start was not fed again


def test_library_ask_one_question(tmp_path):
    import qgpu_min.chat as chat
    from qgpu_min.model.synthetic import write_synthetic_checkpoint
    path = write_synthetic_checkpoint(tmp_path / "tiny", "tiny")
    answer = chat.ask("What is 6 * 7?", path, backend="interp",
                      replies=[format_call("gpu_calc", {"expression": "6 * 7"}), "42."])
    assert answer.text == "42." and answer.tools[0].value == 42 and answer.launches[0]["kernel"] == "calc_mul"
    conv = chat.open_conversation(path, "advanced", backend="interp", replies=["no tool"])
    assert isinstance(conv, chat.Conversation) and conv.tools[0]["function"]["name"] == "run_cuda"


def test_chat_device_cuda_says_what_is_missing_or_refuses_quant(tmp_path):
    """--device cuda: Qwen's dense products on the optional CUDA path; refused with --quant before loading, and
    where no GPU (or no nvcc) is here, the error says which."""
    import qgpu_min.chat as chat
    from qgpu_min.model import cuda
    from qgpu_min.model.errors import CudaError, ModelInputError
    from qgpu_min.model.synthetic import write_synthetic_checkpoint
    path = write_synthetic_checkpoint(tmp_path / "tiny", "tiny")
    with pytest.raises(ModelInputError, match="runs on the CPU only"):
        chat.open_conversation(path, backend="interp", quant="int8", device="cuda")
    r = CliRunner().invoke(main, ["chat", "--model", str(path), "--gpu", "interp", "--device", "cuda", "--quant",
                                  "int8", "What is 1 + 1?"])
    assert r.exit_code != 0 and "runs on the CPU only" in r.output
    if cuda.find_nvcc() is None or cuda.library()[1].qgpu_cuda_devices() <= 0:
        with pytest.raises(CudaError, match="nvcc|CUDA device"):
            chat.open_conversation(path, backend="interp", device="cuda")
