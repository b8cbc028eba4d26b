"""The run report (interp/viz/report/) and its CircuitsVis views (interp/viz/circuits.py).

Two levels: the HTML's contents, checked as text (tables, inline images, CircuitsVis containers
closed and unique, the bundle once, nothing to fetch); and a real browser — Debian's headless
Chromium, driven over the DevTools protocol on a pipe (standard library only), with every
network request refused — that opens ``report.html`` from disk and checks what rendered: the
tables, the decoded images, the CircuitsVis React roots with children, no console errors and no
network request. It keeps a screenshot in ``tests/artifacts/`` (ignored by git).

``.ci/run`` installs ``chromium`` when it is missing; elsewhere the browser test skips, saying so.
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import re
import select
import shutil
import subprocess
import time
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
from conftest import REPO, liven

ARTIFACTS = REPO / "tests" / "artifacts"
N_TRAIN_LOG = 50
MAX_ROWS = 20
SEQUENCES = 2
#: the story keys ``interp run`` writes (world-model table, planted vs found, repair), hand-made
STORY = {
    "world_model": {
        "settings": {"pairs": 20, "depth": 3, "estimator": "exact"},
        "table": [
            {
                "model": "trained model",
                "next_token": 0.95,
                "next_token_se": 0.01,
                "probe": 0.7,
                "probe_se": 0.02,
                "compression_precision": 0.25,
                "compression_precision_se": 0.05,
                "distinction_precision": 0.4,
                "distinction_precision_se": 0.05,
                "distinction_recall": 0.3,
                "distinction_recall_se": 0.04,
            },
            {
                "model": "true world model",
                "next_token": 1.0,
                "next_token_se": 0.0,
                "compression_precision": 1.0,
                "distinction_precision": 1.0,
                "distinction_recall": 1.0,
            },
        ],
    },
    "plant": {
        "layers": [1],
        "corruption": "random_turns",
        "share": 0.3,
        "steps": 150,
        "unplanted_sweep": {
            "harmful": [],
            "layers": [
                {"layer": 0, "effect": 1.2, "ci": [1.1, 1.3], "verdict": "useful"},
                {"layer": 1, "effect": 0.002, "ci": [0.001, 0.003], "verdict": "useful"},
            ],
        },
    },
    "layers": {
        "mlp_zero": {
            "kind": "mlp-zero",
            "n_examples": 12,
            "layers": [
                {"layer": 0, "effect": 0.6, "ci": [0.5, 0.7], "verdict": "useful"},
                {"layer": 1, "effect": -0.378, "ci": [-0.39, -0.367], "verdict": "harmful"},
            ],
        },
        "seed": 0,
    },
    "fix": {
        "layers": [1],
        "found": [1],
        "why": "the sweep's harmful layers",
        "beta": 0.001,
        "steps": 200,
        "seeds": [0],
        "comparison": [
            {
                "metric": "heldout_loss",
                "layer": None,
                "before": 1.78,
                "before_lo": 1.75,
                "before_hi": 1.81,
                "zeroed": 1.402,
                "zeroed_lo": 1.37,
                "zeroed_hi": 1.44,
                "plain": 1.394,
                "plain_lo": 1.36,
                "plain_hi": 1.43,
                "hls": 1.391,
                "hls_lo": 1.36,
                "hls_hi": 1.43,
                "unplanted": 1.400,
                "unplanted_lo": 1.37,
                "unplanted_hi": 1.43,
            }
        ],
        "closest": {
            "heldout_loss": {"closest": ["zeroed"], "gap": {"zeroed": 0.002, "plain": -0.006}},
            "next_token_position": {"closest": ["hls"], "gap": {"zeroed": 0.002, "hls": 0.001}},
        },
        "seconds": 1.0,
    },
}


# ---------------------------------------------------------------- a tiny run folder


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory, tiny_city, tiny_model_config):
    """A run folder as ``interp run`` + ``interp sweep`` leave it, from a tiny GPT-2: results.json,
    a 50-row training log, data/, best/, an MLP zero-out sweep and an activation-patching sweep;
    no next_token.csv (the report must say so)."""
    import pandas as pd

    from interp.jobs.sweep import run_sweep
    from interp.models import build_gpt2, save_checkpoint
    from interp.results import write_json
    from interp.worlds.io import write_sequences

    root = tmp_path_factory.mktemp("report") / "tiny-run"
    seqs = tiny_city.generate(60, np.random.default_rng(0))
    write_sequences(root / "data" / "train.txt", seqs[:40])
    write_sequences(root / "data" / "test.txt", seqs[40:])
    save_checkpoint(liven(build_gpt2(tiny_city.vocab, tiny_model_config), 0), tiny_city, root / "best")
    write_json(
        root / "results.json",
        {
            "config": {"name": "tiny-run", "model": {"n_layer": 2, "d_model": 32}},
            "world": tiny_city.describe(),
            "train": {"steps": N_TRAIN_LOG * 10, "best_eval_loss": 1.23456789},
            "next_token": {"next_token_position": 0.987654, "sequences": 20},
            **STORY,
        },
    )
    pd.DataFrame({"step": np.arange(1, N_TRAIN_LOG + 1) * 10, "loss": np.linspace(3, 1, N_TRAIN_LOG)}).to_csv(
        root / "train_log.csv", index=False
    )
    run_sweep(root / "best", kind="mlp-zero", n=12, n_boot=200, log=open(os.devnull, "w"))
    run_sweep(root / "best", kind="activation-patching", n=20, length=6, edit_at=2, log=open(os.devnull, "w"))
    return root


@pytest.fixture(scope="module")
def report(run_dir):
    from interp.viz.report import write_report

    path = write_report(run_dir, max_rows=MAX_ROWS, n_sequences=SEQUENCES)
    return path, path.read_text()


class _Refs(HTMLParser):
    """Every tag, and every src/href/srcset/poster/data attribute value of the page."""

    def __init__(self):
        super().__init__()
        self.tags: list[str] = []
        self.refs: list[tuple[str, str, str]] = []
        self.ids: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        for k, v in attrs:
            if k in ("src", "href", "srcset", "poster", "data", "action", "formaction") and v is not None:
                self.refs.append((tag, k, v))
            if k == "id":
                self.ids.append(v)


def _pngs(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*.png"))


# ---------------------------------------------------------------- the HTML, as text


def test_report_holds_tables_images_and_circuitsvis(run_dir, report):
    path, text = report
    assert path == run_dir / "report.html"
    # sections in order: summary first, sweeps, CircuitsVis, checkpoints last
    heads = re.findall(r"<h2>(.*?)</h2>", text)
    assert heads[:3] == ["Findings", "Contents", "Not in this run"]
    order = [
        next(i for i, h in enumerate(heads) if h.startswith(p))
        for p in (
            "Summary",
            "Results of the run",
            "Sweep: mlp-zero",
            "Sweep: activation-patching",
            "Activation patching (CircuitsVis)",
            "Attention patterns (CircuitsVis)",
            "Checkpoints and data",
        )
    ]
    assert order == sorted(order), heads
    # results.json: summary values, the config folded away
    assert "1.235" in text and "0.9877" in text and "<summary>the run's configuration</summary>" in text
    # the training log: a table cut to MAX_ROWS rows, with the note
    assert "Training log" in text
    assert f"{N_TRAIN_LOG - MAX_ROWS} more rows (first {MAX_ROWS} of {N_TRAIN_LOG} shown)" in text
    # every PNG of the folder, inlined
    pngs = _pngs(run_dir)
    assert {p.name for p in pngs} == {"layers.png", "patching_resid_pre.png", "patching_heads.png"}
    assert text.count('src="data:image/png;base64,') == len(pngs)
    for p in pngs:
        assert base64.b64encode(p.read_bytes()).decode()[:200] in text
    # what is missing is said, not raised
    assert "next_token.csv (next-token test)" in text
    # CircuitsVis: 2 patching views + sequences × layers attention views, closed containers, unique ids
    containers = re.findall(r'<div id="(interp-cv-[^"]+)" class="circuitsvis" data-component="(\w+)"[^>]*></div>', text)
    names = [n for _, n in containers]
    assert names.count("ColoredTokensMulti") == 2
    assert names.count("AttentionPatterns") == SEQUENCES * 2
    ids = [i for i, _ in containers]
    assert len(set(ids)) == len(ids)
    for i in ids:
        assert text.count(f'CircuitsVis.render("{i}"') == 1
    assert not re.search(r"<div[^>]*/>", text), "a self-closing <div/> swallows what follows it"
    # the bundle once, inline, no CDN
    assert text.count("var CircuitsVis=") == 1
    assert "unpkg.com" not in text and "cdn_src" not in text
    assert "sourceMappingURL" not in text


def test_report_leads_with_the_findings(report):
    """The first section: world-model table, planted vs found, repair, each led by a sentence."""
    _, text = report
    findings = text[text.index('<section id="s-findings">') : text.index("<nav>")]
    assert text.index('<section id="s-findings">') < text.index("<nav>") < text.index('id="s-summary"')
    assert re.findall(r"<h3>(.*?)</h3>", findings) == ["World model", "Layer verdicts: planted vs found", "Repair"]
    assert "The trained model: next-token 0.95, probe 0.7, compression prec. 0.25" in findings
    assert "0.95 [0.927, 0.966]" in findings  # Wilson, n_eff = 0.95 · 0.05 / 0.01² = 475 (±1.96 SE: [0.93, 0.97])
    assert "Harm was planted in the MLP of layer 1 (random_turns, share 0.3, 150 steps" in findings
    assert "calls layer 1 harmful — exactly the planted layers — and layer 0 useful" in findings
    assert "On the unplanted model it calls no layer harmful." in findings
    assert "harmful (-0.378 [-0.39, -0.367])" in findings
    assert "Held-out loss: before 1.78 [1.75, 1.81]; zeroed at inference 1.4 [1.37, 1.44]" in findings
    assert (
        "Closest to the unplanted model: zeroed at inference on 1 of 2 metrics, HLS β=0.001 on 1 of 2 "
        "metrics (ties counted for each)."
    ) in findings


def test_findings_say_what_was_missed_and_skipped():
    from interp.viz.report import findings_html

    story = json.loads(json.dumps(STORY))
    story["layers"]["mlp_zero"]["layers"][1]["verdict"] = "inconclusive"
    story["layers"]["mlp_zero"]["layers"][0]["verdict"] = "harmful"
    story["fix"] = {
        "layers": [],
        "skipped": True,
        "why": "the MLP zero-out sweep found no harmful layer: nothing to suppress, HLS skipped",
    }
    out = findings_html(story)
    assert "calls layer 0 harmful — missed layer 1; false alarm on layer 0 —" in out
    assert "The others: layer 1 inconclusive." in out
    assert "per-layer percentile interval over rows (the interp.layer_verdicts/1 rule)" in out  # no rule recorded
    assert "nothing to suppress, HLS skipped." in out and "Closest" not in out
    story["layers"]["mlp_zero"]["verdict_rule"] = {
        "min_effect": 0.01,
        "min_effect_reason": "a 1 % change of perplexity",
        "per_layer": False,
        "confidence": 0.95,
        "resample": "groups",
        "groups": "each held-out sequence its own group",
        "n_groups": 200,
    }
    out = findings_html(story)
    assert (
        "95 % intervals, simultaneous over all layers; 200 groups resampled (each held-out sequence its own "
        "group). Harmful: removing the MLP lowers the loss by more than the margin 0.01"
    ) in out
    assert findings_html({"train": {}}) == ""


def test_report_needs_nothing_from_the_network(report):
    """No <link>, no external src/href, no <script src>, no <base>, no CSS url()/@import: every
    reference is a data: URL or an in-page anchor. (The inlined CircuitsVis bundle holds URL
    *strings* — React's error-decoder link, XML namespaces — that are never fetched; the browser
    test checks that no request leaves the page.)"""
    _, text = report
    parser = _Refs()
    parser.feed(text)
    assert "link" not in parser.tags and "base" not in parser.tags and "iframe" not in parser.tags
    for tag, attr, value in parser.refs:
        assert value.startswith("data:") or value.startswith("#"), (tag, attr, value[:80])
    style = "".join(re.findall(r"<style>(.*?)</style>", text, re.S))
    assert "url(" not in style and "@import" not in style
    assert len(parser.ids) == len(set(parser.ids)), "duplicate element ids"


def test_report_of_an_empty_folder_says_what_is_missing(tmp_path):
    from interp.viz.report import write_report

    path = write_report(tmp_path)
    text = path.read_text()
    for what in ("results.json", "train_log.csv", "layer sweeps", "checkpoints", "attention patterns"):
        assert what in text, what
    assert "CircuitsVis" not in text.split("</head>")[0]  # no bundle when there is nothing to draw
    with pytest.raises(FileNotFoundError):
        write_report(tmp_path / "nope")


def test_circuitsvis_containers_are_closed_and_several_fit_one_page(tmp_path):
    """CircuitsVis's local_src writes ``<div id=…/>`` and a module script with the whole bundle;
    our Component closes the container, keeps the bundle once, escapes '<' in the props."""
    from circuitsvis.tokens import colored_tokens

    from interp.viz.circuits import Component, display_token, page, write_standalone

    raw = colored_tokens(["a", "</script>"], [0.1, 0.9])
    assert re.match(r'\s*<div id="circuits-vis-[^"]+"[^>]*/>', raw.local_src), "CircuitsVis changed its container"
    comps = [
        Component.from_rendered(
            colored_tokens(["a", "</script>", "b"], [0.1, 0.9, 0.5]), f"interp-cv-t{i}", title=f"view {i}"
        )
        for i in range(3)
    ]
    assert {c.name for c in comps} == {"ColoredTokens"} and len({c.bundle for c in comps}) == 1
    text = page(comps, "three views")
    assert text.count("var CircuitsVis=") == 1
    assert text.count("</script>") == 1 + 3  # the bundle + three render calls: the token cannot close one
    assert "\\u003c/script>" in text
    for i in range(3):
        assert (
            f'<div id="interp-cv-t{i}" class="circuitsvis" data-component="ColoredTokens" '
            f'style="margin: 15px 0;"></div>'
        ) in text
    assert display_token("<bos>") == "\u2039bos\u203a" and display_token("a&b", space=True) == " a\uff06b"
    with pytest.raises(ValueError, match="unique"):
        page([comps[0], comps[0]])
    with pytest.raises(ValueError, match="must start with a letter"):
        Component.from_rendered(raw, "1 bad id")
    # another CircuitsVis layout: its own script kept, the container still closed and renamed
    odd = Component.from_rendered(
        '<div id="circuits-vis-x" style=""/>\n<script type="module">\nrender("circuits-vis-x", Foo, {})\n</script>',
        "interp-cv-odd",
    )
    assert odd.call is None and odd.container().startswith('<div id="interp-cv-odd" style=""></div>')
    assert 'render("interp-cv-odd"' in odd.container()
    out = write_standalone(comps[0], tmp_path / "one.html")
    assert out.read_text().count("CircuitsVis.render(") == 1


def test_attention_views_match_the_cache(run_dir):
    """The numbers in an attention view are the hook_pattern of the checkpoint (rounded)."""
    import torch

    from interp.models.checkpoint import load_checkpoint
    from interp.viz.circuits import attention_views

    ckpt = load_checkpoint(run_dir / "best")
    seq = (run_dir / "data" / "test.txt").read_text().split("\n")[0].split()[:5]
    views = attention_views(ckpt, [seq], layers=[1], decimals=6)
    assert [v.id for v in views] == ["interp-cv-attn-0-l1"]
    props = json.loads(views[0].call.split(",", 2)[2].rsplit(")", 1)[0].replace("\\u003c", "<"))
    # "<bos>" shown as "‹bos›" (CircuitsVis would swallow it as markup), a space before each token
    assert props["tokens"] == [" \u2039bos\u203a", *(" " + t for t in seq)]
    with torch.no_grad():
        _, cache = ckpt.bridge.run_with_cache(torch.tensor([ckpt.vocab.encode(seq)]))
    want = cache["blocks.1.attn.hook_pattern"][0].numpy()
    np.testing.assert_allclose(np.array(props["attention"]), want, atol=1e-6)
    with pytest.raises(ValueError, match="out of range"):
        attention_views(ckpt, [seq], layers=[2])


def test_cli_report(run_dir, tmp_path):
    from interp.cli import main

    out = tmp_path / "r.html"
    assert main(["report", str(run_dir), "--no-attention", "--out", str(out), "--max-rows", "5"]) == 0
    text = out.read_text()
    assert f"{N_TRAIN_LOG - 5} more rows" in text and "Attention patterns (CircuitsVis)" not in text
    assert "Activation patching (CircuitsVis)" in text


# ---------------------------------------------------------------- a real browser


def find_chromium() -> str | None:
    for name in (os.environ.get("INTERP_CHROMIUM"), "chromium", "chromium-browser"):
        if name and shutil.which(name):
            return shutil.which(name)
    return None


#: network off: background services disabled, every host unresolvable, every request through a dead proxy
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--metrics-recording-only",
    "--disable-default-apps",
    "--disable-extensions",
    "--disable-dev-shm-usage",
    "--mute-audio",
    "--hide-scrollbars",
    "--host-resolver-rules=MAP * ~NOTFOUND",
    "--proxy-server=127.0.0.1:9",
    "--proxy-bypass-list=<-loopback>",
    "--window-size=1280,1000",
]


class DevTools:
    """The Chrome DevTools protocol over ``--remote-debugging-pipe``: the browser reads commands
    on its fd 3 and writes replies and events on fd 4, each a JSON text ending in NUL."""

    def __init__(self, binary: str, profile: Path, log: Path):
        cmd_r, self._w = os.pipe()
        self._r, ev_w = os.pipe()

        def wire():  # in the child: our pipe ends become fds 3 and 4 (via high copies, never clobbering)
            a, b = fcntl.fcntl(cmd_r, fcntl.F_DUPFD, 100), fcntl.fcntl(ev_w, fcntl.F_DUPFD, 100)
            os.dup2(a, 3)
            os.dup2(b, 4)

        self._log = log.open("wb")
        self.proc = subprocess.Popen(
            [binary, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--remote-debugging-pipe"],
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=self._log,
            preexec_fn=wire,
            pass_fds=(3, 4),
        )
        os.close(cmd_r)
        os.close(ev_w)
        self._buf = b""
        self._id = 0
        self.events: list[dict] = []

    def _pump(self, deadline: float) -> list[dict]:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("no reply from chromium")
        ready, _, _ = select.select([self._r], [], [], left)
        if not ready:
            raise TimeoutError("no reply from chromium")
        chunk = os.read(self._r, 1 << 20)
        if not chunk:
            raise RuntimeError(f"chromium closed the pipe (exit {self.proc.poll()})")
        self._buf += chunk
        *msgs, self._buf = self._buf.split(b"\0")
        return [json.loads(m) for m in msgs]

    def send(self, method: str, params: dict | None = None, session: str | None = None, timeout: float = 20) -> dict:
        self._id += 1
        msg = {"id": self._id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self._w, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            for m in self._pump(deadline):
                if m.get("id") == self._id:
                    if "error" in m:
                        raise RuntimeError(f"{method}: {m['error']}")
                    return m["result"]
                self.events.append(m)

    def wait_event(self, method: str, timeout: float = 20) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            for e in self.events:
                if e.get("method") == method:
                    return e
            self.events += self._pump(deadline)

    def evaluate(self, expr: str, session: str):
        r = self.send("Runtime.evaluate", {"expression": expr, "returnByValue": True}, session)
        if "exceptionDetails" in r:
            raise RuntimeError(f"page script failed: {r['exceptionDetails']}")
        return r["result"].get("value")

    def close(self) -> None:
        try:
            self.send("Browser.close", timeout=5)
        except Exception:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self._w)
        os.close(self._r)
        self._log.close()


#: what rendered, read from the page after its scripts ran
PAGE_STATE = r"""(() => {
  const cv = [...document.querySelectorAll('div.circuitsvis')];
  return {
    title: document.title,
    h2: [...document.querySelectorAll('h2')].map(h => h.textContent),
    tables: [...document.querySelectorAll('table')].map(t => t.rows.length),
    trainLog: [...document.querySelectorAll('p.note')].some(p => /more rows/.test(p.textContent)),
    images: [...document.images].filter(i => i.classList.contains('fig')).map(i => ({
      alt: i.alt, complete: i.complete, w: i.naturalWidth, h: i.naturalHeight,
      shown: i.getBoundingClientRect().width})),
    components: cv.map(d => ({id: d.id, name: d.dataset.component, children: d.childElementCount,
      height: d.getBoundingClientRect().height, text: d.innerText.slice(0, 1000)})),
    resources: performance.getEntriesByType('resource').map(r => r.name),
    findings: (() => { const f = document.getElementById('s-findings'); if (!f) return null;
      const r = f.getBoundingClientRect();
      return {top: r.top + window.scrollY, h3: [...f.querySelectorAll('h3')].map(h => h.textContent),
              tables: f.querySelectorAll('table').length, text: f.innerText}; })(),
    viewport: window.innerHeight,
  };
})()"""


def test_report_renders_in_headless_chromium(report, tmp_path):
    binary = find_chromium()
    if binary is None:
        pytest.skip("chromium is not installed (Debian: `apt-get install chromium`; .ci/run installs it when missing)")
    path, text = report
    t0 = time.monotonic()
    browser = DevTools(binary, tmp_path / "profile", tmp_path / "chromium.log")
    try:
        target = browser.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = browser.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Runtime", "Log", "Page", "Network"):
            browser.send(f"{domain}.enable", session=session)
        browser.events.clear()
        browser.send("Page.navigate", {"url": path.resolve().as_uri()}, session)
        browser.wait_event("Page.loadEventFired", timeout=30)
        # React renders after load: wait until every CircuitsVis root has children (or time out)
        deadline = time.monotonic() + 15
        state = browser.evaluate(PAGE_STATE, session)
        while any(c["children"] == 0 for c in state["components"]) and time.monotonic() < deadline:
            time.sleep(0.1)
            state = browser.evaluate(PAGE_STATE, session)
        time.sleep(0.3)  # let late console messages arrive
        browser.evaluate("1", session)
        metrics = browser.send("Page.getLayoutMetrics", session=session)
        size = metrics.get("cssContentSize") or metrics["contentSize"]
        shot = browser.send(
            "Page.captureScreenshot",
            {
                "format": "png",
                "captureBeyondViewport": True,
                "clip": {"x": 0, "y": 0, "width": size["width"], "height": min(size["height"], 12000), "scale": 1},
            },
            session,
            timeout=30,
        )
    finally:
        browser.close()
    elapsed = time.monotonic() - t0
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    screenshot = ARTIFACTS / "report_screenshot.png"
    screenshot.write_bytes(base64.b64decode(shot["data"]))
    shutil.copy(path, ARTIFACTS / "report.html")
    print(f"\nscreenshot: {screenshot} (browser {elapsed:.1f} s)")

    events = browser.events
    errors = [e["params"] for e in events if e.get("method") == "Runtime.exceptionThrown"]
    errors += [
        e["params"]
        for e in events
        if e.get("method") == "Runtime.consoleAPICalled" and e["params"]["type"] in ("error", "assert")
    ]
    errors += [
        e["params"]["entry"]
        for e in events
        if e.get("method") == "Log.entryAdded" and e["params"]["entry"]["level"] == "error"
    ]
    assert not errors, f"console errors: {json.dumps(errors)[:2000]}"
    # the page's own warnings (CircuitsVis loaded twice floods it with tfjs "already registered";
    # the browser's GL notes under --disable-gpu come as Log entries and are allowed)
    warnings = [
        e["params"]["args"][:1]
        for e in events
        if e.get("method") == "Runtime.consoleAPICalled" and e["params"]["type"] == "warning"
    ]
    assert not warnings, f"console warnings: {json.dumps(warnings)[:2000]}"
    requests = [e["params"]["request"]["url"] for e in events if e.get("method") == "Network.requestWillBeSent"]
    assert all(u.startswith(("file:", "data:", "about:")) for u in requests), requests
    assert not [u for u in state["resources"] if not u.startswith(("file:", "data:"))], state["resources"]

    assert state["title"].startswith("interp run: tiny-run")
    # the first screen: the findings, right under the title, before the contents
    f = state["findings"]
    assert f is not None and state["h2"][0] == "Findings" and f["top"] < 200 < state["viewport"]
    assert f["h3"] == ["World model", "Layer verdicts: planted vs found", "Repair"] and f["tables"] == 3
    assert "exactly the planted layers" in f["text"] and "Closest to the unplanted model" in f["text"]
    assert "Summary" in state["h2"] and "Attention patterns (CircuitsVis)" in state["h2"]
    assert len(state["tables"]) >= 8 and all(n > 1 for n in state["tables"]) and state["trainLog"]
    assert len(state["images"]) == text.count('src="data:image/png;base64,') == 3
    for img in state["images"]:
        assert img["complete"] and img["w"] > 0 and img["h"] > 0 and img["shown"] > 0, img
    comps = state["components"]
    assert sorted(c["name"] for c in comps) == ["AttentionPatterns"] * (SEQUENCES * 2) + ["ColoredTokensMulti"] * 2
    for c in comps:
        assert c["children"] > 0 and c["height"] > 20, c
    # tokens are visible: "<bos>" shown as ‹bos› (CircuitsVis writes tokens as HTML)
    assert all("\u2039bos\u203a" in c["text"] for c in comps if c["name"] == "AttentionPatterns")
    assert any(
        "\u2039bos\u203a 0 1 2*" in c["text"].replace("\u00a0", " ") for c in comps if c["name"] == "ColoredTokensMulti"
    )
    assert screenshot.stat().st_size > 10_000
