"""Natural-English location-tracking dialogues (``interp data dialogue``) and their heuristics.

Oracles: the generator's gold against an independent replay written here — it enumerates every
*concrete* world the events allow (which object an "either … or" moved, which things "some" moved)
and reads the asked object's place off all of them, where the world propagates sets of possible
places; flip / invariant against that replay's gold of the group's original; single tokens against
the tokenizer itself; the heuristics against hand-worked answers.
"""

from __future__ import annotations

import itertools
import json

import pytest

from interp.datasets.contrast import load_contrast
from interp.datasets.ioi import n_tokens
from interp.worlds.dialogue import render, tracking
from interp.worlds.dialogue.alterations import CATEGORIES
from interp.worlds.dialogue.natural import DialogueConfig, DialogueError, dialogue_examples, require_single_token
from interp.worlds.dialogue.tracking import Event

ALL_PLACES = render.WORDS["train"].places + render.WORDS["heldout"].places
LEFT_OUT = "cupboard"  # kept out of the test tokenizer's merges: two tokens or more


def _bpe(words, name: str):
    from test_architectures import _tokenizer
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    core.train_from_iterator(
        [" ".join(f" {w}" for w in words)] * 60 + [" yes no"] * 50,
        trainers.BpeTrainer(
            vocab_size=900,
            special_tokens=["<|endoftext|>", "<s>", "</s>", "<pad>"],
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
            show_progress=False,
        ),
    )
    tok = _tokenizer(core, adds_bos=False)
    tok.name_or_path = name
    return tok


@pytest.fixture(scope="module")
def tok():
    """A small byte-level BPE in which every place but ``cupboard`` is one token with a space."""
    return _bpe([p for p in ALL_PLACES if p != LEFT_OUT], "tiny-bpe")


# ---- the independent replay ------------------------------------------------------------------------


def _worlds_after(events: list[dict]) -> list[dict]:
    """Every concrete world (object → one location) the events allow, by brute force."""
    worlds = [{}]
    for e in events:
        if e.get("negated") or e["kind"] in ("mention", "absurd", "chat"):
            continue
        nxt = []
        for w in worlds:
            k, objs = e["kind"], e.get("objects", [])
            if k in ("put", "move"):
                if len(objs) == 2 and e.get("object_join") == "or":  # exclusive: exactly one moved
                    outs = [{**w, objs[0]: e["place"]}, {**w, objs[1]: e["place"]}]
                else:
                    outs = [{**w, **{o: e["place"] for o in objs}}]
            elif k == "take":
                outs = [{**w, objs[0]: "@" + e["agents"][0]}]
            elif k == "give":
                outs = [{**w, objs[0]: "@" + e["recipient"]}]
            elif k == "drop":
                outs = [{o: (e["place"] if loc == "@" + e["agents"][0] else loc) for o, loc in w.items()}]
            elif k == "move_all":
                there = [o for o, loc in w.items() if loc == e["source"]]
                if e.get("quantifier") == "some" and len(there) >= 2:  # some, not all
                    subsets = [s for r in range(1, len(there)) for s in itertools.combinations(there, r)]
                elif e.get("quantifier") == "some":  # one thing or none there: it may have moved
                    subsets = [(), tuple(there)]
                else:
                    subsets = [tuple(there)]
                outs = [{**w, **{o: e["place"] for o in s}} for s in subsets]
            elif k == "shuttle":
                outs = [{**w, objs[0]: e["place"] if e.get("times", 1) % 2 else e["source"]}]
            else:
                raise AssertionError(f"unknown kind {k}")
            nxt += outs
        worlds = [dict(t) for t in {tuple(sorted(w.items())) for w in nxt}]
    return worlds


def _replay_gold(meta: dict):
    """(the cloze gold place or None, the yes/no gold) from the events alone."""
    where = {w.get(meta["object"]) for w in _worlds_after(meta["events"])}
    place = next(iter(where)) if len(where) == 1 and not str(next(iter(where))).startswith("@") else None
    yes = where == {meta.get("ask_place")}
    return place, yes


@pytest.mark.parametrize("split", ["train", "heldout"])
@pytest.mark.parametrize("form", ["cloze", "yesno"])
def test_gold_equals_an_independent_replay_on_every_alteration(tok, split, form):
    made = dialogue_examples(tok, DialogueConfig(groups=20, seed=5, split=split, form=form))
    examples = list(made.examples)
    assert {e.template for e in examples} == {"Original", *CATEGORIES, "Paraphrase"}
    originals = {}
    flips = {c: 0 for c in CATEGORIES}
    for e in examples:
        place, yes = _replay_gold(e.meta)
        if form == "cloze":
            assert place is not None and e.correct == " " + place, e.prompt
            assert e.foil != e.correct and e.foil.strip() in e.meta["mentions"] + [m for m in ALL_PLACES]
            gold = place
        else:
            assert e.correct == (" yes" if yes else " no") and e.foil == (" no" if yes else " yes")
            gold = yes
        if e.template == "Original":
            originals[e.group] = gold
            assert e.meta["effect"] is None
        else:  # flip / invariant exactly as the replay says
            assert e.meta["effect"] == ("Flip" if gold != originals[e.group] else "Invariant"), e.template
            flips[e.template] = flips.get(e.template, 0) + (e.meta["effect"] == "Flip")
        if form == "cloze" and e.meta["effect"] == "Flip":  # the foil of a flip: the original's answer
            assert e.foil == " " + originals[e.group]
    for c in ("Negation", "Variable Substitution", "Variable Swap"):
        assert flips[c] > 0, c  # the world makes flips of these, not only invariants
    assert flips["Injecting Inconsistent Data"] == flips["Paraphrase"] == 0  # invariant by construction


def test_yesno_connective_and_quantifier_flips_are_open_facts_scored_no(tok):
    made = dialogue_examples(tok, DialogueConfig(groups=40, seed=2, form="yesno"))
    opened = [e for e in made.examples if e.template in ("Quantifier Change", "Logical Connective Change")]
    flips = [e for e in opened if e.meta["effect"] == "Flip"]
    assert flips and all(e.correct == " no" for e in flips)  # from a known yes to "cannot be concluded"
    for e in flips:
        assert _replay_gold(e.meta)[0] is None  # the place is open in the replay too


def test_world_semantics_by_hand():
    ev = [
        Event("put", ("Ann",), ("key",), place="drawer"),
        Event("take", ("Bob",), ("key",)),
        Event("give", ("Bob",), ("key",), recipient="Ann"),
        Event("drop", ("Ann",), place="box"),
    ]
    assert tracking.place_of(ev, "key") == "box" and tracking.previous_place(ev, "key") == "drawer"
    assert tracking.place_of(ev[:3], "key") is None  # in Ann's hands: no place
    shuttle = Event("shuttle", ("Ann",), ("key",), place="bag", source="box", times=3)
    assert tracking.place_of([*ev, shuttle], "key") == "bag"
    assert tracking.place_of([*ev, shuttle.with_(times=2)], "key") == "box"
    either = Event("move", ("Ann",), ("key", "pen"), place="jar", object_join="or")
    assert tracking.simulate([*ev, either])["key"] == {"box", "jar"}
    assert not tracking.is_at([*ev, either], "key", "jar") and tracking.is_at(
        [*ev, either.with_(object_join="and")], "key", "jar"
    )
    assert tracking.place_of([*ev, Event("move", ("Ann",), ("key",), place="jar", negated=True)], "key") == "box"
    with pytest.raises(ValueError, match="give to someone else"):
        Event("give", ("Ann",), ("key",), recipient="Ann")


# ---- tokens, determinism, splits -----------------------------------------------------------------


def test_answers_are_single_tokens_and_the_untokenisable_place_is_left_out(tok):
    assert n_tokens(tok, " " + LEFT_OUT) > 1
    for form in ("cloze", "yesno"):
        for e in dialogue_examples(tok, DialogueConfig(groups=12, seed=0, form=form)).examples:
            assert n_tokens(tok, e.correct) == n_tokens(tok, e.foil) == 1
            assert LEFT_OUT not in e.meta["mentions"]


def test_a_tokenizer_without_enough_single_token_places_is_a_clear_error():
    few = _bpe(["drawer", "box", "garage"], "few-places-bpe")
    with pytest.raises(DialogueError, match=r"tokenizer 'few-places-bpe' has only 2 of the 12 train places"):
        dialogue_examples(few, DialogueConfig(groups=2))
    with pytest.raises(DialogueError, match=r"' cupboard' is not one token of the tokenizer 'few-places-bpe'"):
        require_single_token(few, " cupboard", "the correct answer")


def _real_tokenizer(name: str):
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(name)
    except (OSError, ValueError) as e:
        pytest.skip(f"tokenizer {name} is not available offline: {e}")


@pytest.mark.parametrize("name", ["openai-community/gpt2", "/root/.cache/interp/models/gemma-3-270m"])
def test_answers_are_single_tokens_of_real_tokenizers(name):
    real = _real_tokenizer(name)
    for split in ("train", "heldout"):
        for e in dialogue_examples(real, DialogueConfig(groups=4, seed=1, split=split)).examples:
            assert len(real(e.correct, add_special_tokens=False)["input_ids"]) == 1
            assert len(real(e.foil, add_special_tokens=False)["input_ids"]) == 1


def test_train_and_heldout_families_and_words_are_disjoint(tok):
    tr, he = render.WORDS["train"], render.WORDS["heldout"]
    assert not set(tr.people) & set(he.people) and not set(tr.objects) & set(he.objects)
    assert not set(tr.places) & set(he.places)
    fams = {s: [render.FAMILIES[n] for n in render.family_names(s)] for s in render.SPLITS}
    assert all(fams.values())
    surface = {s: {x for f in fams[s] for x in (*f.closings, *f.questions, *f.small_talk)} for s in render.SPLITS}
    assert not surface["train"] & surface["heldout"]
    frames = {
        s: {p for f in fams[s] for k, ps in f.phrasings.items() if k != "chat" for p in ps} for s in render.SPLITS
    }
    assert not frames["train"] & frames["heldout"]
    for split in render.SPLITS:
        words = render.WORDS[split]
        for e in dialogue_examples(tok, DialogueConfig(groups=8, seed=3, split=split)).examples:
            assert e.meta["family"] in render.family_names(split) and e.meta["split"] == split
            assert e.meta["object"] in words.objects and set(e.meta["mentions"]) <= set(words.places)
            people = {a for ev in e.meta["events"] for a in ev["agents"]}
            assert people <= set(words.people)


def test_alterations_are_minimal_and_the_paraphrase_rewords(tok):
    ex = list(dialogue_examples(tok, DialogueConfig(groups=10, seed=4)).examples)
    orig = {e.group: e for e in ex if e.template == "Original"}
    for e in ex:
        a, b = orig[e.group].prompt.splitlines(), e.prompt.splitlines()
        if e.template in ("Negation", "Quantity Change", "Quantifier Change", "Logical Connective Change"):
            assert len(a) == len(b) and sum(x != y for x, y in zip(a, b)) == 1, e.template
        if e.template == "Injecting Inconsistent Data":
            assert len(b) == len(a) + 1 and all(line in b for line in a)
        if e.template == "Paraphrase":
            assert e.prompt != orig[e.group].prompt and e.meta["events"] == orig[e.group].meta["events"]


def test_cli_is_deterministic_and_its_file_is_a_contrast_task(tok, tmp_path, capsys):
    from interp.cli import main
    from interp.tasks import ContrastTask

    folder = tmp_path / "tok"
    tok.save_pretrained(folder)
    paths = [tmp_path / f"d{k}.jsonl" for k in range(3)]
    for path, seed in zip(paths, (7, 7, 8)):
        assert (
            main(["data", "dialogue", "--model", str(folder), "--n", "6", "--seed", str(seed), "--out", str(path)]) == 0
        )
    assert paths[0].read_bytes() == paths[1].read_bytes() != paths[2].read_bytes()
    examples = load_contrast(paths[0])
    assert {e.template for e in examples} >= {"Original", "Negation", "Paraphrase"}
    assert all(isinstance(e.group, str) and e.meta["category"] == e.template for e in examples)
    task = ContrastTask.build(folder, paths[0])
    assert [int(i) for i in task.correct_ids] == [
        tok(e.correct, add_special_tokens=False)["input_ids"][0] for e in examples
    ]
    csv, base = tmp_path / "yn.csv", tmp_path / "base.csv"
    assert 0 == main(["data", "dialogue", "--model", str(folder), "--n", "4", "--form", "yesno", "--out", str(tmp_path / "yn.jsonl"),
          "--csv", str(csv), "--baselines", str(base)])  # fmt: skip
    from interp.datasets.pragworld import load_pragworld

    rows = load_pragworld(csv).rows
    assert rows["group"].nunique() == 4 and set(rows["effect"].dropna()) <= {"flip", "invariant"}
    assert base.is_file()
    bad = ["data", "dialogue", "--model", str(folder), "--out", str(tmp_path / "x.jsonl"), "--csv", str(csv)]
    assert main(bad) == 2 and "needs --form yesno" in capsys.readouterr().err


# ---- heuristics ----------------------------------------------------------------------------------


def test_heuristics_by_hand():
    from interp.datasets.contrast import ContrastExample
    from interp.metrics.dialogue_heuristics import heuristic_frame, heuristic_places, heuristic_table

    meta = {"mentions": ["drawer", "box", "drawer", "jar"], "initial": "drawer", "form": "cloze"}
    got = heuristic_places(meta, "k")
    assert (got["recent"], got["first"], got["initial"]) == ("jar", "drawer", "drawer")
    assert got["random"] in {"drawer", "box", "jar"} and heuristic_places(meta, "k") == got
    ex = [
        ContrastExample("p", " jar", " box", group="g0", template="Original", meta={**meta, "category": "Original"}),
        ContrastExample("p", " box", " jar", group="g0", template="Negation", meta={**meta, "category": "Negation", "effect": "Flip"}),
        ContrastExample("p", " jar", " box", group="g1", template="Original", meta={**meta, "category": "Original"}),
        ContrastExample("p", " yes", " no", group="g2", template="Original",
                        meta={**meta, "category": "Original", "form": "yesno", "ask_place": "jar"}),
    ]  # fmt: skip
    frame = heuristic_frame(ex)
    assert frame["recent_right"].tolist() == [True, False, True, True] and frame["recent_foil"].tolist()[1]
    table = heuristic_table(frame, extra={"model": lambda f: [True, True, False, True]}).set_index("subset")
    assert table.loc["all", "recent_accuracy"] == 0.75 and table.loc["all", "recent_robust"] == pytest.approx(2 / 3)
    assert table.loc["flip", "recent_foil_rate"] == 1.0 and table.loc["all", "model_robust"] == pytest.approx(2 / 3)
    assert table.loc["all", "first_accuracy"] == 0.0
    with pytest.raises(ValueError, match="meta\\['mentions'\\]"):
        heuristic_places({})
    json.dumps(frame.to_dict("records"))  # plain values: the frame can be saved beside a model's


def test_train_and_heldout_of_one_seed_share_no_structure(tok):
    """Kim & Schuster's control: no shared initial-state signature between train and test."""

    def shapes(split):
        ex = dialogue_examples(tok, DialogueConfig(groups=6, seed=0, split=split)).examples
        return [tuple(ev["kind"] for ev in e.meta["events"]) for e in ex if e.template == "Original"]

    assert shapes("train") != shapes("heldout")


@pytest.mark.parametrize("split", ["train", "heldout"])
def test_the_most_recent_place_does_not_answer_the_items(tok, split):
    """The shortcut a reader without a world model takes — "the place said last" — is right on
    about a third of the items, near the random choice among the places said, because half the
    conversations end with a distractor naming another place (``natural.TAIL``); without it the
    shortcut answered 60 % (measured on SmolLM2's tokenizer, 200 groups)."""
    from interp.metrics.dialogue_heuristics import heuristic_frame, heuristic_table

    examples = list(dialogue_examples(tok, DialogueConfig(groups=80, seed=3, split=split)).examples)
    table = heuristic_table(heuristic_frame(examples)).set_index("subset")
    assert table.loc["all", "recent_accuracy"] < 0.45, table
    originals = [e for e in examples if e.meta["category"] == "Original"]
    last_is_gold = sum(e.meta["mentions"][-1] == e.meta["gold_place"] for e in originals) / len(originals)
    assert last_is_gold < 0.45  # by hand from the meta: the place said last is mostly not the answer
