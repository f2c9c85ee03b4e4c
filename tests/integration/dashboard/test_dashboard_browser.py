"""The dashboard in a real browser: Debian's chromium, headless, driven by selenium, against a coordinator
process with real signed nodes, submissions and verdicts. It waits (bounded) for live updates, checks the
nodes table, the step counter advancing and the cheater shown as banned, and saves screenshots under the
test's run directory. A second test blocks the event stream and shows the wait for a live update then fails.

`make test` installs chromium (`make browser-deps`); where it could not, these tests fail saying so rather
than skip: deselect them on purpose with `-m "not browser"`.
"""

from __future__ import annotations

import shutil
import time

import pytest

from swarmrl.configs.connections import ConnectionLimits
from swarmrl.configs.contract import ContractSection
from swarmrl.configs.coordinator import CoordinatorConfig
from swarmrl.coordinator.client import AdminClient, NodeClient, TrainerClient, ValidatorClient
from swarmrl.identity import Identity
from swarmrl.retry import NO_RETRY
from swarmrl_lab.coordinator_double import coordinator_backend, leased_submit

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.timeout(180)]

ADMIN = "admin-secret"
RUN = "dash"
UPDATE_WAIT_S = 20.0  # the stream sends a summary every 2 s: ten of them
ORIGIN = "http://127.0.0.1:7000"


def relay_url(index: int) -> str:
    return f"http://127.0.0.1:{7001 + index}"


def browser_binaries() -> tuple[str, str]:
    chromium, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if chromium is None or driver is None:
        pytest.fail(
            "the browser test needs Debian's `chromium` and `chromium-driver` (found chromium="
            f"{chromium}, chromedriver={driver}): `make browser-deps` installs them (apt-get); "
            'deselect these tests on purpose with -m "not browser"',
            pytrace=False,
        )
    return chromium, driver


@pytest.fixture
def browser():
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is in the dev extra")
    from selenium.webdriver.chrome.service import Service

    chromium, driver = browser_binaries()
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"):
        options.add_argument(flag)
    options.add_argument("--window-size=1400,1000")
    # The system chromedriver, named: selenium's own driver manager would try the network.
    session = webdriver.Chrome(service=Service(executable_path=driver), options=options)
    try:
        yield session
    finally:
        session.quit()


class World:
    """A run with a trainer, a validator, two honest workers and a cheater, every call signed."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.admin = AdminClient.at(url, admin_token=ADMIN, retry=NO_RETRY)
        self.trainer = TrainerClient.at(url, Identity.generate(), retry=NO_RETRY)
        self.validator = ValidatorClient.at(url, Identity.generate(), retry=NO_RETRY)
        self.admin.create_run(RUN, self.trainer.node_id, ContractSection(), bound_claims=False)
        self.admin.add_validator(RUN, self.validator.node_id)
        self.honest = [self._member() for _ in range(2)]
        self.cheater = self._member()
        self.relays = [self._member(role="relay") for _ in range(2)]
        self.step = 0
        self.trainer.publish_step(RUN, 0)

    def _member(self, role: str = "worker") -> NodeClient:
        node = NodeClient.at(self.url, Identity.generate(), retry=NO_RETRY)
        node.register()
        node.join(RUN, ContractSection(), role=role)
        return node

    def honest_work(self, reward: float) -> None:
        for node in self.honest:
            node.heartbeat(RUN, self.step)
            leased_submit(node, RUN, f"{node.node_id}-{self.step}".encode(), rows=2, tokens=20)
        self._judge(lambda _: (True, "all"), reward)

    def cheat(self) -> None:
        self.cheater.heartbeat(RUN, self.step)
        leased_submit(self.cheater, RUN, b"forged", rows=2, tokens=20)
        self._judge(lambda node: (node != self.cheater.node_id, "toploc"), 0.0)

    def _judge(self, decide, reward: float) -> None:
        while (submission := self.validator.lease_validation(RUN).submission) is not None:
            accept, check = decide(submission.node_id)
            summary = {"rows": submission.rows, "mean_reward": reward, "passed": accept}
            self.validator.post_verdict(
                submission.id,
                accept=accept,
                check=check,
                rewards_summary=summary,
                rows=submission.rows,
                tokens=submission.tokens,
            )

    def relay_reports(self, version: int) -> None:
        """Relay 0 mirrors the origin, relay 1 mirrors relay 0; both hold `version` (2 MB in 0.5 s and 1 s)."""
        for index, node in enumerate(self.relays):
            upstream = ORIGIN if index == 0 else relay_url(index - 1)
            held = {"version": version, "complete": True, "bytes": 2_000_000, "seconds": 0.5 * (index + 1)}
            report = {
                "url": relay_url(index),
                "upstreams": [upstream],
                "versions": [held],
                "served_bytes": 10**6,
            }
            node.heartbeat(RUN, relay=report)

    def next_step(self) -> int:
        self.step += 1
        self.trainer.publish_step(RUN, self.step)
        return self.step


@pytest.fixture
def world(tmp_path):
    config = CoordinatorConfig(requests_per_minute=100_000)
    with coordinator_backend("sqlite", tmp_path / "coordinator", config=config, admin_token=ADMIN) as proc:
        yield World(proc.url)


@pytest.fixture
def streamless_world(tmp_path):
    """A coordinator whose budget of long-lived streams is spent (none at all)."""
    config = CoordinatorConfig(
        requests_per_minute=100_000,
        connections=ConnectionLimits(max_streams_total=0, max_streams_per_address=0),
    )
    with coordinator_backend("sqlite", tmp_path / "coordinator", config=config, admin_token=ADMIN) as proc:
        yield World(proc.url)


def wait_for(browser, predicate, what: str, timeout_s: float = UPDATE_WAIT_S):
    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.support.ui import WebDriverWait

    try:
        return WebDriverWait(browser, timeout_s, poll_frequency=0.2).until(lambda b: predicate(b))
    except TimeoutException:
        raise AssertionError(f"the dashboard did not show {what} within {timeout_s:.0f}s") from None


def shown_step(browser) -> int | None:
    value = browser.find_element("id", "step").get_attribute("data-step")
    return int(value) if value else None


def update_count(browser) -> int:
    return int(browser.find_element("id", "updates").get_attribute("data-count") or 0)


def settled_update_count(browser, quiet_s: float = 1.0, attempts: int = 10) -> int:
    """The page's update count once it has not moved for `quiet_s` (a loopback fetch in flight lands by then)."""
    count = update_count(browser)
    for _ in range(attempts):
        time.sleep(quiet_s)
        count, before = update_count(browser), count
        if count == before:
            return count
    raise AssertionError(f"the page kept updating for {attempts * quiet_s:.0f} s with its summary blocked")


ROWS_SCRIPT = """
return Array.from(document.querySelectorAll('#nodes tbody tr')).map(row => ({
  id: row.dataset.nodeId, banned: row.dataset.banned === 'true', role: row.cells[1].textContent,
  cells: Array.from(row.cells).map(c => c.textContent)}));
"""


def node_rows(browser) -> dict[str, dict]:
    """The nodes table, read in one script call (a live re-render cannot leave a half-read table)."""
    rows = {}
    for row in browser.execute_script(ROWS_SCRIPT):
        cells = row["cells"]
        rows[row["id"]] = {
            "banned": row["banned"],
            "state": cells[2],
            "accepted": cells[5],
            "rejected": cells[6],
            "banned_cell": cells[11],
            "rejected_by": cells[12],
        }
    return rows


def banned_rows(browser, node_id: str) -> dict[str, dict] | None:
    rows = node_rows(browser)
    return rows if rows.get(node_id, {}).get("banned") else None


def full_page_png(browser, width: int) -> bytes:
    """The whole page in one picture: the window `width` wide and as tall as the page is at that width."""
    browser.set_window_size(width, 844)
    height = browser.execute_script("return document.documentElement.scrollHeight")
    browser.set_window_size(width, height + 140)
    return browser.get_screenshot_as_png()


def test_the_dashboard_updates_live_and_shows_the_cheater_banned(browser, world, tmp_path):
    world.honest_work(reward=0.25)
    browser.get(f"{world.url}/dashboard")
    wait_for(browser, lambda b: len(node_rows(b)) == 5 and shown_step(b) == 0, "the five nodes at step 0")
    assert browser.find_element("id", "islands").is_displayed() is False  # no island merge reported yet
    assert browser.find_element("id", "reward-functions").is_displayed() is False  # nor a reward function
    assert browser.find_element("id", "run-id").text == RUN

    # Everything below reaches the page only through the event stream: it never fetches the summary again.
    updates = update_count(browser)
    world.cheat()
    step = world.next_step()
    world.honest_work(reward=0.75)
    wait_for(browser, lambda b: shown_step(b) == step, f"step {step}")
    cheater = world.cheater.node_id
    rows = wait_for(browser, lambda b: banned_rows(b, cheater), "the cheater banned")
    assert update_count(browser) > updates
    assert rows[cheater]["banned_cell"] == "BANNED" and rows[cheater]["rejected_by"] == "toploc×1"
    assert rows[cheater]["state"] == "ejected" and rows[cheater]["accepted"] == "0"
    for node in world.honest:
        assert rows[node.node_id]["banned"] is False and rows[node.node_id]["banned_cell"] == "no"
        assert rows[node.node_id]["accepted"] == "2" and rows[node.node_id]["rejected"] == "0"
        assert rows[node.node_id]["state"] == "healthy"
    rejections = browser.execute_script(
        "return Array.from(document.querySelectorAll('#rejections tbody td')).map(c => c.textContent)"
    )
    assert rejections == ["toploc", "1"]
    # The reward curve has a point per judged step.
    wait_for(
        browser, lambda b: len(b.find_elements("css selector", "#reward-chart circle")) == 2, "two rewards"
    )

    # The trainer's held-out evals (one line per figure), the relays' reports, an island merge.
    world.trainer.report_metrics(RUN, 1, {"eval/avg@8": 0.25, "eval/pass@8": 0.5, "loss": 0.1})
    world.trainer.report_metrics(RUN, 2, {"eval/avg@8": 0.375, "eval/pass@8": 0.625})
    world.trainer.report_metrics(RUN, 2, {"islands/island": 0, "islands/islands": 2, "islands/round": 1})
    world.trainer.report_metrics(RUN, 2, {"islands/participants": 2, "islands/contributors": 2})
    world.trainer.report_metrics(RUN, 2, {"islands/wire_bytes": 1_500_000, "islands/committed": 1})
    for at, correct in ((1, 0.25), (2, 0.5)):  # two reward functions of the user's, one line each
        world.trainer.report_metrics(RUN, at, {"rewards/correct/mean": correct, "rewards/brief/mean": 0.2})
    world.relay_reports(version=1)
    step = world.next_step()
    wait_for(browser, lambda b: shown_step(b) == step, f"step {step}")
    wait_for(browser, lambda b: len(b.find_elements("css selector", "#eval-chart circle")) == 4, "four evals")
    legend = browser.execute_script(
        "return Array.from(document.querySelectorAll('#eval-legend li')).map(li => li.textContent)"
    )
    assert legend == ["eval/avg@8", "eval/pass@8"]  # eval figures only: the loss is not an accuracy
    assert browser.find_element("id", "reward-functions").is_displayed()
    assert len(browser.find_elements("css selector", "#function-chart circle")) == 4
    functions = browser.execute_script(
        "return Array.from(document.querySelectorAll('#function-legend li')).map(li => li.textContent)"
    )
    assert functions == ["brief", "correct"]
    versions = browser.execute_script(
        "return Array.from(document.querySelectorAll('#versions tbody tr'))"
        ".map(r => Array.from(r.cells).map(c => c.textContent))"
    )
    # step, manifest, published, nodes holding it, mean reward, relays complete, mirror MB/s: both honest
    # nodes generate with policy 1, both relays hold it (4 MB in 1.5 s).
    assert [(row[0], row[3], row[4], row[5], row[6]) for row in versions] == [
        ("2", "0", "–", "0 / 2", "–"),
        ("1", "2", "0.750 (4 rows)", "2 / 2", "2.7"),
        ("0", "0", "0.250 (4 rows)", "0 / 2", "–"),
    ]
    tree = browser.execute_script(
        "return Array.from(document.querySelectorAll('#relay-tree li'))"
        ".map(li => [li.dataset.depth, li.dataset.nodeId || '', li.firstChild.textContent])"
    )
    (origin, first, second) = tree
    assert origin == ["0", "", f"origin {ORIGIN}"]
    assert first[:2] == ["1", world.relays[0].node_id] and relay_url(0) in first[2] and "v1" in first[2]
    assert second[:2] == ["2", world.relays[1].node_id] and relay_url(1) in second[2]
    roles = {row["id"]: row["role"] for row in browser.execute_script(ROWS_SCRIPT)}
    assert [roles[r.node_id] for r in world.relays] == ["relay", "relay"]
    assert browser.find_element("id", "islands").is_displayed()
    cards = [
        browser.find_element("id", name).text for name in ("island-of", "island-rounds", "island-quorum")
    ]
    assert cards == ["0 of 2", "1", "2 / 2"] and browser.find_element("id", "island-bytes").text == "1.5 MB"
    merges = browser.execute_script(
        "return Array.from(document.querySelectorAll('#island-merges tbody td')).map(c => c.textContent)"
    )
    assert merges[:4] == ["2", "1", "2", "2"] and merges[-2:] == ["yes", "no"]
    page = browser.page_source
    assert ADMIN not in page
    (tmp_path / "dashboard.png").write_bytes(full_page_png(browser, 1400))

    # At phone width the page itself does not scroll sideways (wide tables scroll inside their boxes).
    browser.set_window_size(390, 844)
    overflow = browser.execute_script("return document.documentElement.scrollWidth - window.innerWidth")
    assert overflow <= 0, f"the page is {overflow}px wider than a phone screen"
    (tmp_path / "dashboard-phone.png").write_bytes(full_page_png(browser, 390))
    for name in ("dashboard.png", "dashboard-phone.png"):
        assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_wait_fails_when_the_page_gets_no_live_update(browser, world):
    """With the event stream blocked the page falls back to polling; with the polls blocked too it shows what it
    had and nothing after: the live check of the test above must then fail, not pass."""
    browser.execute_cdp_cmd("Network.enable", {})
    browser.execute_cdp_cmd("Network.setBlockedURLs", {"urls": ["*/summary/stream*"]})
    browser.get(f"{world.url}/dashboard")
    wait_for(browser, lambda b: shown_step(b) == 0, "step 0")
    browser.execute_cdp_cmd("Network.setBlockedURLs", {"urls": ["*/summary*"]})
    shown = settled_update_count(browser)  # a poll already under way when the block began may still render
    step = world.next_step()
    with pytest.raises(AssertionError, match=f"did not show step {step}"):
        wait_for(browser, lambda b: shown_step(b) == step, f"step {step}", timeout_s=8.0)
    assert update_count(browser) == shown
    assert browser.find_element("id", "live-dot").get_attribute("class") == "dot off"


def test_the_page_polls_when_the_server_has_no_stream_to_spare(browser, streamless_world):
    """The stream is refused (503 stream_budget): the page says it polls, and still follows the run."""
    world = streamless_world
    browser.get(f"{world.url}/dashboard")
    wait_for(browser, lambda b: shown_step(b) == 0, "step 0")
    wait_for(browser, lambda b: b.find_element("id", "live").text == "polling", "the polling mode")
    step = world.next_step()
    wait_for(browser, lambda b: shown_step(b) == step, f"step {step} by polling")


def test_the_relay_tree_bomb_is_drawn_at_once(browser, world):
    """Eleven relay keys naming each other as upstreams (issue 29: the page stopped responding): each relay is
    drawn once, under the origin's breadth-first tree, and the page keeps updating."""
    relays = [world._member(role="relay") for _ in range(11)]
    for i, node in enumerate(relays):
        others = [relay_url(j) for j in range(11) if j != i]
        upstreams = ([ORIGIN] if i == 0 else []) + others
        node.heartbeat(RUN, relay={"url": relay_url(i), "upstreams": upstreams[:8], "versions": []})
    browser.set_script_timeout(10)
    browser.get(f"{world.url}/dashboard")
    wait_for(browser, lambda b: shown_step(b) == 0, "step 0")
    tree = browser.execute_script(
        "return Array.from(document.querySelectorAll('#relay-tree li')).map(li => li.dataset.nodeId || 'origin')"
    )
    assert sorted(tree) == sorted(["origin", *(r.node_id for r in relays)])
    step = world.next_step()
    wait_for(browser, lambda b: shown_step(b) == step, f"step {step}")
