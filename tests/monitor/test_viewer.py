"""``agentrl view``: the JSON API over a real tiny run's logs (filters, one episode with its
loss-mask spans, a live run's half-written line, a hostile tool result) and the page itself in
headless Chromium (a filter clicked, an episode opened, a screenshot saved)."""

import json
import shutil
import socket
import time

import pytest

from agentrl.monitor.metrics import read_jsonl

fastapi = pytest.importorskip("fastapi")  # agentrl[monitor]; .ci/run installs it

from fastapi.testclient import TestClient  # noqa: E402

from agentrl.monitor.viewer import create_app  # noqa: E402

HOSTILE = '<img src=x onerror="window.pwned=1"><script>window.pwned=1</script>'


@pytest.fixture(scope="module")
def run_copy(logged_run, tmp_path_factory):
    """The logged run plus one hand-made episode whose tool result is hostile HTML."""
    run = tmp_path_factory.mktemp("view") / "run"
    shutil.copytree(logged_run, run)
    episode = read_jsonl(run / "trajectories.jsonl")[0]
    hostile = [*episode["messages"], {"role": "tool", "content": HOSTILE}]
    episode.update(step=99, termination="failure", task_id="weather-hostile", messages=hostile)
    with (run / "trajectories.jsonl").open("a") as f:
        f.write(json.dumps(episode) + "\n")
    return run


@pytest.fixture(scope="module")
def client(run_copy):
    return TestClient(create_app(run_copy))


def test_every_logged_episode_is_listed_with_its_source(client, run_copy):
    listed = client.get("/api/episodes").json()
    train = read_jsonl(run_copy / "trajectories.jsonl")
    before, after = (read_jsonl(run_copy / f"eval_{w}.jsonl") for w in ("before", "after"))
    assert listed["total"] == len(train) + len(before) + len(after) == 12 + 1 + 2 + 2
    sources = [e["source"] for e in listed["episodes"]]
    assert sources.count("train") == 13 and sources.count("eval_after") == 2


def test_filters_select_by_termination_step_and_reward_layer(client):
    every = client.get("/api/episodes").json()["episodes"]
    for end in {e["termination"] for e in every}:
        got = client.get("/api/episodes", params={"termination": end}).json()["episodes"]
        assert got and {e["termination"] for e in got} == {end}
        assert len(got) == sum(e["termination"] == end for e in every)
    step1 = client.get("/api/episodes", params={"step": 1, "source": "train"}).json()
    assert step1["total"] == 4 and {e["step"] for e in step1["episodes"]} == {1}
    called = client.get("/api/episodes", params={"layer": "tool_choice", "layer_min": 0.5}).json()
    assert called["total"] == sum(e["layers"].get("tool_choice", 0) >= 0.5 for e in every)
    facets = client.get("/api/facets").json()
    assert facets["source"] == ["eval_after", "eval_before", "train"]
    assert "completion" in facets["layer"] and facets["level"] == sorted(facets["level"])


def test_one_episode_has_turns_calls_reward_and_the_loss_mask(client, run_copy):
    record = read_jsonl(run_copy / "trajectories.jsonl")[1]
    ep = client.get("/api/episodes/train:1").json()
    assert ep["messages"] == record["messages"] and ep["reward"] == record["reward"]
    spans = ep["spans"]
    assert sum(s["tokens"] for s in spans) == record["num_tokens"]
    assert sum(s["tokens"] for s in spans if s["mask"]) == record["num_policy_tokens"] > 0
    assert [s["mask"] for s in spans[:2]] == [0, 1]  # the prompt, then the first sampled turn
    assert all(a["mask"] != b["mask"] for a, b in zip(spans, spans[1:], strict=False))


def test_bad_ids_and_filters_are_named(client):
    missing = client.get("/api/episodes/train:999")
    assert missing.status_code == 404 and "train:999" in missing.json()["detail"]
    assert client.get("/api/episodes/nowhere:1").status_code == 404
    bad = client.get("/api/episodes", params={"level": "high"})
    assert bad.status_code == 422 and "level" in json.dumps(bad.json())


def test_a_live_runs_half_written_line_waits_for_its_end(tmp_path, logged_run):
    run = tmp_path / "run"
    shutil.copytree(logged_run, run)
    live = TestClient(create_app(run))
    count = live.get("/api/episodes").json()["total"]
    line = json.dumps(read_jsonl(run / "trajectories.jsonl")[0])
    with (run / "trajectories.jsonl").open("a") as f:
        f.write(line[:40])
    assert live.get("/api/episodes").json()["total"] == count
    with (run / "trajectories.jsonl").open("a") as f:
        f.write(line[40:] + "\n")
    assert live.get("/api/episodes").json()["total"] == count + 1


def test_the_run_endpoint_carries_the_doctor_and_the_curves(client):
    info = client.get("/api/run").json()
    assert info["state"] == "finished" and info["steps_logged"] == 3
    assert all({"code", "severity", "fix"} <= set(f) for f in info["findings"])
    curves = client.get("/api/curves").json()
    assert [p[0] for p in curves["series"]["reward/total"]] == [1, 2, 3]
    assert [p[0] for p in curves["evals"]] == [0, 3]


def test_view_refuses_a_directory_that_is_not_a_run(tmp_path):
    from typer.testing import CliRunner

    from agentrl.cli import app

    result = CliRunner().invoke(app, ["view", str(tmp_path), "--port", "0"])
    assert result.exit_code == 2 and "not a run directory" in result.output


def test_agentrl_view_serves_the_run_until_stopped(run_copy):
    import subprocess
    import sys
    import urllib.request

    port = _free_port()
    cmd = [sys.executable, "-c", "from agentrl.cli import app; app()", "view", str(run_copy),
           "--port", str(port)]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline, page = time.time() + 60, None
        while page is None and time.time() < deadline and proc.poll() is None:
            try:
                page = urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=2).read()
            except OSError:
                time.sleep(0.2)
        assert page is not None and b"<title>agentrl view</title>" in page
        url = f"http://127.0.0.1:{port}/api/episodes?source=eval_before"
        assert json.loads(urllib.request.urlopen(url, timeout=5).read())["total"] == 2
    finally:
        proc.terminate()
        proc.wait(timeout=20)


# -- the page in headless Chromium -------------------------------------------------------------
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def served(run_copy):
    from agentrl.serve.background import BackgroundServer

    server = BackgroundServer(create_app(run_copy), name="test-viewer")
    yield server.start() + "/"
    server.stop()


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    webdriver = pytest.importorskip("selenium.webdriver")
    from selenium.webdriver.chrome.service import Service

    chromium, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if not chromium or not driver:  # .ci/run installs Debian's chromium and chromium-driver
        pytest.skip("needs Debian's chromium and chromium-driver")
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run", "--window-size=1400,1000",
                 f"--user-data-dir={tmp_path_factory.mktemp('chromium')}"):  # fmt: skip
        options.add_argument(flag)
    drv = webdriver.Chrome(service=Service(driver), options=options)
    yield drv
    drv.quit()


def test_the_page_filters_opens_an_episode_and_shows_its_mask(browser, served, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select, WebDriverWait

    wait = WebDriverWait(browser, 20)
    browser.get(served)
    wait.until(lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-ready") == "1")
    rows = browser.find_elements(By.CSS_SELECTOR, "#episodes tbody tr")
    assert len(rows) == 17
    assert int(browser.find_element(By.ID, "curves").get_attribute("data-charts")) >= 3

    Select(browser.find_element(By.ID, "f-source")).select_by_value("train")
    Select(browser.find_element(By.ID, "f-step")).select_by_value("1")
    wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#episodes tbody tr")) == 4)
    cells = browser.find_elements(By.CSS_SELECTOR, "#episodes tbody tr td:nth-child(2)")
    assert {c.text for c in cells} == {"1"}

    def open_row(row):
        row_id = row.get_attribute("data-id")
        row.click()
        wait.until(lambda d: d.find_element(By.ID, "episode").get_attribute("data-id") == row_id)
        return row_id

    # which episodes call a tool follows the sampled tokens (machine-dependent floats), so
    # the one opened is drawn from every training step, not from step 1's four episodes
    Select(browser.find_element(By.ID, "f-step")).select_by_value("")
    wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#episodes tbody tr")) == 13)
    rows = browser.find_elements(By.CSS_SELECTOR, "#episodes tbody tr")
    with_calls = [r for r in rows if int(r.find_elements(By.TAG_NAME, "td")[7].text) > 0]
    assert with_calls, "the logged run has no training episode that calls a tool"
    assert open_row(with_calls[0]).startswith("train:")
    assert len(browser.find_elements(By.CSS_SELECTOR, "#reward tr")) >= 3  # the breakdown
    assert browser.find_elements(By.CSS_SELECTOR, "#turns .turn.assistant .call")
    assert browser.find_elements(By.CSS_SELECTOR, "#turns .turn.tool")
    sampled = browser.find_elements(By.CSS_SELECTOR, "#mask .m1")
    assert sampled and browser.find_elements(By.CSS_SELECTOR, "#mask .m0")
    assert "open" in with_calls[0].get_attribute("class")
    cut = [r for r in rows if r.find_elements(By.TAG_NAME, "td")[4].text == "length"]
    if cut:  # a turn cut at the token budget is shown from its sampled tokens
        open_row(cut[0])
        assert browser.find_elements(By.CSS_SELECTOR, "#turns .turn.cut")
        open_row(with_calls[0])
    shot = tmp_path / "viewer.png"
    assert browser.save_screenshot(str(shot)) and shot.stat().st_size > 20_000


def test_a_hostile_tool_result_is_shown_as_text(browser, served):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select, WebDriverWait

    wait = WebDriverWait(browser, 20)
    browser.get(served)
    wait.until(lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-ready") == "1")
    Select(browser.find_element(By.ID, "f-step")).select_by_value("99")
    wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#episodes tbody tr")) == 1)
    browser.find_element(By.CSS_SELECTOR, "#episodes tbody tr").click()
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#turns .turn.tool"))
    tools = browser.find_elements(By.CSS_SELECTOR, "#turns .turn.tool")
    assert HOSTILE in tools[-1].text  # the markup itself, as text
    assert browser.execute_script("return window.pwned") is None
    assert not browser.find_elements(By.CSS_SELECTOR, "#turns img")
