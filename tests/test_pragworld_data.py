"""PragWorld: loading both CSV layouts, the yes/no parser, the prompts, the accuracies and the
scoring CLI — including the published Table 1 rows from the released responses (when present)."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
from conftest import SHARED_DATA

from interp.cli import main
from interp.datasets.pragworld import (
    PragWorldFormatError,
    benchmark_prompt,
    count_utterances,
    label_prompt,
    length_bucket,
    load_pragworld,
    normalise_category,
    parse_yes_no,
    write_pragworld_csv,
)
from interp.metrics.pragworld import SUMMARY_KEYS, score_pragworld

PRAG = SHARED_DATA / "pragworld"
MANUAL = PRAG / "Manual_Dataset_500_Final.csv"
SYNTHETIC = PRAG / "synthetic_final.csv"
needs_manual = pytest.mark.skipif(not MANUAL.exists(), reason=f"PragWorld data not present at {MANUAL}")
needs_synthetic = pytest.mark.skipif(not SYNTHETIC.exists(), reason=f"PragWorld data not present at {SYNTHETIC}")

HEADER = "Local Context,Question,Answer,Perturbation?,Perturbation Target,Perturbation Category,Perturbation Effect"
CTX = '"A: did you put the apples in the box\nB: I did\nA: and the pears\nB: in the\nbasket"'


def _write(path, lines, crlf=True):
    path.write_bytes(("\r\n" if crlf else "\n").join(lines).encode() + b"\r\n")
    return path


@pytest.fixture
def messy(tmp_path):
    """Two groups; the second original's first alteration has a 'TRUE ' flag; messy spellings; a
    summary tail as in the published file."""
    return _write(
        tmp_path / "messy.csv",
        [
            HEADER,
            f"{CTX},are the apples in the box?,Yes,FALSE,None,-,-",
            f"{CTX},are the apples in the box?,No,TRUE,Context,Negation,Flip",
            f'{CTX},are the pears in the box?,no ,TRUE ,Question ,"Variablle Substitution ",Invarianat',
            f"{CTX},are all apples in the box?,YES,FALSE ,None,-,-",
            f'{CTX},are all apples in the box?,No,TRUE ,Context,"Logical Connective \nChange",Flip',
            f"{CTX},are all apples in the box?,Yes,true,context,Quanity Change,invariant",
            ",,,2,,,",
            ",,,4,,,",
        ],
    )


def test_clean_grouping_reads_flags_whitespace_insensitively(messy):
    d = load_pragworld(messy)
    r = d.rows
    assert list(r["row"]) == list(range(6))
    assert list(r["group"]) == [0, 0, 0, 1, 1, 1]
    assert list(r["altered"]) == [False, True, True, False, True, True]
    assert list(r["gold"]) == [1, 0, 0, 1, 0, 1]
    assert list(r["category"]) == [
        None,
        "negation",
        "variable_substitution",
        None,
        "connective_change",
        "quantity_change",
    ]
    assert list(r["effect"]) == [None, "flip", "invariant", None, "flip", "invariant"]
    assert list(r["target"]) == ["none", "context", "question", "none", "context", "context"]
    assert r["context"][0] == "A: did you put the apples in the box\nB: I did\nA: and the pears\nB: in the\nbasket"
    assert set(r["n_utterances"]) == {4} and set(r["length_bucket"]) == {"short"}
    assert d.dropped.count == 2 and len(d.dropped) == 2 and d.dropped["count"] == 2
    assert "2/" not in d.dropped.reason and "2, 4" in d.dropped.reason
    assert d.layout == "manual" and d.n_groups == 2 and d.flag_differences == [2, 4]


def test_reference_grouping_reads_trailing_space_true_as_unaltered(messy):
    d = load_pragworld(messy, grouping="reference")
    r = d.rows
    # rows 2 and 4 ('TRUE ') start groups of their own, as in the published evaluation
    assert list(r["altered"]) == [False, True, False, False, False, True]
    assert list(r["group"]) == [0, 0, 1, 2, 3, 3]
    # only the grouping differs: categories, effects and gold are read the same
    clean = load_pragworld(messy).rows
    for col in ("category", "effect", "gold", "target", "n_utterances"):
        assert list(r[col]) == list(clean[col])
    assert d.with_grouping("clean").rows["group"].tolist() == clean["group"].tolist()


@pytest.mark.parametrize(
    "cell, want",
    [
        ("Negation", ("negation", None)),
        ("negation ", ("negation", None)),
        ("Variable Substitution ", ("variable_substitution", None)),
        ("Variablle Substitution ", ("variable_substitution", None)),
        ("Variable Substituion", ("variable_substitution", None)),
        ("Quanity Change", ("quantity_change", None)),
        ("Quantifier change", ("quantifier_change", None)),
        ("Quanifier Change", ("quantifier_change", None)),
        ("Logical Connective\nChange", ("connective_change", None)),
        ("Injecting inconsistent \nData", ("inconsistent_data", None)),
        (" Logical Connective Change", ("connective_change", None)),
        ("Variable Swap: agent", ("variable_swap", "agent")),
        ("Quantity Change add for: object", ("quantity_change", "add for: object")),
        ("Quantiy Chnage", ("quantity_change", None)),
        ("-", (None, None)),
        ("Not applicable", (None, None)),
        ("", (None, None)),
    ],
)
def test_categories_are_normalised_whatever_the_spelling(cell, want):
    assert normalise_category(cell) == want


def test_unknown_category_is_an_error():
    with pytest.raises(ValueError, match="unknown alteration category"):
        normalise_category("Paraphrase")


@pytest.mark.parametrize(
    "bad_line, needle",
    [
        (f"{CTX},q?,Maybe,TRUE,Context,Negation,Flip", "column 'Answer': unknown answer 'Maybe'"),
        (f"{CTX},q?,Yes,TRUE,Context,Paraphrase,Flip", "column 'Perturbation Category'"),
        (f"{CTX},q?,Yes,TRUE,Context,Negation,Sideways", "column 'Perturbation Effect'"),
        (f"{CTX},q?,Yes,TRU,Context,Negation,Flip", "column 'Perturbation?'"),
        (f"{CTX},q?,Yes,TRUE,Context,-,Flip", "column 'Perturbation Category': an altered row"),
        (f"{CTX},q?,Yes,TRUE,Nowhere,Negation,Flip", "column 'Perturbation Target'"),
        (",q?,Yes,TRUE,Context,Negation,Flip", "column 'Local Context': empty"),
        (f"{CTX},q?,Yes,TRUE,Context,Negation", "6 fields, the header has 7"),
        (",,,77,,,", "summary/empty record before the end"),
    ],
)
def test_a_malformed_row_is_an_error_naming_row_line_and_column(tmp_path, bad_line, needle):
    path = _write(
        tmp_path / "bad.csv",
        [HEADER, f"{CTX},q?,Yes,FALSE,None,-,-", bad_line, f"{CTX},q?,No,TRUE,Context,Negation,Flip"],
    )
    with pytest.raises(PragWorldFormatError) as e:
        load_pragworld(path)
    msg = str(e.value)
    assert needle in msg and "row 1 (data row, 0-based; CSV line 7)" in msg, msg


def test_missing_column_and_orphan_alteration_are_errors(tmp_path):
    with pytest.raises(PragWorldFormatError, match="missing column.*Perturbation Effect"):
        load_pragworld(_write(tmp_path / "a.csv", [HEADER.rsplit(",", 1)[0], "x,q?,Yes,FALSE,None,-"]))
    with pytest.raises(PragWorldFormatError, match="first data row is an alteration"):
        load_pragworld(_write(tmp_path / "b.csv", [HEADER, "x,q?,Yes,TRUE,Context,Negation,Flip"]))
    with pytest.raises(ValueError, match="grouping must be one of"):
        load_pragworld(_write(tmp_path / "c.csv", [HEADER, "x,q?,Yes,FALSE,None,-,-"]), grouping="published")


def test_synthetic_layout_three_way_gold_and_derived_effects(tmp_path):
    head = "Seed Index," + HEADER + ",Utterance Index,Old Word,New Word"
    na = "Not applicable"
    path = _write(
        tmp_path / "syn.csv",
        [
            head,
            f"0,{CTX},q?,yes,FALSE,{na},{na},{na},{na},{na},{na}",
            f"0,{CTX},q?,cannot answer,TRUE,Context,Variable Swap: agent,Possible,swapped between indexes 1 and 3,Bob,Ann",
            f"0,{CTX},q?,Yes,TRUE,Context,Quantifier Change,Possible,4,all,some",
            f"0,{CTX},q?,notsure,FALSE,{na},{na},{na},{na},{na},{na}",
            f"0,{CTX},q?,no,TRUE,Context, Logical Connective Change,Not Possible,2,and,or",
        ],
        crlf=False,
    )
    d = load_pragworld(path)
    r = d.rows
    assert d.layout == "synthetic" and d.n_groups == 2
    assert list(r["answer"]) == ["yes", "cannot answer", "yes", "cannot answer", "no"]
    assert list(r["gold"]) == [1, 0, 1, 0, 0]
    assert list(r["effect"]) == [None, "flip", "invariant", None, "invariant"]
    assert list(r["effect_source"]) == [None, "derived", "derived", None, "derived"]
    assert r["subcategory"][1] == "agent" and r["old_word"][2] == "all" and r["seed_index"][0] == "0"
    assert r["utterance_index"][0] is None


def test_write_then_load_round_trips(messy, tmp_path):
    d = load_pragworld(messy)
    out = write_pragworld_csv(d.rows, tmp_path / "out.csv")
    again = load_pragworld(out)
    cols = [
        "row",
        "group",
        "context",
        "question",
        "gold",
        "altered",
        "target",
        "category",
        "effect",
        "n_utterances",
        "length_bucket",
    ]
    pd.testing.assert_frame_equal(again.rows[cols], d.rows[cols])
    assert again.dropped.count == 0
    # the written flags are clean, so both groupings agree on a written file
    assert load_pragworld(out, "reference").rows["group"].tolist() == d.rows["group"].tolist()
    shuffled = d.rows.iloc[[0, 3, 1, 2, 4, 5]]
    with pytest.raises(ValueError, match="group column does not match"):
        write_pragworld_csv(shuffled, tmp_path / "bad.csv")
    with pytest.raises(ValueError, match="first row is an alteration"):
        write_pragworld_csv(d.rows.iloc[1:], tmp_path / "bad.csv")


def test_utterances_count_speaker_turns_and_buckets():
    assert count_utterances("A: hi\nB: hello\nthere\n\nA: bye") == 3
    assert count_utterances("1: Alice: hi\n2: Bob: yes") == 2
    assert count_utterances("no speakers here\nat all") == 2
    assert [length_bucket(n) for n in (1, 10, 11, 15, 16, 30)] == ["short", "short", "medium", "medium", "long", "long"]


@pytest.mark.parametrize(
    "response, want",
    [
        ("(yes)", "yes"),
        ("(No)", "no"),
        ("yes)", "yes"),
        ("no)", "no"),
        ("Yes", "yes"),
        ("  no  \nbecause", "no"),
        ("Yes.", "yes"),
        ("(Yes) Bob said so", "yes"),
        ("No, he did not", "no"),
        ("(no).", "no"),
        ("\n\n(yes)\nexplanation", "yes"),
        ("Maybe", None),
        ("", None),
        ("   ", None),
        (None, None),
        ("The answer is yes", None),
        ("(y", None),
        ("yes!", None),
    ],
)
def test_parse_yes_no_follows_the_benchmark_parser(response, want):
    assert parse_yes_no(response) == want


def test_prompts_end_as_the_reference_prompts():
    b = benchmark_prompt("A: hi\nB: yo", "did A say hi?")
    assert b.startswith("Read this conversation between Bob and Alice:\nA: hi\nB: yo\n\n") and b.endswith(
        "Your answer:\n("
    )
    lp = label_prompt("A: hi\nB: yo", "did A say hi?")
    assert lp.endswith("did A say hi?\n\nThe answer should only be a label i.e. either yes or no.\nLabel:")


# ---- accuracies ---------------------------------------------------------------------------------


def _toy_rows():
    return pd.DataFrame(
        {
            "group": [0, 0, 0, 1, 1, 2],
            "gold": [1, 0, 1, 0, 0, 1],
            "altered": [False, True, True, False, True, False],
            "effect": [None, "flip", "invariant", None, "invariant", None],
            "category": [None, "negation", "variable_swap", None, "negation", None],
            "length_bucket": ["short", "short", "short", "medium", "medium", "long"],
        }
    )


def test_score_by_hand():
    rows = _toy_rows()
    s = score_pragworld(rows, ["yes", "no", "no", "no", "no", None])
    # correct: T T F T T F  → groups: 0 wrong, 1 right, 2 wrong
    assert s["robust"] == pytest.approx(100 / 3)
    assert s["total"] == pytest.approx(400 / 6)
    assert s["yes"] == pytest.approx(100 / 3) and s["no"] == pytest.approx(100.0)
    assert s["original"] == pytest.approx(200 / 3) and s["altered"] == pytest.approx(200 / 3)
    assert s["flip"] == pytest.approx(100.0) and s["invariant"] == pytest.approx(50.0)
    assert s["groups"] == 3 and s["rows"] == 6 and s["unparseable"] == pytest.approx(100 / 6)
    assert set(SUMMARY_KEYS) <= set(s.summary())
    assert s["robust_ci_low"] <= s["robust"] <= s["robust_ci_high"]
    cat = s.per_category.set_index("category")
    assert cat.loc["negation", "rows"] == 2 and cat.loc["negation", "total"] == pytest.approx(100.0)
    # negation robust: group 0 (original + negation row) right, group 1 right
    assert cat.loc["negation", "robust"] == pytest.approx(100.0)
    assert cat.loc["variable_swap", "robust"] == pytest.approx(0.0)
    length = s.per_length.set_index("length_bucket")
    assert length.loc["medium", "robust"] == pytest.approx(100.0) and length.loc["long", "rows"] == 1
    assert list(s.per_example["correct"]) == [True, True, False, True, True, False]


def test_score_bootstrap_is_seeded_and_nan_becomes_none(tmp_path):
    rows = _toy_rows().assign(effect=[None, "invariant", "invariant", None, "invariant", None])
    a = score_pragworld(rows, ["yes"] * 6, seed=3)
    b = score_pragworld(rows, ["YES "] * 6, seed=3)
    assert a.summary() == b.summary() and a["flip"] is None
    folder = a.save(tmp_path / "score")
    saved = json.loads((folder / "pragworld.json").read_text())
    assert saved["flip"] is None and saved["settings"]["seed"] == 3
    for name in ("pragworld.csv", "pragworld_groups.csv", "pragworld_categories.csv", "pragworld_lengths.csv"):
        assert (folder / name).exists()


def test_predictions_may_be_one_zero_integers():
    rows = _toy_rows()
    as_words = score_pragworld(rows, ["yes", "no", "no", "no", "no", "no"])
    assert score_pragworld(rows, np.array([1, 0, 0, 0, 0, 0])).summary() == as_words.summary()
    assert score_pragworld(rows, [True, False, False, False, False, 2])["unparseable"] == pytest.approx(100 / 6)


def test_prediction_count_mismatch_is_an_error():
    with pytest.raises(ValueError, match="5 predictions for 6 data rows"):
        score_pragworld(_toy_rows(), ["yes"] * 5)


def test_score_cli_with_predictions_and_errors(messy, tmp_path, capsys):
    pred = tmp_path / "pred.csv"
    pd.DataFrame({"prediction": ["yes", "no", "No", "yes", "perhaps", "yes"]}).to_csv(pred, index=False)
    assert (
        main(["pragworld", "score", str(messy), "--predictions", str(pred), "--json", "--out", str(tmp_path / "o")])
        == 0
    )
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["rows"] == 6 and out["groups"] == 2 and out["unparseable"] == pytest.approx(100 / 6)
    assert out["robust"] == pytest.approx(50.0)
    assert (tmp_path / "o" / "pragworld.json").exists()
    short = tmp_path / "short.jsonl"
    short.write_text("\n".join(json.dumps({"response": "(yes)"}) for _ in range(5)) + "\n")
    assert main(["pragworld", "score", str(messy), "--responses", str(short)]) == 2
    assert "5 response records but the data has 6 rows" in capsys.readouterr().err


# ---- the published data -------------------------------------------------------------------------


@needs_manual
def test_published_manual_split_counts():
    clean, ref = load_pragworld(MANUAL), load_pragworld(MANUAL, grouping="reference")
    assert len(clean) == 500 and clean.dropped.count == 3 and clean.dropped.values == (("77",), ("44",), ("33",))
    assert (clean.n_groups, int(clean.rows["altered"].sum())) == (88, 412)
    assert (ref.n_groups, int(ref.rows["altered"].sum())) == (98, 402)
    assert int(clean.rows["gold"].sum()) == 277 and len(clean.flag_differences) == 10
    assert clean.rows["category"].dropna().nunique() == 7
    assert clean.rows["effect"].value_counts().to_dict() == {"invariant": 273, "flip": 139}


@needs_synthetic
def test_published_synthetic_split_counts():
    d = load_pragworld(SYNTHETIC)
    assert d.layout == "synthetic" and len(d) == 2158 and d.n_groups == 494 and d.dropped.count == 0
    assert (d.rows["answer"] == "cannot answer").sum() == 371 and int(d.rows["gold"].sum()) == 1074


TABLE1 = {  # paper Table 1, manual split: robust / yes / no / original / altered / flip / invariant
    "Llama-3.2-1B-Instruct": (14.29, 10.83, 95.96, 48.98, 48.76, 55.40, 45.05),
    "Phi-3.5-mini-instruct": (48.98, 66.06, 86.10, 78.57, 74.13, 74.10, 74.36),
    "gpt-3.5-turbo-dec23": (42.86, 52.71, 93.72, 71.43, 70.90, 71.94, 69.23),
}
CLEAN = {  # the same responses under the clean grouping (88 groups), as in docs/reproductions/pragworld-responses.md
    "Llama-3.2-1B-Instruct": (10.23, 10.83, 95.96, 50.00, 48.54, 55.40, 45.05),
    "Phi-3.5-mini-instruct": (46.59, 66.06, 86.10, 78.41, 74.27, 74.10, 74.36),
    "gpt-3.5-turbo-dec23": (42.05, 52.71, 93.72, 75.00, 70.15, 71.94, 69.23),
}
KEYS = ("robust", "yes", "no", "original", "altered", "flip", "invariant")


@needs_manual
@pytest.mark.parametrize("model", sorted(TABLE1))
@pytest.mark.parametrize("grouping", ["reference", "clean"])
def test_released_responses_reproduce_table1(model, grouping, capsys):
    resp = PRAG / "outputs" / f"{model}.manual.jsonl"
    if not resp.exists():
        pytest.skip(f"released responses not present at {resp}")
    assert main(["pragworld", "score", str(MANUAL), "--responses", str(resp), "--grouping", grouping, "--json"]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    want = (TABLE1 if grouping == "reference" else CLEAN)[model]
    assert tuple(round(out[k], 2) for k in KEYS) == want
    assert out["groups"] == (98 if grouping == "reference" else 88) and out["rows"] == 500
    assert out["unparseable"] == 0.0


@needs_manual
def test_released_prompts_are_the_benchmark_prompt_and_parser_matches_reference():
    resp = PRAG / "outputs" / "Llama-3.2-1B-Instruct.manual.jsonl"
    if not resp.exists():
        pytest.skip(f"released responses not present at {resp}")
    d = load_pragworld(MANUAL)
    recs = [json.loads(line) for line in resp.read_text().splitlines()]
    assert all(r["prompt"] == benchmark_prompt(c, q) for r, c, q in zip(recs, d.rows["context"], d.rows["question"]))

    def reference(response):  # src/metrics.py: extract_response_from_brackets
        line = response.strip().split("\n")[0].strip().lower().replace(",", "")
        if line not in ["(yes)", "(no)", "no)", "yes", "yes)", "no"]:
            line = line.strip().split()[0].strip().lower().replace(",", "").replace(".", "")
        return "yes" if line in ["(yes)", "yes", "yes)"] else "no" if line in ["(no)", "no", "no)"] else None

    for name in TABLE1:
        for r in (json.loads(x) for x in (PRAG / "outputs" / f"{name}.manual.jsonl").read_text().splitlines()):
            assert parse_yes_no(r["response"]) == reference(r["response"])
    assert not math.isnan(np.mean([parse_yes_no(r["response"]) == "yes" for r in recs]))
