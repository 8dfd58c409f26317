"""Hostile sizing problems (website/sizing_problems.toml): every bad value, field or step template is one line
naming the file, the problem and the field, from the check and from the site build, never a traceback, a
"nan GB" on a page, raw HTML, or a step template that reaches a Python object (issue 31, item 9)."""

from __future__ import annotations

import inspect
from functools import partial

import pytest

from records.paths import shown
from scripts import check
from website import sizing

# One valid problem (Llama-2-70B's KV cache: 1.34 GB); each case below changes one line of it.
BASE = """\
[kv]
title = "KV cache of one sequence"
topic = "attention-and-serving"
difficulty = "easy"
question = "How many bytes?"
formula = "kv_cache"
inputs = { layers = 80, kv_heads = 8, head_dim = 128, context = 4096 }
answer = "bytes"
unit = "GB"
scale = 1e9
stated = "1.34"
steps = ["{layers} layers: {bytes_gb} GB"]
"""
INPUTS = "inputs = { layers = 80, kv_heads = 8, head_dim = 128, context = 4096 }"


def write(tmp_path, old: str = "", new: str = "", text: str | None = None):
    if text is None:
        assert old in BASE
        text = BASE.replace(old, new, 1)
    path = tmp_path / "sizing_problems.toml"
    path.write_text(text, encoding="utf-8")
    return path


def one_error(path) -> str:
    """The check's report for the file: exactly one error, one line, naming the file."""
    errors = sizing.stated_problems(path)
    assert len(errors) == 1, errors
    report = check.Report()
    check.check_sizing(report, path.parent, path)
    assert report.errors == errors
    message = errors[0]
    assert "\n" not in message and "Traceback" not in message
    assert message.startswith(f"{shown(path)}: "), message
    return message


def test_the_base_problem_is_valid(tmp_path):
    path = write(tmp_path, "", "")
    assert sizing.stated_problems(path) == []
    problem = sizing.load_problems(path)["kv"]
    assert "1. 80 layers: 1.342 GB" in sizing.render_problem(problem)


def test_the_issue_example_message(tmp_path):
    path = write(tmp_path, "context = 4096", "context = nan")
    assert one_error(path) == f"{shown(path)}: problem 'kv' input context: nan is not a finite number"


@pytest.mark.parametrize("old, new, expected", [
    # values: finite, in range, the right type
    ("context = 4096", "context = nan", "input context: nan is not a finite number"),
    ("context = 4096", "context = inf", "input context: inf is not a finite number"),
    ("context = 4096", "context = -4096", "input context: -4096 is out of range"),
    ("context = 4096", "context = 0", "input context: 0 is out of range"),
    ("layers = 80", "layers = -80", "input layers: -80 is out of range"),
    ("context = 4096", "context = true", "input context: true is not a number"),
    ("context = 4096", 'context = "4096"', "input context: '4096' is not a number"),
    ("context = 4096", "context = 4096.5", "input context: 4096.5 is not a whole number"),
    ("context = 4096", "context = 1e300", "input context: 1e+300 is out of range"),
    ("context = 4096", "context = 123456789012345678901234567890", "input context: 123456789012345678901234567890 is "
                                                                      "out of range"),
    ("context = 4096", "context = " + "9" * 4000, "input context: " + "9" * 37 + "... is out of range"),
    ("context = 4096", "context = [4096]", "input context: an array is not a number"),
    ("context = 4096", "context = 4096, bogus = 1", "input bogus: kv_cache takes no such input"),
    ("context = 4096", "batch = 1", "inputs: no context (kv_cache needs it)"),
    (INPUTS, "inputs = [80, 8, 128, 4096]", "inputs: an array, not a table"),
    (INPUTS, 'inputs = "layers = 80"', "inputs: 'layers = 80', not a table"),
    (INPUTS, INPUTS.replace("4096 }", '4096, dtype_bytes = "datasheet:h100.nope" }'),
     "input dtype_bytes: records/datasheets.toml has no h100.nope"),
    (INPUTS, INPUTS.replace("4096 }", '4096, dtype_bytes = "datasheet:../../etc/passwd" }'),
     "input dtype_bytes: write datasheet:DEVICE.FIELD[.DTYPE]"),
    ("scale = 1e9", "scale = 0", "scale: 0 is out of range"),
    ("scale = 1e9", "scale = -1e9", "scale: -1000000000.0 is out of range"),
    ("scale = 1e9", 'scale = "GB"', "scale: 'GB' is not a number"),
    ("scale = 1e9", "scale = nan", "scale: nan is not a finite number"),
    # the text fields
    ('title = "KV cache of one sequence"', 'title = "<script>alert(1)</script>"', "title: '<script>alert(1)</script>' "
                                                                                 "holds markup"),
    ('title = "KV cache of one sequence"', 'title = "[x](javascript:alert(1))"', "title: '[x](javascript:alert(1))' "
                                                                                "holds markup"),
    ('title = "KV cache of one sequence"', 'title = "a { #other }"', "holds markup"),
    ('title = "KV cache of one sequence"', "title = 5", "title: 5 is not a string"),
    ('unit = "GB"', 'unit = "<b>GB</b>"', "unit: '<b>GB</b>' holds markup"),
    ('difficulty = "easy"', 'difficulty = "<img src=x onerror=alert(1)>"', "difficulty: '<img src=x onerror=alert(1)>' "
                                                                           "is not one of easy, medium, hard"),
    ('difficulty = "easy"', 'difficulty = "trivial"', "difficulty: 'trivial' is not one of easy, medium, hard"),
    ('topic = "attention-and-serving"', 'topic = "x.md) <script>"', "topic: 'x.md) <script>' is not a topic page's"),
    ('formula = "kv_cache"', 'formula = "__import__"', "formula: unknown formula '__import__'"),
    ('answer = "bytes"', 'answer = "bytes per token"', "answer: 'bytes per token' is not a result name"),
    ('answer = "bytes"', 'answer = "nope"', "formula kv_cache gives no 'nope'"),
    ('stated = "1.34"', "stated = 1.34", "stated: 1.34 is not a string (write the rounded answer in quotes"),
    ('stated = "1.34"', 'stated = "about 1.3"', "stated: stated answer 'about 1.3' is not a plain number"),
    ('stated = "1.34"', 'stated = "nan"', "stated: stated answer 'nan' is not a plain number"),
    ('stated = "1.34"', 'stated = "1.35"', "stated answer 1.35 GB but the computation gives 1.34218 GB"),
    ('steps = ["{layers} layers: {bytes_gb} GB"]', 'steps = "one line"', "steps: not an array of strings"),
    ('steps = ["{layers} layers: {bytes_gb} GB"]', "steps = [1, 2]", "steps: not an array of strings"),
    ('unit = "GB"', 'unit = "GB"\nsource = "me"', "unknown field 'source'"),
    ('question = "How many bytes?"\n', "", "has no 'question'"),
])
def test_a_bad_field_is_one_line_naming_the_problem_and_the_field(tmp_path, old, new, expected):
    message = one_error(write(tmp_path, old, new))
    assert "problem 'kv'" in message and expected in message, message


DAYS = "params = 7e9, tokens = 1e12, gpus = 8, peak_tflops = 989"
TRAIN = "params = 7e9, layers = 32, hidden = 4096, heads = 32, seq_len = 4096"
SERVE = "params = 7e9, gpus = 1, bandwidth_gbs = 3350, memory_gb = 80, batch = 1, context = 4096, layers = 32"


@pytest.mark.parametrize("formula, inputs, expected", [
    ("training_days", DAYS.replace("gpus = 8", "gpus = 0") + ", mfu = 0.4",
     "input gpus: 0 is out of range: give a whole number from 1 to 1e+18"),
    ("training_days", DAYS + ", mfu = 0", "input mfu: 0 is out of range: give a number above 0 and at most 1"),
    ("training_days", DAYS + ", mfu = 1.5", "input mfu: 1.5 is out of range"),
    ("training_days", "params = 1e18, tokens = 1e18, gpus = 1, peak_tflops = 1e-300, mfu = 1e-300",
     "training_days: float division by zero"),
    ("training_days", "params = 1e18, tokens = 1e18, gpus = 1, peak_tflops = 1e-200, mfu = 1e-100",
     "training_days gives seconds = inf for these inputs"),
    ("serving", SERVE + ", weight_bytes = 0, kv_heads = 8, head_dim = 128", "input weight_bytes: 0 is out of range"),
    ("decode_intensity", "batch = 8, weight_bytes = 0", "input weight_bytes: 0 is out of range"),
    ("training_memory", TRAIN + ', precision = "fp16"', "input precision: 'fp16' is not one of mixed, fp32"),
    ("training_memory", TRAIN + ", zero_stage = 4",
     "input zero_stage: 4 is out of range: give a whole number from 0 to 3"),
    ("all_reduce", 'n_bytes = 1e9, gpus = 8, link = "__class__"',
     "input link: '__class__' is not one of nvlink4_h100, ib_ndr400"),
    ("ridge_point", 'device = "../etc", dtype = "bfloat16"', "input device: '../etc' is not one of"),
    ("ridge_point", 'device = "h100", dtype = "int3"', "ridge_point: no 'int3' for these inputs"),
    ("pipeline_bubble", "stages = 8, microbatches = 30, interleave = 2",
     "pipeline_bubble: the interleaved schedule needs microbatches to be a multiple of pp"),
])
def test_formula_inputs_out_of_range_are_refused(tmp_path, formula, inputs, expected):
    text = (BASE.replace('formula = "kv_cache"', f'formula = "{formula}"')
            .replace(INPUTS, "inputs = { " + inputs + " }")
            .replace('steps = ["{layers} layers: {bytes_gb} GB"]', "steps = []")
            .replace('answer = "bytes"', 'answer = "nothing"'))
    message = one_error(write(tmp_path, text=text))
    assert "problem 'kv'" in message and expected in message, message


def test_a_whole_number_written_as_a_float_is_taken(tmp_path):
    path = write(tmp_path, "context = 4096", "context = 4096.0")
    assert sizing.stated_problems(path) == []
    assert sizing.load_problems(path)["kv"].inputs["context"] == 4096


@pytest.mark.parametrize("step, expected", [
    ("{x.__class__.__init__.__globals__}", "'{x.__class__.__init__.__globals__}' is not a plain {name}"),
    ("{layers.__class__}", "is not a plain {name}"),
    ("{layers[0]}", "'{layers[0]}' is not a plain {name}"),
    ("{layers!r}", "'{layers!r}' is not a plain {name}"),
    ("{layers:{bytes.__class__}}", "is not a plain {name}"),
    ("{0}", "'{0}' is not a plain {name}"),
    ("{}", "'{}' is not a plain {name}"),
    ("{layers:999999999}", "'{layers:999999999}' is not a plain {name}"),  # a width that would fill the memory
    ("{layers:.999999999f}", "is not a plain {name}"),
    ("a single } brace", "Single '}' encountered in format string (write {{ or }} for a literal brace)"),
    ("a single { brace", "(write {{ or }} for a literal brace)"),
    ("{no_such_value}", "a step names 'no_such_value', which is neither an input nor a result"),
    ("{precision:.2f}", "a step names 'precision'"),
    ("{unit:.2f}", "{unit:.2f}: Unknown format code 'f'"),
])
def test_a_step_template_reaches_no_python_object(tmp_path, step, expected):
    path = write(tmp_path, '"{layers} layers: {bytes_gb} GB"', '"' + step + '"')
    message = one_error(path)
    assert message.startswith(f"{shown(path)}: problem 'kv' steps[0]: "), message
    assert expected in message, message


def test_a_plain_field_and_a_format_field_still_render(tmp_path):
    step = '"{context} tokens, {bytes_gb:.3f} GB, {layers:>4}, {{x}}"'
    path = write(tmp_path, '"{layers} layers: {bytes_gb} GB"', step)
    out = sizing.render_problem(sizing.load_problems(path)["kv"])
    assert "1. 4,096 tokens, 1.342 GB,   80, {x}" in out


@pytest.mark.parametrize("text, expected", [
    ("[kv\n", "not valid TOML: "),
    ("kv = 5\n", "problem 'kv': 5, not a table of fields"),
    ("kv = " + "1" * 5000 + "\n", "not valid TOML: Exceeds the limit (4300 digits)"),
    ('["a b"]\ntitle = "x"\n', "problem 'a b': an id is letters, digits, '_' and '-'"),
    ('["x\\" onmouseover=\\"alert(1)"]\ntitle = "x"\n', "an id is letters, digits"),
])
def test_a_malformed_file_is_one_line(tmp_path, text, expected):
    message = one_error(write(tmp_path, text=text))
    assert expected in message, message


def test_a_file_that_is_not_utf8_is_one_line(tmp_path):
    path = tmp_path / "sizing_problems.toml"
    path.write_bytes(b"[kv]\ntitle = \"\xff\xfe\"\n")
    assert "not valid TOML: " in one_error(path)


def test_the_build_refuses_a_bad_problem_in_one_line(tmp_path, monkeypatch):
    """The site build (website/render.py -> sizing.expand) gets the same one-line ValueError, which the MkDocs
    hook turns into a PluginError (no traceback), and never a page with "nan GB"."""
    path = write(tmp_path, "context = 4096", "context = nan")
    monkeypatch.setattr(sizing, "load_problems", partial(sizing.load_problems, path))
    with pytest.raises(ValueError) as caught:
        sizing.expand("{{ sizing kv }}", "sizing.md")
    assert str(caught.value) == f"{shown(path)}: problem 'kv' input context: nan is not a finite number"


def test_every_formula_input_has_a_rule_and_the_difficulties_are_the_checks():
    for name, formula in sizing.FORMULAS.items():
        for parameter in inspect.signature(formula).parameters:
            assert parameter in sizing.INPUT_RULES, (name, parameter)
    assert set(sizing.DIFFICULTIES) == check.DIFFICULTIES


def test_the_repository_problems_pass_the_rules():
    assert sizing.stated_problems() == []
