"""Long sweeps survive an interruption (``interp.analysis.engines.unitstore``) and size their batch from a
memory budget (``interp.analysis.engines.budget``).

The oracle of every resume test is the same sweep run without interruption into another folder:
a run interrupted (Ctrl-C in the process, SIGINT or SIGKILL of a subprocess at a random moment)
and rerun must end with the same ``sweep.csv`` (to 1e-6) and the same verdicts. A rerun with
another config or model is refused naming the difference; a damaged unit is redone, not trusted;
an unwritable ``--out`` fails before the work starts."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import liven

from interp.datasets.pragworld import label_prompt, load_pragworld, write_pragworld_csv

ROOT = Path(__file__).resolve().parents[1]
CTX = [
    "A: did you put the apples in the box\nB: I did",
    "A: where is Bob\nB: he went to the garden",
    "A: are all the pears in the basket\nB: some are",
    "A: is the door open\nB: it is closed now",
    "A: did Mary call you\nB: she called twice",
    "A: is there milk left\nB: a little in the fridge",
]


@pytest.fixture(scope="module")
def data_csv(tmp_path_factory):
    rows = []
    for g, ctx in enumerate(CTX):
        base = dict(question="is it yes?", target="context")
        rows.append(dict(base, context=ctx, gold=g % 2, altered=False, target="none", category=None, effect=None))
        rows.append(dict(base, context=ctx + " not", gold=1 - g % 2, altered=True, category="negation", effect="flip"))
        rows.append(
            dict(
                base,
                context=ctx.replace("A:", "C:") + " then",
                gold=g % 2,
                altered=True,
                category="variable_substitution",
                effect="invariant",
            )
        )
    return write_pragworld_csv(pd.DataFrame(rows), tmp_path_factory.mktemp("resume") / "tiny.csv")


def _model(data_csv, folder, seed):
    from interp.models import ModelConfig, build_gpt2
    from interp.models.checkpoint import _word_level_tokenizer
    from interp.worlds import Vocab

    data = load_pragworld(data_csv)
    words = {"yes", "no"}
    for c, q in zip(data.rows["context"], data.rows["question"]):
        words |= set(label_prompt(c, q).split())
    vocab = Vocab.for_tokens(sorted(words))
    liven(
        build_gpt2(vocab, ModelConfig(n_layer=3, d_model=32, n_head=2, n_ctx=64, seed=seed)), 3 + seed
    ).save_pretrained(folder)
    _word_level_tokenizer(vocab).save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def model_dir(data_csv, tmp_path_factory):
    return _model(data_csv, tmp_path_factory.mktemp("resume_model") / "best", 0)


@pytest.fixture(scope="module")
def other_model(data_csv, tmp_path_factory):
    """The same architecture, other weights."""
    return _model(data_csv, tmp_path_factory.mktemp("resume_other") / "best", 1)


def _sweep(model, data, out, **kw):
    from interp.analysis.engines.unitstore import LongRun
    from interp.jobs.sweep import run_sweep

    kw.setdefault("batch_size", 4)
    control = LongRun(overwrite=kw.pop("overwrite", False), progress=False)
    return run_sweep(model, data=data, out=out, n_boot=200, control=control, **kw)


def _same_files(a: Path, b: Path) -> None:
    """The oracle: an uninterrupted run's files (numbers to 1e-6, verdicts equal)."""
    fa, fb = pd.read_csv(a / "sweep.csv"), pd.read_csv(b / "sweep.csv")
    assert list(fa.columns) == list(fb.columns) and len(fa) == len(fb)
    for c in fa.columns:
        if pd.api.types.is_numeric_dtype(fa[c]):
            np.testing.assert_allclose(fa[c].to_numpy(), fb[c].to_numpy(), atol=1e-6, rtol=0, err_msg=c)
        else:
            assert fa[c].astype(str).tolist() == fb[c].astype(str).tolist(), c
    for name in sorted(p.name for p in a.glob("verdicts*.json")):
        va, vb = json.loads((a / name).read_text()), json.loads((b / name).read_text())
        assert [r["verdict"] for r in va["layers"]] == [r["verdict"] for r in vb["layers"]], name
    if (a / "agreement.csv").exists():
        assert pd.read_csv(a / "agreement.csv").equals(pd.read_csv(b / "agreement.csv"))


class _Stop(KeyboardInterrupt):
    pass


def _interrupt_and_resume(model, data, tmp_path, monkeypatch, capsys, **kw):
    """Run uninterrupted; run again into another folder with Ctrl-C after the 5th unit; rerun; compare."""
    from interp.analysis.engines import unitstore

    whole = _sweep(model, data, tmp_path / "whole", **kw)
    assert whole.info["units"]["ran"] == whole.info["units"]["units"] > 5

    real_put, calls = unitstore.UnitStore.put, [0]

    def put_then_stop(self, key, result):  # Ctrl-C right after the 5th unit is written
        real_put(self, key, result)
        calls[0] += 1
        if calls[0] == 5:
            raise _Stop()

    monkeypatch.setattr(unitstore.UnitStore, "put", put_then_stop)
    with pytest.raises(KeyboardInterrupt):
        _sweep(model, data, tmp_path / "cut", **kw)
    err = capsys.readouterr().err
    assert "interrupted: 5 of" in err and "rerun the same command" in err
    assert not (tmp_path / "cut" / "sweep.csv").exists()
    monkeypatch.setattr(unitstore.UnitStore, "put", real_put)

    again = _sweep(model, data, tmp_path / "cut", **kw)
    assert again.info["units"]["resumed"] == 5 and again.info["units"]["ran"] == whole.info["units"]["units"] - 5
    assert "resuming: 5 of" in capsys.readouterr().err
    _same_files(tmp_path / "whole", tmp_path / "cut")


@pytest.mark.parametrize(
    "method,ablation",
    [
        ("reuse", "zero,resample"),  # draws=1 below, fast
        pytest.param("reuse", "zero,mean,resample,scale", marks=pytest.mark.slow),
        pytest.param("loop", "zero,mean,resample", marks=pytest.mark.slow),
        pytest.param("prefix", "zero,mean,scale", marks=pytest.mark.slow),
        pytest.param("batched", "zero,scale", marks=pytest.mark.slow),
    ],
)
def test_ctrl_c_then_rerun_equals_an_uninterrupted_run(
    model_dir, data_csv, tmp_path, monkeypatch, capsys, method, ablation
):
    kw = dict(method=method, ablation=ablation, scales="0.5,0", layers=[0, 2], draws=1 if method == "reuse" else 2)
    if method == "prefix":  # a prefix unit is PREFIX_UNIT_BATCHES batches: batches of one row keep units small
        kw["batch_size"] = 1
    _interrupt_and_resume(model_dir, data_csv, tmp_path, monkeypatch, capsys, **kw)


@pytest.mark.slow
def test_contrast_sweep_resumes_to_equality(folders, ioi_file, tmp_path, monkeypatch, capsys):  # noqa: F811
    kw = dict(method="reuse", ablation="zero,mean", metric="logit-diff")
    _interrupt_and_resume(folders["llama"], ioi_file, tmp_path, monkeypatch, capsys, **kw)


from test_contrast import folders, ioi_file, tok  # noqa: E402,F401  (the contrast fixtures: a BPE tokenizer, tiny models)


def test_another_config_or_model_is_refused_naming_the_difference(model_dir, other_model, data_csv, tmp_path):
    from interp.analysis.engines.unitstore import ResumeMismatchError

    out = tmp_path / "out"
    first = _sweep(model_dir, data_csv, out, layers=[0, 1])
    with pytest.raises(ResumeMismatchError, match=r"config layers: \[0, 1\] in the folder, \[0, 2\] now.*--overwrite"):
        _sweep(model_dir, data_csv, out, layers=[0, 2])
    with pytest.raises(ResumeMismatchError, match="model weights"):
        _sweep(other_model, data_csv, out, layers=[0, 1])
    # the verdict rule is not part of the units: a rerun with another margin reads them all back
    again = _sweep(model_dir, data_csv, out, layers=[0, 1], min_effect=0.5)
    assert again.info["units"]["ran"] == 0 and again.info["units"]["resumed"] == first.info["units"]["units"]
    replaced = _sweep(model_dir, data_csv, out, layers=[0, 2], overwrite=True)
    assert replaced.info["units"]["resumed"] == 0
    _sweep(model_dir, data_csv, tmp_path / "fresh", layers=[0, 2])
    _same_files(tmp_path / "fresh", out)


def test_a_damaged_unit_is_redone_not_trusted(model_dir, data_csv, tmp_path):
    out = tmp_path / "out"
    whole = _sweep(model_dir, data_csv, tmp_path / "whole")
    _sweep(model_dir, data_csv, out)
    units = sorted((out / "units").glob("zero-*.csv"))
    assert len(units) == 5
    text = units[1].read_text().splitlines()
    units[1].write_text("\n".join(text[:-1]) + "\n")  # a row lost: a truncated file
    broken = units[2].read_text().replace("0.", "9.", 1)  # a digit changed, same row count
    units[2].write_text(broken)
    (out / "units" / units[3].name.replace(".csv", ".json")).write_text('{"rows": 4, "sha')  # a half-written record
    again = _sweep(model_dir, data_csv, out)
    assert again.info["units"]["redone"] == 3 and again.info["units"]["ran"] == 3
    assert again.info["units"]["units"] == whole.info["units"]["units"]
    _same_files(tmp_path / "whole", out)


def _default_sigint() -> None:
    """In the child: SIGINT's default action, as a terminal's Ctrl-C finds it (a parent started in
    the background by a shell ignores SIGINT, and its children would inherit that)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _cli(*args, **kw):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "CI": "1"}
    return subprocess.Popen(
        [sys.executable, "-m", "interp.cli", "sweep", *map(str, args)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_default_sigint,
        **kw,
    )


def test_unwritable_out_fails_before_the_work(model_dir, data_csv, tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder")
    p = _cli("--model", model_dir, "--data", data_csv, "--out", blocker / "sweep", "--batch-size", "2")
    out, err = p.communicate(timeout=300)
    assert p.returncode == 2, err
    assert "is not writable" in err and "choose another folder" in err
    p = _cli("--model", model_dir, "--data", data_csv, "--max-memory", "lots")
    _, err = p.communicate(timeout=300)
    assert p.returncode == 2 and "--max-memory must be a size" in err


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL])
def test_a_killed_cli_sweep_resumes_to_equality(model_dir, data_csv, tmp_path, sig):
    """SIGINT / SIGKILL at random moments of ``interp sweep`` in a subprocess (three times each),
    each followed by a rerun of the same command, until one finishes; its files equal an
    uninterrupted run's."""
    args = ["--model", model_dir, "--data", data_csv, "--method", "loop", "--ablation", "zero,resample"]
    args += ["--draws", "1", "--batch-size", "2", "--n-boot", "200"]
    whole = _cli(*args, "--out", tmp_path / "whole")
    _, err = whole.communicate(timeout=600)
    assert whole.returncode == 0, err
    rng = random.Random(int(sig))
    out = tmp_path / "cut"
    for _attempt in range(3):
        done = len(list((out / "units").glob("*-*.json")))
        p = _cli(*args, "--out", out)
        t0 = time.time()
        while len(list((out / "units").glob("*-*.json"))) <= done and p.poll() is None and time.time() - t0 < 300:
            time.sleep(0.05)  # this process has written a unit
        time.sleep(rng.uniform(0, 1.5))
        p.send_signal(sig)
        _, err = p.communicate(timeout=300)
        if p.returncode == 0 or (out / "sweep.csv").exists():
            break  # finished before the signal (or the signal came while the finished process exited)
        if sig == signal.SIGINT:
            assert p.returncode == 130 and "rerun the same command" in err, err
        leftovers = [q.name for q in (out / "units").iterdir() if ".tmp" in q.name]
        assert all(q.startswith(".") for q in leftovers)  # a temporary file at worst, never a unit's name
    p = _cli(*args, "--out", out)
    _, err = p.communicate(timeout=600)
    assert p.returncode == 0, err
    _same_files(tmp_path / "whole", out)


def test_batch_from_the_budget_and_explicit_batch_wins(model_dir, data_csv, tmp_path, capsys):
    from interp.analysis.engines.budget import choose_batch, parse_memory, row_bytes
    from interp.models import load_bridge

    bridge = load_bridge(model_dir)
    per = row_bytes(bridge.cfg, 20, 3, "reuse")
    # a hand count of one row of 20 tokens, d_model 32, 2 heads, d_mlp 128, float32, 3 cached layers
    vocab = int(bridge.cfg.d_vocab)
    assert per == 4 * (8 * 20 * 32 + 2 * 2 * 20 * 20 + 3 * 20 * 128) + 4 * 3 * 20 * vocab + 4 * 4 * 3 * 20 * 32
    plan = choose_batch(bridge, width=20, n_rows=1000, swept=3, method="reuse", max_memory=10 * per)
    assert plan.batch_size == 10 and plan.budget == 10 * per and plan.estimate <= plan.budget
    assert choose_batch(bridge, width=20, n_rows=1000, swept=3, method="reuse", batch_size=7).batch_size == 7
    big = choose_batch(bridge, width=20, n_rows=1000, swept=3, method="reuse", max_memory="100GB")
    assert big.batch_size == 4096 // 20 and big.capped  # a CPU gains nothing past CPU_TOKENS
    assert parse_memory("30%", free=1000) == 300 and parse_memory("2MiB") == 2 * 2**20
    with pytest.raises(ValueError, match="--max-memory must be a size"):
        parse_memory("3 apples")
    run = _sweep(model_dir, data_csv, tmp_path / "auto", batch_size=None, method="prefix")
    assert run.info["batch"]["source"].startswith("50 % of the") and run.info["batch"]["batch_size"] >= 1
    # a prefix unit holds several batches: rows share prefixes only inside a unit
    from interp.jobs.sweep_units import PREFIX_UNIT_BATCHES

    assert run.info["units"]["unit_rows"] == PREFIX_UNIT_BATCHES * run.info["batch"]["batch_size"]
    assert (
        json.loads((tmp_path / "auto" / "run.json").read_text())["batch"]["batch_size"]
        == run.info["batch"]["batch_size"]
    )
    assert "batch: " in capsys.readouterr().err


def _same_maps(a: Path, b: Path) -> None:
    """The oracle of a patching run: every map's cells equal an uninterrupted run's (to 1e-6)."""
    for comp in ("resid_pre", "heads"):
        fa, fb = pd.read_csv(a / f"patching_{comp}.csv"), pd.read_csv(b / f"patching_{comp}.csv")
        assert list(fa.columns) == list(fb.columns) and len(fa) == len(fb), comp
        for c in fa.columns:
            if pd.api.types.is_numeric_dtype(fa[c]):
                np.testing.assert_allclose(fa[c].to_numpy(), fb[c].to_numpy(), atol=1e-6, rtol=0, err_msg=(comp, c))
            else:
                assert fa[c].astype(str).tolist() == fb[c].astype(str).tolist(), (comp, c)


def test_an_interrupted_patching_run_resumes_to_equal_maps(folders, ioi_file, tmp_path, monkeypatch, capsys):  # noqa: F811
    """Activation patching writes each finished chunk's maps (one unit per map) and a rerun reads
    them back: Ctrl-C between the two maps of the third chunk keeps two chunks, and the rerun ends
    with the maps of an uninterrupted run; a chunk whose second map was not written is redone."""
    from interp.analysis.engines import unitstore

    kw = dict(kind="activation-patching", batch_size=2)
    whole = _sweep(folders["llama"], ioi_file, tmp_path / "whole", **kw)
    assert whole.info["units"]["ran"] == whole.info["units"]["units"] >= 3

    real_put, calls = unitstore.UnitStore.put, [0]

    def put_then_stop(self, key, result):
        real_put(self, key, result)
        calls[0] += 1
        if calls[0] == 5:  # chunk 3's first map written, its second not
            raise _Stop()

    monkeypatch.setattr(unitstore.UnitStore, "put", put_then_stop)
    with pytest.raises(KeyboardInterrupt):
        _sweep(folders["llama"], ioi_file, tmp_path / "cut", **kw)
    assert "interrupted: 2 of" in capsys.readouterr().err
    assert not (tmp_path / "cut" / "patching_heads.csv").exists()
    monkeypatch.setattr(unitstore.UnitStore, "put", real_put)

    again = _sweep(folders["llama"], ioi_file, tmp_path / "cut", **kw)
    units = again.info["units"]
    assert units["resumed"] == 2 and units["ran"] == whole.info["units"]["units"] - 2
    assert "resuming:" in capsys.readouterr().err
    _same_maps(tmp_path / "whole", tmp_path / "cut")
    with pytest.raises(unitstore.ResumeMismatchError, match="method"):
        _sweep(
            folders["llama"], ioi_file, tmp_path / "cut", kind="activation-patching", batch_size=2, method="attribution"
        )


def test_an_interrupted_direct_effect_sweep_resumes_to_equality(folders, ioi_file, tmp_path, monkeypatch, capsys):  # noqa: F811
    """Direct-effect patching is cut into units of pairs like the MLP sweep: Ctrl-C after the 2nd
    unit, a rerun reads two units back and ends with an uninterrupted run's files."""
    from interp.analysis.engines import unitstore

    kw = dict(kind="direct-effect", batch_size=2, layers=[0, 1])
    whole = _sweep(folders["llama"], ioi_file, tmp_path / "whole", **kw)
    assert whole.info["units"]["ran"] == whole.info["units"]["units"] >= 3

    real_put, calls = unitstore.UnitStore.put, [0]

    def put_then_stop(self, key, result):
        real_put(self, key, result)
        calls[0] += 1
        if calls[0] == 2:
            raise _Stop()

    monkeypatch.setattr(unitstore.UnitStore, "put", put_then_stop)
    with pytest.raises(KeyboardInterrupt):
        _sweep(folders["llama"], ioi_file, tmp_path / "cut", **kw)
    assert "interrupted: 2 of" in capsys.readouterr().err
    monkeypatch.setattr(unitstore.UnitStore, "put", real_put)
    again = _sweep(folders["llama"], ioi_file, tmp_path / "cut", **kw)
    assert again.info["units"]["resumed"] == 2
    _same_files(tmp_path / "whole", tmp_path / "cut")
