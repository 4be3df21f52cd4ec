"""Every notebook in notebooks/ opened in JupyterLab in headless Chromium, as a user sees it:
Run All, then every code cell ran (`[1]:` … `[n]:` in order; Run All goes on past the cells
tagged `raises-exception`), every output is rendered as its saved counterpart says (same text,
a MIME type from its bundle, tables, SVG charts and highlighted listings where the saved output
has them), no raw ANSI escape is visible, and JupyterLab shows no error dialog.

Needs Debian's `chromium` and `chromium-driver` (scripts/install-deps.sh installs them): without
them the tests skip, saying so, except under `CI`, where they fail. A full-page screenshot of each
notebook goes to `.browser-screenshots/` when its test fails, and on success too with
`QUASI_SCREENSHOTS=1`."""

import base64
import html.parser
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request

import nbformat
import pytest
from selenium import webdriver
from selenium.common.exceptions import TimeoutException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.support.ui import WebDriverWait

from conftest import ROOT
from test_notebooks import NOTEBOOKS, has_saved_outputs, mask, progress, unmet_requirement, varies

SCREENSHOTS = ROOT / ".browser-screenshots"
# Generous: two shared cores, a debug-built kernel, and Chromium's software rendering.
SERVER_TIMEOUT = 120
PAGE_TIMEOUT = 120
RUN_ALL_TIMEOUT = 300
# JupyterLab's renderer for ANSI-coloured text turns escapes into spans; one that slips through
# shows as `[0m`, `[38;5;9m`, or the control character itself.
ANSI_VISIBLE = re.compile(r"\x1b|\u241b|\[\d{1,3}(;\d{1,3})*m")
ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


# The browser and the server, once for all the tests.


def browser_paths():
    """Chromium and its driver, or pytest.skip (pytest.fail under CI) when either is missing."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    chromedriver = shutil.which("chromedriver")
    if chromium and chromedriver:
        return chromium, chromedriver
    missing = " and ".join(name for name, path in [("chromium", chromium), ("chromedriver", chromedriver)] if not path)
    message = f"{missing} not found: `apt-get install chromium chromium-driver` (scripts/install-deps.sh does)"
    if os.environ.get("CI"):
        pytest.fail(f"{message}; under CI the browser tests must run", pytrace=False)
    pytest.skip(message)


@pytest.fixture(scope="session")
def driver(tmp_path_factory):
    chromium, chromedriver = browser_paths()
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    # --no-sandbox: the tests may run as root (CI); --disable-dev-shm-usage: containers often
    # have a tiny /dev/shm.
    for argument in ["--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1280,1000", "--lang=en-US"]:
        options.add_argument(argument)
    # A notebook with unsaved outputs asks before unloading; leaving it for the next is fine.
    options.unhandled_prompt_behavior = "accept"
    log = tmp_path_factory.mktemp("chromedriver") / "chromedriver.log"
    browser = webdriver.Chrome(service=Service(chromedriver, log_output=str(log)), options=options)
    browser.set_script_timeout(PAGE_TIMEOUT)
    yield browser
    browser.quit()


@pytest.fixture(scope="session")
def lab(tmp_path_factory, driver):
    """JupyterLab from this environment on a free loopback port, no token, serving copies of the
    notebooks with their outputs cleared (whatever shows later came from this run). Its own
    config, runtime, settings and workspace directories, so a user's own settings play no
    part; JUPYTER_PATH (the `quasi` kernelspec under test) is left as scripts/test.sh sets it."""
    base = tmp_path_factory.mktemp("lab")
    root = base / "notebooks"
    root.mkdir()
    for path in NOTEBOOKS:
        notebook = nbformat.read(path, as_version=4)
        for cell in notebook.cells:
            if cell.cell_type == "code":
                cell.outputs = []
                cell.execution_count = None
        nbformat.write(notebook, root / path.name)
    settings = base / "settings"
    write_settings(settings / "@jupyterlab/apputils-extension/notification.jupyterlab-settings", {"fetchNews": "false", "checkForUpdates": False})
    # Every cell in the DOM, so every output can be checked, and no blank page past the last one
    # in the screenshots.
    write_settings(settings / "@jupyterlab/notebook-extension/tracker.jupyterlab-settings", {"windowingMode": "none", "scrollPastEnd": False})
    runtime = base / "runtime"
    env = dict(os.environ, JUPYTER_CONFIG_DIR=str(base / "config"), JUPYTER_RUNTIME_DIR=str(runtime), JUPYTERLAB_SETTINGS_DIR=str(settings), JUPYTERLAB_WORKSPACES_DIR=str(base / "workspaces"))
    # --expose-app-in-browser: window.jupyterapp, to run commands and read the notebook model.
    argv = [
        sys.executable, "-m", "jupyterlab", "--no-browser", "--allow-root", "--expose-app-in-browser",
        "--ServerApp.ip=127.0.0.1", "--ServerApp.port=0", "--IdentityProvider.token=", f"--ServerApp.root_dir={root}",
        # Nothing from the network: no news, no update check, no extension manager on PyPI.
        "--LabApp.news_url=None", "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate", "--LabApp.extension_manager=readonly",
    ]  # fmt: skip
    log_path = base / "jupyterlab.log"
    with open(log_path, "w") as log:
        server = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        url = wait_for_server(server, runtime / f"jpserver-{server.pid}.json", log_path)
        yield Lab(url, log_path)
    finally:
        stop(server)


def write_settings(path, settings):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(settings))


def wait_for_server(server, info_file, log_path):
    """The server's URL once it answers; it picked its port (port 0) and wrote it to info_file."""
    deadline = time.monotonic() + SERVER_TIMEOUT
    while time.monotonic() < deadline:
        if server.poll() is not None:
            pytest.fail(f"JupyterLab exited with status {server.returncode}:\n{log_path.read_text()[-4000:]}", pytrace=False)
        if info_file.exists():
            try:
                url = json.loads(info_file.read_text())["url"].rstrip("/")
                with urllib.request.urlopen(f"{url}/api/status", timeout=10):
                    return url
            except (OSError, ValueError, KeyError):
                pass
        time.sleep(0.2)
    pytest.fail(f"JupyterLab did not answer within {SERVER_TIMEOUT}s:\n{log_path.read_text()[-4000:]}", pytrace=False)


def stop(server):
    """SIGTERM: Jupyter shuts its kernels down and exits; its process group goes if it hangs."""
    if server.poll() is None:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()


class Lab:
    def __init__(self, url, log_path):
        self.url, self.log_path = url, log_path

    def log_tail(self, lines=30):
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])


# Waiting in the page. Every wait is on a condition, bounded, and gives up early on an error dialog.


DIALOGS = """
return [...document.querySelectorAll('.jp-Dialog, .Toastify__toast--error, .jp-Notification-Toast-error')]
    .map(node => node.innerText.trim().replace(/\\s+/g, ' '));
"""


def error_dialogs(driver):
    """The text of every JupyterLab dialog and error notification on the page."""
    return driver.execute_script(DIALOGS)


def wait_until(driver, script, timeout, what, *args):
    """Polls `script` (JavaScript returning a truthy value when done) until it is truthy."""

    def done(driver):
        dialogs = error_dialogs(driver)
        if dialogs:
            raise AssertionError(f"a JupyterLab dialog while waiting for {what}: {dialogs}")
        return driver.execute_script(script, *args)

    try:
        return WebDriverWait(driver, timeout, poll_frequency=0.25).until(done)
    except TimeoutException:
        raise AssertionError(f"gave up after {timeout}s waiting for {what}") from None


# What the notebook shows, read from its DOM in one go.


class Output:
    """One rendered output: its element, its type in the notebook model (execute_result, stream…),
    the MIME type JupyterLab rendered, its visible text and its output prompt."""

    def __init__(self, element, type, mime, text, prompt):
        self.element, self.type, self.mime, self.text, self.prompt = element, type, mime, text, prompt


class Cell:
    """One code cell: its element (`.jp-CodeCell`), its number among the code cells (from 1, as
    Run All numbers them), its input prompt and its outputs."""

    def __init__(self, element, number, prompt, outputs):
        self.element, self.number, self.prompt, self.outputs = element, number, prompt, outputs


CODE_CELLS = """
// A chart's labels are drawn from the measured times, which change every run: its text does not
// count (that a chart is there is checked apart).
const textWithoutCharts = node => {
    let text = node.innerText;
    node.querySelectorAll('svg').forEach(chart => {
        const box = chart.parentElement;
        if (box && box.innerText) text = text.replace(box.innerText, '');
    });
    return text;
};
const notebook = window.jupyterapp.shell.currentWidget.content;
return notebook.widgets.filter(cell => cell.model.type === 'code').map(cell => ({
    element: cell.node,
    prompt: cell.node.querySelector('.jp-InputPrompt').innerText.trim(),
    outputs: [...cell.node.querySelectorAll('.jp-OutputArea-child')].map((child, index) => {
        const output = child.querySelector('.jp-OutputArea-output');
        const model = cell.model.outputs.get(index);
        return {element: output, type: model ? model.type : '', mime: output.dataset.mimeType || '',
                text: textWithoutCharts(output), prompt: child.querySelector('.jp-OutputPrompt').innerText.trim()};
    }),
}));
"""


def code_cells(driver):
    cells = driver.execute_script(CODE_CELLS)
    return [Cell(cell["element"], number, cell["prompt"], [Output(**output) for output in cell["outputs"]]) for number, cell in enumerate(cells, 1)]


# Checks of one cell's rendering, on the live DOM: they take a cell's element (or any element
# holding outputs), so a new notebook cell, or a synthetic page, can use them directly.

HIGHLIGHTED = """
const root = arguments[0];
return [...root.querySelectorAll('pre')].some(pre => {
    const spans = [...pre.querySelectorAll('span[class]')].filter(span => span.textContent.trim());
    const colours = new Set(spans.map(span => getComputedStyle(span).color));
    return spans.length >= 2 && colours.size >= 2;
});
"""

SVG_CHART = """
const root = arguments[0];
// An `image/svg+xml` output (`.jp-RenderedSVG`) or an SVG inside an HTML output (the kernel puts
// the chart below the table, since JupyterLab shows the HTML of a bundle that has both).
const holders = [root, ...root.querySelectorAll('.jp-RenderedSVG, .jp-RenderedHTMLCommon')]
    .filter(node => node.matches('.jp-RenderedSVG, .jp-RenderedHTMLCommon'));
return holders.some(holder => [...holder.querySelectorAll('img, svg')].some(image => {
    const box = image.getBoundingClientRect();
    const decoded = image.tagName.toLowerCase() !== 'img' || (image.complete && image.naturalWidth > 0);
    return decoded && box.width > 0 && box.height > 0;
}));
"""

HTML_TABLE = """
const root = arguments[0];
return [...root.querySelectorAll('.jp-RenderedHTMLCommon table')].some(table => {
    const box = table.getBoundingClientRect();
    return table.querySelector('td, th') !== null && box.width > 0 && box.height > 0;
});
"""


def listing_is_highlighted(cell):
    """A `<pre>` in the cell whose classed spans (syntect's classed HTML) show at least two
    colours: the highlighting reached the page, its stylesheet included."""
    return cell.parent.execute_script(HIGHLIGHTED, cell)


def has_svg_chart(cell):
    """A chart on the page, laid out with a size: an `image/svg+xml` output rendered by JupyterLab
    (`.jp-RenderedSVG`, decoded: a broken SVG document leaves an image with no natural size) or an
    inline SVG in an HTML output."""
    return cell.parent.execute_script(SVG_CHART, cell)


def has_html_table(cell):
    """A `<table>` with cells in an HTML output, laid out (timing and benchmark tables)."""
    return cell.parent.execute_script(HTML_TABLE, cell)


# Expectations from the saved notebook: each saved output says what the page must show.


class TextOf(html.parser.HTMLParser):
    """The text of an HTML fragment as the page would hold it (no <style> or <script>), without
    the text of charts (<svg>), which is drawn from the measured times."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.parts, self.hidden = [], 0

    def handle_starttag(self, tag, attrs):
        self.hidden += tag in ("style", "script", "svg")

    def handle_endtag(self, tag):
        self.hidden -= tag in ("style", "script", "svg") and self.hidden > 0

    def handle_data(self, data):
        if not self.hidden:
            self.parts.append(data)


def html_text(fragment):
    parser = TextOf()
    parser.feed(fragment)
    parser.close()
    # Apart, as the page lays table cells apart (whitespace does not count, but masking a
    # duration needs its end: `2.7 µs0.5 µs` would not read as two).
    return " ".join(parser.parts)


def comparable_text(text):
    """Text without what changes between runs or with layout: addresses, durations, whitespace
    (the page's line breaks follow block elements and table cells, not the saved text's)."""
    return "".join(mask(text).split())


def expected_text(saved, mime):
    """The text the page should show for a saved output rendered as `mime`, or None where the
    text is not the saved one's (markdown, images)."""
    if saved.output_type == "stream":
        return saved.text
    if saved.output_type == "error":
        return ANSI_ESCAPE.sub("", "\n".join(saved.traceback))
    data = saved.get("data", {})
    if mime == "text/html":
        return html_text(data[mime])
    if mime == "text/plain":
        return data[mime]
    return None


def rendered_mimes(saved):
    """The MIME types JupyterLab may render a saved output as."""
    if saved.output_type == "stream":
        return {f"application/vnd.jupyter.{saved.name}"}
    if saved.output_type == "error":
        return {"application/vnd.jupyter.stderr"}
    return set(saved.get("data", {}))


# An autotune's progress display, as the page shows it once the cell has ended: its last line.
PROGRESS_SHOWN = re.compile(r"autotune \S+: \d+ (of \d+ )?variants?( \(\d+ cached\))?( in \d+\.\d s|, .*)")
PROGRESS_LAST = re.compile(r"autotune \S+: \d+ (of \d+ )?variants?( \(\d+ cached\))? in \d+\.\d s")


def check_outputs(cell, saved_cell):
    """The rendered outputs against the saved ones: as many, each rendered as a type from its
    bundle, with the same text, and with a table, a chart or a highlighted listing where the
    saved output has one. An autotune's progress display (shown or not as its run time decides)
    is left out of the comparison; where the page shows one, it must hold its last line, updated
    in place."""
    problems = []
    progress_shown = [output for output in cell.outputs if output.type == "display_data" and PROGRESS_SHOWN.fullmatch(output.text.strip())]
    for output in progress_shown:
        if not PROGRESS_LAST.fullmatch(output.text.strip()):
            problems.append(f"the progress display was left at {output.text.strip()!r}, not its last line")
    outputs = [output for output in cell.outputs if all(output is not shown for shown in progress_shown)]
    saved_outputs = [output for output in saved_cell.outputs if not progress(output)]
    if len(outputs) != len(saved_outputs):
        return problems + [f"{len(outputs)} outputs shown, {len(saved_outputs)} saved"]
    for number, (output, saved) in enumerate(zip(outputs, saved_outputs), 1):
        where = f"output {number}"
        if output.type != saved.output_type:
            problems.append(f"{where} is a {output.type}, saved as a {saved.output_type}")
            continue
        if output.mime not in rendered_mimes(saved):
            problems.append(f"{where} rendered as {output.mime!r}, saved as {sorted(rendered_mimes(saved))}")
            continue
        # A cell whose outputs timing decides (test_notebooks.varies) keeps its kinds, not its text.
        expected = None if varies(saved_cell) else expected_text(saved, output.mime)
        if expected is not None and comparable_text(output.text) != comparable_text(expected):
            problems.append(f"{where} shows\n{output.text}\nwhere the saved output is\n{expected}")
        data = saved.get("data", {})
        saved_html = data.get("text/html", "")
        if "<table" in saved_html and not has_html_table(output.element):
            problems.append(f"{where}: the saved output has a table, the page shows none")
        if "image/svg+xml" in data and not has_svg_chart(output.element):
            problems.append(f"{where}: the saved output has an SVG chart, the page shows none")
        if re.search(r"<pre\b[^>]*>.*<span class=", saved_html, re.S) and not listing_is_highlighted(output.element):
            problems.append(f"{where}: the saved output is a highlighted listing, the page shows it without colours")
    return problems


def check_prompts(cell, saved_cell):
    """Run All in a fresh kernel: the k-th code cell shows `[k]:`, and so does its result."""
    expected = f"[{cell.number}]:"
    problems = [] if cell.prompt == expected else [f"input prompt {cell.prompt!r}, expected {expected!r}"]
    for number, output in enumerate(cell.outputs, 1):
        wanted = expected if output.type == "execute_result" else ""
        if output.prompt != wanted:
            problems.append(f"output {number} has prompt {output.prompt!r}, expected {wanted!r}")
    return problems


def expect(predicate, what):
    """A cell check from a check of the cell's element: expect(has_svg_chart, "an SVG chart")."""
    return lambda cell, saved_cell: [] if predicate(cell.element) else [f"shows no {what}"]


# Checks of each code cell: (cell, saved cell) -> problems. A notebook's own checks go in
# NOTEBOOK_CHECKS by notebook and code cell number (its `[k]:`), for what its saved outputs do
# not say, e.g. {"bench.ipynb": {3: [expect(has_svg_chart, "SVG chart")]}}.
ALIGNMENT = """
// Where the text of each output starts: the left edge of its first non-empty text.
return [...arguments[0].querySelectorAll('.jp-OutputArea-output')].map(output => {
    const walker = document.createTreeWalker(output, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
        if (!node.textContent.trim() || node.parentElement.closest('svg, style, table')) continue;
        const range = document.createRange();
        range.selectNodeContents(node);
        const box = [...range.getClientRects()].find(rect => rect.width > 0);
        if (box) return box.left;
    }
    return null;
});
"""


def check_alignment(cell, saved_cell):
    """Definitions, values, printed output and tracebacks start at one left edge (an HTML `<pre>`
    with JupyterLab's margins once stood 20 px right of printed output)."""
    edges = [edge for edge in cell.element.parent.execute_script(ALIGNMENT, cell.element) if edge is not None]
    if edges and max(edges) - min(edges) > 2:
        return [f"outputs start at different left edges: {[round(edge) for edge in edges]}"]
    return []


EDITOR_TOKENS = """
// The colour of each word of the cell's source as the editor shows it.
const colours = {};
for (const span of arguments[0].querySelectorAll('.cm-content .cm-line span')) {
    const word = span.textContent.trim();
    if (word && !(word in colours)) colours[word] = getComputedStyle(span).color;
}
const plain = getComputedStyle(arguments[0].querySelector('.cm-content .cm-line')).color;
return {colours, plain};
"""


def editor_colours(words):
    """A check that the editor colours `words` (the C-Lisp mode of the JupyterLab extension):
    each is in a span of a colour other than plain text's."""

    def check(cell, saved_cell):
        found = cell.element.parent.execute_script(EDITOR_TOKENS, cell.element)
        colours, plain = found["colours"], found["plain"]
        plain_words = [word for word in words if colours.get(word, plain) == plain]
        return [f"the editor shows {plain_words} uncoloured (is the C-Lisp mode installed?)"] if plain_words else []

    return check


CELL_CHECKS = [check_prompts, check_alignment]
# The tour's first cell: forms, opcodes and types coloured by the extension's C-Lisp mode.
def shows_progress(cell, saved_cell):
    """A cell that runs for seconds (gemm.ipynb's autotune of 16 configurations) shows its
    progress display, left at its last line (check_outputs checks which line)."""
    shown = [output for output in cell.outputs if output.type == "display_data" and PROGRESS_SHOWN.fullmatch(output.text.strip())]
    return [] if len(shown) == 1 else [f"{len(shown)} progress displays shown, expected one"]


NOTEBOOK_CHECKS = {
    "tour.ipynb": {1: [editor_colours(["define", "ret", "call", "int", "add", "sub"])]},
    "gemm.ipynb": {13: [shows_progress]},
}


def notebook_problems(driver, name, saved):
    problems = []
    cells = code_cells(driver)
    saved_cells = [cell for cell in saved.cells if cell.cell_type == "code"]
    if len(cells) != len(saved_cells):
        return [f"{len(cells)} code cells shown, {len(saved_cells)} in the file"]
    checks = CELL_CHECKS + [check_outputs]
    for cell, saved_cell in zip(cells, saved_cells):
        extra = NOTEBOOK_CHECKS.get(name, {}).get(cell.number, [])
        for check in checks + extra:
            source = saved_cell.source.splitlines()[0] if saved_cell.source else ""
            problems += [f"code cell {cell.number} ({source}): {problem}" for problem in check(cell, saved_cell)]
    visible = driver.execute_script("return window.jupyterapp.shell.currentWidget.node.innerText")
    escapes = list(ANSI_VISIBLE.finditer(visible))
    if escapes:
        first = escapes[0]
        context = visible[max(0, first.start() - 30) : first.end() + 30].replace("\n", "⏎")
        problems.append(f"{len(escapes)} raw ANSI escapes visible ({sorted({match.group() for match in escapes})}), the first in …{context}…")
    problems += [f"dialog: {text}" for text in error_dialogs(driver)]
    return problems


# Running a notebook.

OPENED = """
const widget = window.jupyterapp && window.jupyterapp.shell.currentWidget;
return !!(widget && widget.context && widget.context.path === arguments[0] && widget.context.isReady
          && widget.sessionContext && widget.sessionContext.session && widget.sessionContext.session.kernel);
"""

RUN_ALL = """
const app = window.jupyterapp;
app.shell.collapseLeft();
window.quasiRunAll = {done: false};
app.shell.currentWidget.sessionContext.ready
    .then(() => app.commands.execute('notebook:run-all-cells'))
    .then(() => { window.quasiRunAll = {done: true}; },
          error => { window.quasiRunAll = {done: true, error: String(error)}; });
"""

# Run All has finished when its command says so, the kernel is idle and every code cell shows
# the number of its run: the kernel is idle between two cells too, and a cell not yet sent shows
# `[ ]:` (tour.ipynb's last two cells were once checked before they ran).
FINISHED = r"""
const widget = window.jupyterapp.shell.currentWidget;
const prompts = [...widget.node.querySelectorAll('.jp-CodeCell .jp-InputPrompt')].map(node => node.innerText);
const state = window.quasiRunAll || {};
return state.done && widget.sessionContext.kernelDisplayStatus === 'idle'
    && (state.error || prompts.every(prompt => /\[\d+\]/.test(prompt))) && state;
"""

SHUT_DOWN = """
const done = arguments[arguments.length - 1];
window.jupyterapp.serviceManager.sessions.shutdownAll().then(() => done(null), error => done(String(error)));
"""


def run_all(driver, lab, name):
    driver.get(f"{lab.url}/lab/tree/{name}?reset")
    wait_until(driver, OPENED, PAGE_TIMEOUT, f"{name} to open with its kernel", name)
    driver.execute_script(RUN_ALL)
    finished = wait_until(driver, FINISHED, RUN_ALL_TIMEOUT, f"Run All in {name} to finish")
    assert "error" not in finished, f"notebook:run-all-cells failed: {finished['error']}"


def screenshot(driver, path):
    """The whole notebook in one image: the viewport grows to the notebook's height. Returns
    where it went, or why there is none (the browser may be what failed)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        # The file browser off, as Run All leaves it: the notebook gets the width.
        driver.execute_script("if (window.jupyterapp) window.jupyterapp.shell.collapseLeft();")
        height = min(driver.execute_script(FULL_HEIGHT), 16000)
        width = driver.execute_script("return window.innerWidth")
        driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False})
        try:
            wait_until_quietly(driver, f"return window.innerHeight >= {height}", 10)
            driver.execute_script(TO_THE_TOP)
            image = driver.execute_cdp_cmd("Page.captureScreenshot", {"format": "png"})
            path.write_bytes(base64.b64decode(image["data"]))
        finally:
            driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
        return f"screenshot: {path}"
    except Exception as error:
        return f"no screenshot: {error}"


FULL_HEIGHT = """
const widget = window.jupyterapp && window.jupyterapp.shell.currentWidget;
const scroller = widget && widget.content && widget.content.node.querySelector('.jp-WindowedPanel-outer');
return scroller ? window.innerHeight + scroller.scrollHeight - scroller.clientHeight : document.documentElement.scrollHeight;
"""


TO_THE_TOP = """
const widget = window.jupyterapp && window.jupyterapp.shell.currentWidget;
const scroller = widget && widget.content && widget.content.node.querySelector('.jp-WindowedPanel-outer');
if (scroller) scroller.scrollTop = 0;
"""


def wait_until_quietly(driver, script, timeout):
    try:
        WebDriverWait(driver, timeout, poll_frequency=0.25).until(lambda driver: driver.execute_script(script))
    except TimeoutException:
        pass  # a shorter image is still worth having


def shut_down_kernels(driver):
    try:
        driver.execute_async_script(SHUT_DOWN)
    except Exception as error:  # the server's own shutdown stops them at the end
        print(f"kernels not shut down: {error}")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[path.name for path in NOTEBOOKS])
def test_notebook_in_the_browser(driver, lab, path):
    saved = nbformat.read(path, as_version=4)
    reason = unmet_requirement(saved, path)
    if reason:
        pytest.skip(reason)
    if not has_saved_outputs(saved):
        pytest.skip(f"{path.name} has no saved outputs to compare with (made without a device: save them on one)")
    shot = SCREENSHOTS / f"{path.stem}.png"
    shot.unlink(missing_ok=True)
    try:
        run_all(driver, lab, path.name)
        problems = notebook_problems(driver, path.name, saved)
    except BaseException:
        print(screenshot(driver, shot))
        print(f"JupyterLab's log ends:\n{lab.log_tail()}")
        raise
    else:
        if problems or os.environ.get("QUASI_SCREENSHOTS"):
            print(screenshot(driver, shot))
    finally:
        shut_down_kernels(driver)
    assert not problems, f"{path.name} in JupyterLab ({shot}):\n" + "\n".join(problems)


# The checks themselves, on a synthetic page shaped like JupyterLab's output area.

SVG = '<svg xmlns="http://www.w3.org/2000/svg" width="120" height="60"><rect width="120" height="60" fill="#4a90d9"/></svg>'
SYNTHETIC = f"""<!doctype html><html><head><style>
.kw {{ color: #a626a4; }} .num {{ color: #986801; }}
</style></head><body>
<div class="jp-Cell" id="highlighted"><div class="jp-RenderedHTMLCommon jp-OutputArea-output">
  <pre><span class="kw">define</span> ((sq int) (x int)) <span class="num">7</span></pre></div></div>
<div class="jp-Cell" id="plain-listing"><div class="jp-RenderedHTMLCommon jp-OutputArea-output">
  <pre>(define ((sq int) (x int)) 7)</pre></div></div>
<div class="jp-Cell" id="classes-without-stylesheet"><div class="jp-RenderedHTMLCommon jp-OutputArea-output">
  <pre><span class="keyword">define</span> <span class="number">7</span></pre></div></div>
<div class="jp-Cell" id="one-colour"><div class="jp-RenderedHTMLCommon jp-OutputArea-output">
  <pre><span class="kw">define</span> <span class="kw">ret</span></pre></div></div>
<div class="jp-Cell" id="svg-chart"><div class="jp-RenderedSVG jp-OutputArea-output">
  <img src="data:image/svg+xml;base64,{base64.b64encode(SVG.encode()).decode()}"></div></div>
<div class="jp-Cell" id="broken-svg"><div class="jp-RenderedSVG jp-OutputArea-output">
  <img src="data:image/svg+xml;base64,{base64.b64encode(b"<svg").decode()}"></div></div>
<div class="jp-Cell" id="svg-as-text"><div class="jp-RenderedText jp-OutputArea-output"><pre>{SVG.replace("<", "&lt;")}</pre></div></div>
<div class="jp-Cell" id="table"><div class="jp-RenderedHTMLCommon jp-OutputArea-output">
  <table><thead><tr><th>phase</th><th>time</th></tr></thead><tbody><tr><td>parse</td><td>1 ms</td></tr></tbody></table></div></div>
<div class="jp-Cell" id="table-as-text"><div class="jp-RenderedText jp-OutputArea-output"><pre>phase  time</pre></div></div>
</body></html>"""


def test_the_checks_on_a_synthetic_page(driver, tmp_path):
    page = tmp_path / "outputs.html"
    page.write_text(SYNTHETIC)
    driver.get(page.as_uri())

    def cell(name):
        return driver.find_element("id", name)

    assert listing_is_highlighted(cell("highlighted"))
    assert not listing_is_highlighted(cell("plain-listing"))
    assert not listing_is_highlighted(cell("classes-without-stylesheet"))
    assert not listing_is_highlighted(cell("one-colour"))
    assert has_svg_chart(cell("svg-chart"))
    assert not has_svg_chart(cell("broken-svg"))
    assert not has_svg_chart(cell("svg-as-text"))
    assert not has_svg_chart(cell("highlighted"))
    assert has_html_table(cell("table"))
    assert not has_html_table(cell("table-as-text"))


def test_expected_text_of_saved_outputs():
    error = nbformat.from_dict({"output_type": "error", "ename": "e", "evalue": "v", "traceback": ["\x1b[1m\x1b[38;5;9merror\x1b[0m: x", "  \x1b[34m|\x1b[0m"]})
    assert expected_text(error, "application/vnd.jupyter.stderr") == "error: x\n  |"
    shown = nbformat.from_dict({"output_type": "display_data", "data": {"text/html": "<style>b {}</style><pre><b>f</b> <span>:</span> (int) -&gt; int</pre>", "text/plain": "f : (int) -> int"}, "metadata": {}})
    assert expected_text(shown, "text/html").split() == ["f", ":", "(int)", "->", "int"]
    table = nbformat.from_dict({"output_type": "display_data", "data": {"text/html": "<table><tr><td>2.7 µs</td><td>0.5 µs</td></tr></table><div><svg><text>label 3 ms</text></svg></div>"}, "metadata": {}})
    assert comparable_text(expected_text(table, "text/html")) == comparable_text("<duration> <duration>")
    assert comparable_text("t = 1.5 ms\n  at 0xdeadbeef") == comparable_text("t = 20 µs at 0x10")
