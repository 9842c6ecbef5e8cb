"""The app in a real browser: ``streamlit run app.py`` driven by Debian's Chromium via Playwright.

Starts the server headless on a free port, waits for ``/_stcore/health``, then types a
sentence, moves the threshold, selects a word, downloads a PNG (checked by its magic
bytes), opens every page and saves a screenshot of each under ``test-artifacts/``.
Playwright only drives the browser: nothing is downloaded (``playwright install`` is
never needed), the system Chromium at ``/usr/bin/chromium`` is used.
"""

from __future__ import annotations

import contextlib
import time
import urllib.request
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import pytest
from e2e_server import ARGS, CHROMIUM, serve

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
SENTENCE = "The jurors said the taxes were too high because the city had spent too much money ."

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"Chromium not found at {CHROMIUM}: apt-get install chromium"),
]
sync_api = pytest.importorskip("playwright.sync_api", reason="the Python package playwright is not installed (pip install playwright)")


DOC_MODEL = "e2e_kvp_doc"  # a small document checkpoint (KVP, window 3): the bundled ones read sentences


def document_checkpoint(folder: Path) -> Path:
    """A small untrained KVP document checkpoint with the bundled vocabulary, in ``folder/DOC_MODEL``."""
    import json

    import torch

    from vizlm.modeling.checkpoint import bundled_checkpoints, bundled_dir, save_checkpoint
    from vizlm.data.vocab import Vocab
    from vizlm.models import build_model

    meta = json.loads((bundled_dir() / bundled_checkpoints()[0] / "config.json").read_text(encoding="utf-8"))
    vocab = Vocab(meta["vocab"])
    torch.manual_seed(0)
    model = build_model("kvp", vocab_size=len(vocab), emb_dim=16, hidden_dim=12, window=3, context="document").eval()
    save_checkpoint(folder / DOC_MODEL, model, "kvp", vocab, corpus={"name": "brown"})
    return folder / DOC_MODEL


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    from vizlm.modeling.checkpoint import bundled_checkpoints

    if not bundled_checkpoints():
        pytest.skip("no bundled checkpoints in checkpoints/")
    doc = document_checkpoint(tmp_path_factory.mktemp("checkpoints"))
    with serve(tmp_path_factory.mktemp("streamlit") / "server.log", {"VIZLM_EXTRA_CHECKPOINTS": str(doc)}) as (base, _):
        yield base


@pytest.fixture(scope="module")
def browser():
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        yield b
        b.close()


@contextlib.contextmanager
def opened(browser, width: int, height: int, **options):
    """A page of a fresh browser context at ``width`` x ``height`` (60 s for any wait), closed afterwards."""
    context = browser.new_context(viewport={"width": width, "height": height}, **options)
    try:
        pg = context.new_page()
        pg.set_default_timeout(60_000)
        yield pg
    finally:
        context.close()


@pytest.fixture
def page(browser, server):
    with opened(browser, 1440, 1800, accept_downloads=True) as pg:
        pg.base = server  # type: ignore[attr-defined]
        yield pg


def wait_idle(pg, timeout: float = 300) -> None:
    """Wait until the app has stopped running (the script not running, no status widget, spinner or
    progress bar, for 2 s). The status widget alone misses a script that loads models between bars."""
    running = ", ".join(f"[data-testid='stApp'][data-test-script-state='{s}']" for s in ("running", "rerunRequested"))
    busy = (f"{running}, [data-testid='stStatusWidget'], [data-testid='stSpinner'], [data-testid='stProgress'], "
            "[data-testid='stSkeleton']")
    pg.wait_for_selector("[data-testid='stMain'] h1", timeout=timeout * 1000)  # every page has a title
    quiet, deadline = 0, time.time() + timeout
    while quiet < 4:
        if time.time() > deadline:
            raise AssertionError(f"the app kept running for more than {timeout:.0f} s")
        quiet = 0 if pg.locator(busy).count() else quiet + 1
        time.sleep(0.5)
    exceptions = pg.locator("[data-testid='stException']")
    assert exceptions.count() == 0, exceptions.first.inner_text()


def query(pg) -> dict[str, str]:
    return {k: v[0] for k, v in parse_qs(urlparse(pg.url).query).items()}


def select_first_improved(pg):
    """Select the first row of Compare's "most improved" table; the link that opens it in the Explorer. The grid
    draws on a canvas: a click that lands before it has laid out is lost, so the click is retried."""
    grid = pg.locator("[data-testid='stDataFrame']").first
    link = pg.locator("[data-testid='stPageLink'] a").filter(has_text="in the Explorer").first
    for _ in range(4):
        grid.scroll_into_view_if_needed()
        time.sleep(1.0)
        box = grid.bounding_box()
        pg.mouse.click(box["x"] + 12, box["y"] + 52)
        wait_idle(pg)
        try:
            link.wait_for(timeout=10_000)
            break
        except sync_api.TimeoutError:
            continue
    return link


def shot(pg, name: str) -> Path:
    """Save the whole page: Streamlit scrolls inside its main pane, so grow the window to fit it first."""
    ARTIFACTS.mkdir(exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    size = pg.viewport_size
    height = pg.evaluate("""() => {
        const main = document.querySelector("[data-testid='stMain']") || document.body;
        for (const el of document.querySelectorAll('*')) { if (el.scrollTop) el.scrollTop = 0; }
        return Math.max(main.scrollHeight, document.body.scrollHeight);
    }""")
    pg.set_viewport_size({"width": size["width"], "height": min(8000, max(size["height"], int(height) + 40))})
    time.sleep(1.0)  # charts re-layout to the new size
    pg.screenshot(path=str(path), full_page=True)
    pg.set_viewport_size(size)
    return path


# What is cut at the page's width: a select box's value or a metric's label ending in "…", a multiselect's chip
# cut or out of sight in its box, a table that scrolls sideways; with ``charts``, a chart that does.
CUT_OFF = """(charts) => {
    const out = [];
    const texts = "[data-testid='stSelectbox'] *, [data-testid='stMultiSelect'] *, [data-testid='stMetricLabel'] *";
    for (const e of document.querySelectorAll(texts)) {
        const text = (e.value || e.textContent || '').trim();
        if ((e.children.length === 0 || e.tagName === 'INPUT') && text && e.scrollWidth > e.clientWidth + 1)
            out.push(`cut (${e.scrollWidth} > ${e.clientWidth} px): ${text}`);
    }
    for (const e of document.querySelectorAll("[data-testid='stMultiSelectTagsContainer']"))
        if (e.scrollHeight > e.clientHeight + 1) out.push(`chips out of sight: ${e.textContent}`);
    for (const grid of document.querySelectorAll("[data-testid='stDataFrame']")) {
        const s = grid.querySelector('.dvn-scroller');
        if (s && s.scrollWidth > s.clientWidth + 1)
            out.push(`table scrolls sideways (${s.scrollWidth} > ${s.clientWidth} px): ${grid.textContent.slice(0, 60)}`);
    }
    for (const chart of charts ? document.querySelectorAll("[data-testid='stVegaLiteChart']") : []) {
        const box = chart.parentElement;
        if (box.scrollWidth > box.clientWidth + 1)
            out.push(`chart scrolls sideways (${box.scrollWidth} > ${box.clientWidth} px): ${chart.textContent.slice(0, 60)}`);
    }
    return out;
}"""


def cut_off(pg, charts: bool = False) -> list[str]:
    """What :data:`CUT_OFF` finds on the page."""
    return pg.evaluate(CUT_OFF, charts)


def assert_nothing_cut(pg, where: str) -> None:
    time.sleep(1.0)  # the page lays out again at its new size
    cut = cut_off(pg, charts=True)
    assert not cut, f"{where}: {cut}"


def with_viewport(pg, size: dict, check) -> None:
    """Run ``check()`` at the viewport ``size`` (the reviewer's 1440 x 900), then go back to the page's."""
    before = pg.viewport_size
    pg.set_viewport_size(size)
    try:
        check()
    finally:
        pg.set_viewport_size(before)


def pill(pg, word: str):
    return pg.locator("[data-testid='stButtonGroup'] button").filter(has_text=word).first


def test_explorer_type_threshold_select_download(page):
    page.goto(page.base + "/")
    wait_idle(page)
    assert page.get_by_role("heading", name="Explorer").first.is_visible()

    # type a sentence (Ctrl+Enter applies a text area)
    box = page.get_by_label("Sentence")
    box.fill(SENTENCE)
    box.press("Control+Enter")
    wait_idle(page)
    assert pill(page, "jurors").is_visible()
    assert "jurors" in query(page)["text"]

    # move the threshold slider with the keyboard: 0.20 -> 0.25
    if query(page).get("threshold") is None:  # a link may have opened it in top-k mode
        page.get_by_role("button", name="Threshold").click()
        wait_idle(page)
    slider = page.locator("[data-testid='stSidebar'] [data-testid='stSlider'] input[type='range']").first
    # one step (0.01) a key press; a press that lands during a rerun can be dropped, so step
    # and check until the URL says 0.25 (never more than 0.25: each step is checked)
    for _ in range(15):
        if float(query(page)["threshold"]) >= 0.25 - 1e-9:
            break
        slider.focus()
        slider.press("ArrowRight")
        wait_idle(page)
    assert float(query(page)["threshold"]) == pytest.approx(0.25)

    # select a word: the Explorer outlines it and puts its row in the URL
    pill(page, "were").click()
    wait_idle(page)
    assert query(page)["target"] == str(SENTENCE.split().index("were"))
    target = page.locator(".vizlm-highlight .vz-target, .vizlm-strip .vz-chip[style*='outline']").first
    assert "were" in target.inner_text()

    # download the heat map (or the surprisal chart) as PNG; the bytes are made on click
    button = page.locator("[data-testid='stDownloadButton'] button:visible").filter(has_text="PNG").first
    with page.expect_download(timeout=120_000) as info:
        button.click()
    data = Path(info.value.path()).read_bytes()
    assert data[:8] == PNG_MAGIC and len(data) > 1000
    shot(page, "explorer")


def test_measures_colour_the_heatmap_by_effect_and_by_attribution(page):
    """The sidebar's measure: the attention's effect colours the heat maps; integrated gradients highlights
    what each prediction depended on, for the LSTM too, beside the attention model's weights."""
    text = "The dogs in the park are barking because they saw a cat , so the owners are running ."
    page.goto(page.base + "/?model=amsrn&compare=kvp&target=5&text=" + urllib.request.quote(text))
    wait_idle(page)
    main = page.locator("[data-testid='stMain']")
    assert main.get_by_text("Attention effect").first.is_visible()
    assert main.get_by_text("Attention changed log₂ P(word) by").first.is_visible()
    charts = main.locator("[data-testid='stVegaLiteChart']")
    assert charts.count() == 2
    assert main.get_by_text("Brighter = more attention").first.is_visible()
    page.goto(page.base + "/?model=amsrn&compare=kvp&target=5&measure=effect&text=" + urllib.request.quote(text))
    wait_idle(page)
    main.get_by_text("Blue: the slot helped").first.wait_for(timeout=30_000)
    assert main.locator("[data-testid='stVegaLiteChart']").count() == 2
    shot(page, "explorer-effects")
    page.goto(page.base + "/?model=amsrn&compare=lstm&target=9&measure=integrated-gradients&text="
              + urllib.request.quote(text))
    wait_idle(page)
    main.get_by_text("blue: it raised the probability").first.wait_for(timeout=60_000)
    assert main.locator(".vizlm-highlight .vz-attributed").count() >= 2  # both panels, the LSTM's too
    assert main.get_by_text("Kendall τ").first.is_visible()
    assert main.locator("[data-testid='stVegaLiteChart']").count() == 2
    shot(page, "explorer-attribution")


def test_passage_view(page):
    """A passage of a Brown document: the document model reads it as running text, amsrn a sentence at a
    time (each panel says so); a repeated word picked by the link stays picked; the heat map shows the
    rows around it, or every row; PNG download; the measure in the URL."""
    from vizlm.data.examples import example_passages
    from vizlm.data.text import passage_sentences

    text = max((t for _, t in example_passages("brown", "test")), key=len)  # ~400 words, 18 sentences
    words = [w for s in passage_sentences(text) for w in [t.norm for t in s] + ["</s>"]]  # row r predicts word r
    target = words.index("the", 200)  # a word of the passage's middle, repeated many times
    page.goto(page.base + f"/?model={DOC_MODEL}&compare=amsrn&target={target}&text=" + urllib.request.quote(text))
    wait_idle(page)
    main = page.locator("[data-testid='stMain']")
    assert main.get_by_text("document-level checkpoint").first.is_visible()
    assert main.get_by_text("sentence-level checkpoint").first.is_visible()
    assert main.get_by_text("A passage of 18 sentences").first.is_visible()
    assert not cut_off(page), cut_off(page)  # the sidebar's "e2e_kvp_doc · yours · running text" whole
    assert page.locator(".vizlm-highlight .vz-boundary").count() >= 2
    assert page.locator(".vizlm-highlight .vz-target").first.inner_text().lower() == "the"
    slider = page.locator("[data-testid='stSidebar'] [data-testid='stSlider'] input[type='range']").first
    slider.focus()
    slider.press("ArrowRight")  # another interaction: the link's selection stays
    wait_idle(page)
    assert query(page)["target"] == str(target)
    assert page.locator(".vizlm-highlight .vz-target").first.inner_text().lower() == "the"
    charts = main.locator("[data-testid='stVegaLiteChart']")
    assert charts.count() == 2 and main.get_by_text("40 rows around the selected word").first.is_visible()
    shot(page, "explorer-passage")
    button = page.locator("[data-testid='stDownloadButton'] button:visible").filter(has_text="PNG").first
    with page.expect_download(timeout=120_000) as info:
        button.click()
    assert Path(info.value.path()).read_bytes()[:8] == PNG_MAGIC
    main.locator("[data-testid='stButtonGroup'] button").filter(has_text="Every row").first.click()
    wait_idle(page)
    page.locator("[data-testid='stSidebar'] [data-testid='stSelectbox']").filter(has_text="Measure").first.click()
    page.get_by_role("option", name="attention effect").first.click()  # the sidebar's measure
    wait_idle(page)
    main.get_by_text("Blue: the slot helped").first.wait_for(timeout=60_000)
    assert query(page).get("measure") == "effect" and query(page)["target"] == str(target)
    shot(page, "explorer-passage-every-row")


def test_compare_link_opens_the_chosen_sentence_in_the_explorer(page):
    """Compare with a document model: the link to the Explorer selects the chosen sentence's first word (not the
    </s> before it), after the sentences before it, and that word is not faded as not read yet."""
    page.goto(page.base + f"/compare?a={DOC_MODEL}&b=lstm-doc&corpus=brown&split=test&n=200")
    wait_idle(page)
    link = select_first_improved(page)
    link.click()
    page.wait_for_url(lambda url: "target=" in url)
    wait_idle(page)
    import vizlm
    from vizlm.data.text import tokenize

    q = query(page)
    first = tokenize(q["text"].rsplit("\n", 1)[-1])[0].text  # the chosen sentence's first token
    assert q["model"] == "lstm-doc" and vizlm.load("lstm-doc").analyze(q["text"]).tokens[int(q["target"])] == first
    shot(page, "compare-link-explorer")


def test_a_model_of_another_language_brings_its_text(page):
    """Picking the Chinese model in the sidebar brings a Chinese text and a Chinese model to compare with: no
    warning about unknown words."""
    from vizlm.modeling.checkpoint import bundled_checkpoints

    if "amsrn-sinica" not in bundled_checkpoints():
        pytest.skip("no bundled Chinese checkpoint amsrn-sinica")
    page.goto(page.base + "/?model=amsrn&compare=lstm&text=" + urllib.request.quote(SENTENCE))
    wait_idle(page)
    page.locator("[data-testid='stSidebar'] [data-testid='stSelectbox']").filter(has_text="Model").first.click()
    page.keyboard.type("sinica")  # the list is long: typing narrows it, as a user finds a model
    page.get_by_role("option").filter(has_text="amsrn-sinica").first.click()
    wait_idle(page)
    q = query(page)
    assert q["model"] == "amsrn-sinica" and "sinica" in q.get("compare", "")
    assert "今天" in page.get_by_label("Sentence").input_value()
    assert page.locator("[data-testid='stAlert']").filter(has_text="vocabulary").count() == 0
    shot(page, "explorer-language-switch")


def test_script_payload_is_shown_as_text(page):
    page.goto(page.base + "/?text=" + urllib.request.quote('<script>window.__pwned=1</script> <b>bold</b> end'))
    wait_idle(page)
    assert page.evaluate("window.__pwned === undefined")
    assert page.locator("[data-testid='stMain'] b:text-is('bold')").count() == 0
    assert pill(page, "script").is_visible()


def test_corrupt_upload_gives_a_message(page):
    page.goto(page.base + "/?text=the+end+.")
    wait_idle(page)
    page.get_by_text("Upload a checkpoint").click()
    inputs = page.locator("[data-testid='stSidebar'] [data-testid='stFileUploaderDropzoneInput']")
    files = [{"name": "model.safetensors", "mimeType": "application/octet-stream", "buffer": b"\x00" * 64},
             {"name": "config.json", "mimeType": "application/json", "buffer": b"{not json"}]
    for i, f in enumerate(files):  # one at a time: a file set while the app reruns can be lost
        inputs.nth(i).set_input_files(f)
        page.locator("[data-testid='stSidebar']").get_by_text(f["name"]).first.wait_for(timeout=30_000)
        wait_idle(page)
    error = page.locator("[data-testid='stSidebar'] [data-testid='stAlertContentError']").first
    error.wait_for(timeout=30_000)
    assert "not" in error.inner_text().lower()
    assert pill(page, "end").is_visible(), "the rest of the page keeps working"
    shot(page, "explorer-upload-error")


PAGES = [  # nav title, heading, screenshot, extra query (small samples keep first runs short)
    ("Models", "Models", "models", ""),
    ("Compare perplexity", "Compare perplexity", "compare", "?n=200"),
    ("Attention by position", "Attention by position", "positions", "?n=200"),
    ("Cases", "Cases", "cases", "?n=200"),
    ("Faithfulness", "Is attention an explanation?", "faithfulness", ""),  # says the cost; runs on request
]


@pytest.mark.parametrize("nav, heading, name, extra", PAGES, ids=[p[2] for p in PAGES])
def test_each_page_opens(page, nav, heading, name, extra):
    page.goto(page.base + "/")
    wait_idle(page)
    page.locator("[data-testid='stSidebarNav'] a").filter(has_text=nav).first.click()
    page.wait_for_url(f"**/{name}*")
    if extra:  # the same page, on a 200-sentence sample (?n=200) so the first run is short
        page.goto(page.url.split("?")[0] + extra)
    wait_idle(page)
    assert page.get_by_role("heading", name=heading).first.is_visible()
    # at 1440 px, nothing cut: the sidebar's labels, eight models' chips and metric labels, the tables' columns
    with_viewport(page, {"width": 1440, "height": 900}, lambda: assert_nothing_cut(page, name))
    if name == "compare":
        link = select_first_improved(page)  # the "most improved" table's first row
        link.wait_for(timeout=20_000)
        shot(page, name)
        link.click()
        page.wait_for_url(lambda url: "text=" in url)
        wait_idle(page)
        q = query(page)
        assert q.get("text") and q.get("compare")
        return
    shot(page, name)


FAITH_CORPUS = "faithcorpus"


def _faithfulness_folders(root: Path) -> dict[str, str]:
    """A corpus prepared from a folder of text and two untrained attention checkpoints of its small vocabulary
    (AMSRN reading sentences, KVP reading documents): the tests cost seconds over its first sentences."""
    import torch

    from vizlm.modeling.checkpoint import save_checkpoint
    from vizlm.data.vocab import Vocab
    from vizlm.data.ingest import prepare_corpus
    from vizlm.models import build_model

    words = ["the", "man", "saw", "a", "dog", "and", "woman", "heard", "cat", "old", "small", "it", "ran", "home"]
    source = root / "source"
    source.mkdir()
    for split, (seed, docs) in {"train": (0, 4), "valid": (1, 2), "test": (2, 4)}.items():
        rng = torch.Generator().manual_seed(seed)
        text = "\n\n".join("\n".join(" ".join(words[int(i)] for i in torch.randint(len(words), (7,), generator=rng)) + " ."
                                      for _ in range(5)) for _ in range(docs))
        (source / f"{split}.txt").write_text(text + "\n", encoding="utf-8")
    card = prepare_corpus(FAITH_CORPUS, source, corpora_dir=root / "corpora")
    vocab = Vocab((root / "corpora" / FAITH_CORPUS / "vocab.txt").read_text(encoding="utf-8").split("\n")[:-1])
    for name, family, kw in (("faith-amsrn", "amsrn", {}), ("faith-kvp-doc", "kvp", {"window": 3, "context": "document"})):
        torch.manual_seed(0)
        model = build_model(family, vocab_size=len(vocab), emb_dim=8, hidden_dim=8, **kw).eval()
        save_checkpoint(root / "checkpoints" / name, model, family, vocab,
                        corpus={"name": FAITH_CORPUS, "checksums": card["checksums"], "reading": card["reading"]})
    return {"VIZLM_CORPORA": str(root / "corpora"), "VIZLM_CHECKPOINTS": str(root / "checkpoints"),
            "VIZLM_CACHE": str(root / "cache")}


def test_faithfulness_page_runs_the_tests(browser, tmp_path):
    """The Faithfulness page on two small models of a corpus of yours: the cost said, the run switched on, every
    test drawn per model (screenshot ``faithfulness-run``)."""
    with serve(tmp_path / "server.log", _faithfulness_folders(tmp_path)) as (base, _), opened(browser, 1440, 1800) as pg:
        pg.goto(base + "/faithfulness")
        wait_idle(pg)
        assert pg.get_by_text("the first time on one core").first.is_visible()
        pg.get_by_text("Run the tests").first.click()
        wait_idle(pg)
        assert pg.locator("[data-testid='stVegaLiteChart']").count() == 2 * 4  # per model; the agreement a table
        assert pg.locator("[data-testid='stDataFrame']").count() >= 2
        shot(pg, "faithfulness-run")


def test_deep_link_is_the_first_request_of_a_fresh_server(browser, tmp_path):
    """A shared link to a page, opened before anyone visited ``/``, shows that page inside the app's
    own navigation (not Streamlit's legacy ``pages/`` menu, which lists the files as ``app``, ``cases``...)."""
    with serve(tmp_path / "server.log") as (base, _), opened(browser, 1280, 900) as pg:
        pg.goto(base + "/models")
        wait_idle(pg)
        assert pg.get_by_role("heading", name="Models").first.is_visible()
        nav = pg.locator("[data-testid='stSidebarNav'] a")
        titles = [nav.nth(i).inner_text().strip().split("\n")[-1] for i in range(nav.count())]  # after the icon
        assert "Attention by position" in titles and "Explorer" in titles, titles
        assert not any(t in ("app", "explorer", "compare") for t in titles), titles
        assert pg.title().endswith("vizlm") or "vizlm" in pg.title(), pg.title()


@pytest.mark.parametrize("width", [800, 1280, 1920])
def test_nothing_is_cut_off_at_common_widths(browser, server, width):
    """Two attention models' heat maps fit their column or scroll inside it; metric numbers are
    never cut to "1.…"; the favicon is served by the app itself (nothing leaves the machine)."""
    with opened(browser, width, 1000) as pg:
        pg.goto(server + "/?model=amsrn&compare=kvp&text=" + urllib.request.quote(SENTENCE))
        wait_idle(pg)
        charts = pg.locator("[data-testid='stVegaLiteChart']")
        assert charts.count() >= 2
        for i in range(charts.count()):
            clipped = charts.nth(i).evaluate("""el => {
                const box = el.parentElement, svg = el.querySelector('svg, canvas');
                const style = getComputedStyle(box);
                const inside = svg.getBoundingClientRect().right <= box.getBoundingClientRect().right + 1;
                return !(inside || style.overflowX === 'auto' || style.overflowX === 'scroll');
            }""")
            assert not clipped, f"heat map {i} is cut off at {width} px"
        icons = pg.evaluate("() => [...document.querySelectorAll(\"link[rel~='icon']\")].map(l => l.href)")
        assert icons and all(h.startswith(server) or h.startswith("data:") for h in icons), icons
        for url in ("/models", "/?model=amsrn&compare=kvp&text=" + urllib.request.quote(SENTENCE)):
            pg.goto(server + url)
            wait_idle(pg)
            values = pg.locator("[data-testid='stMetricValue']")
            assert values.count() >= 2
            cut = pg.evaluate("""() => [...document.querySelectorAll("[data-testid='stMetricValue'] *")]
                .filter(e => e.scrollWidth > e.clientWidth + 1).map(e => e.textContent)""")
            assert not cut, f"metric values cut off at {width} px on {url}: {cut}"
        if width == 800:
            shot(pg, "explorer-800")


YOUR_CORPUS = "mine"  # a corpus prepared from a folder of text, and two models trained on it (#27)
YOUR_MODELS = ("mine-lstm", "mine-kvp")


def your_corpus(root: Path) -> dict[str, str]:
    """``vizlm prepare --corpus mine --from FOLDER`` into ``root/corpora`` and two models trained on it for a few
    batches (an LSTM reading sentences, a KVP reading documents) in ``root/checkpoints``: the server's environment."""
    from vizlm.core import paths
    from vizlm.cli import main

    subjects = ["the man", "the old woman", "a small dog", "the children", "his brother", "the teacher"]
    verbs = ["saw", "found", "wanted", "gave away", "looked at", "bought"]
    objects = ["the house", "a letter", "the money", "her car", "the new book", "some water"]
    source = root / "source"
    source.mkdir()
    for seed, split, docs in ((0, "train", 12), (1, "valid", 2), (2, "test", 4)):
        text = "\n\n".join("\n".join(f"{subjects[(k := seed + 7 * d + 3 * s) % 6]} {verbs[(k // 2) % 6]} "
                                     f"{objects[(k // 3) % 6]} ." for s in range(6)) for d in range(docs))
        (source / f"{split}.txt").write_text(text + "\n", encoding="utf-8")
    corpora, checkpoints = root / "corpora", root / "checkpoints"
    try:
        assert main(["--corpora", str(corpora), "prepare", "--corpus", YOUR_CORPUS, "--from", str(source), "--json"]) == 0
        for name, family, context in zip(YOUR_MODELS, ("lstm", "kvp"), ("sentence", "document")):
            assert main(["--corpora", str(corpora), "train", "--model", family, "--corpus", YOUR_CORPUS, "--context",
                         context, "--dry-run", "--out", str(checkpoints / name), "--emb-dim", "16", "--hidden-dim", "16",
                         "--streams", "4"]) == 0
    finally:
        paths.clear_overrides()
    return {"VIZLM_CORPORA": str(corpora), "VIZLM_CHECKPOINTS": str(checkpoints)}


def test_compare_on_your_corpus(browser, tmp_path):
    """#27: Compare perplexity on a corpus you prepared, with two models trained on it: the picker names it
    ("mine test · yours"), both perplexities and the scatter are shown, no warning (both were trained on it)."""
    env = your_corpus(tmp_path)
    with serve(tmp_path / "server.log", {**env, "VIZLM_CACHE": str(tmp_path / "cache")}) as (base, _), opened(browser, 1440, 1400) as pg:
        pg.goto(f"{base}/compare?a={YOUR_MODELS[0]}&b={YOUR_MODELS[1]}&corpus={YOUR_CORPUS}&split=test")
        wait_idle(pg)
        path = shot(pg, "compare-your-corpus")
        assert path.read_bytes().startswith(PNG_MAGIC)
        assert pg.get_by_role("heading", name="Compare perplexity").first.is_visible()
        picker = pg.locator("[data-testid='stSelectbox']").filter(has_text="Corpus").first
        assert f"{YOUR_CORPUS} test · yours" in picker.evaluate("el => el.textContent + ' ' + "
                                                                 "[...el.querySelectorAll('input')].map(i => i.value).join(' ')"), \
            picker.inner_html()[:2000]
        values = pg.locator("[data-testid='stMetricValue']")
        assert values.count() == 5 and "—" not in values.first.inner_text()
        assert pg.locator("[data-testid='stVegaLiteChart']").count() >= 1
        alerts = pg.locator("[data-testid='stAlert']")  # no error, no "not trained on", no note on the link
        assert alerts.count() == 0, alerts.first.inner_text()
        assert query(pg)["corpus"] == YOUR_CORPUS
        cut = pg.evaluate("""() => [...document.querySelectorAll("[data-testid='stMetricValue'] *")]
            .filter(e => e.scrollWidth > e.clientWidth + 1).map(e => e.textContent)""")
        assert not cut, f"metric values cut off: {cut}"
