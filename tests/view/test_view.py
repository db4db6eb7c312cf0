"""The run viewer (``python -m arenarl_jax.view``) on a real smoke run's logs: the pages exist,
load nothing from outside, show every bracket and score; hostile strings in the logs stay text;
bad input is named; and in headless Chromium the filters hide what they should.

One quickstart ``:smoke`` run (1 RL step, groups of 4: a three-round single elimination) in a
subprocess serves the whole file. The browser test needs Debian's ``chromium`` and
``chromium-driver`` and the ``selenium`` package (``scripts/setup.sh --judge`` installs them):
without them it skips, or fails when ``ARENARL_REQUIRE_BROWSER=1`` (CI).
"""
import html.parser
import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from arenarl_jax import view
from arenarl_jax.view import __main__ as view_cli
from arenarl_jax.testing import xla_flags
from arenarl_jax.view import markup

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GROUP_SIZE = 4
HOSTILE = ("<script>alert(1)</script>", "\"><img src=x onerror=alert(2)>", "</script>",
           "{{7*7}} ${x}", "'onmouseover='alert(3)", "é中文\U0001F600 \u202e \x00 \ud800",
           "<!-- --><svg onload=alert(4)>", "javascript:alert(5)")


@pytest.fixture(scope="module")
def run(tmp_path_factory, dataset_dir):
  """A smoke run's workdir (eval logs at steps 0 and 1, the rollout log of step 1)."""
  workdir = str(tmp_path_factory.mktemp("view_run"))
  proc = subprocess.run(
      [sys.executable, "-m", "arenarl_jax.main", "--config=configs/quickstart.py:smoke",
       f"--workdir={workdir}", "--config.rl.steps=1",
       f"--config.sampling.group_size={GROUP_SIZE}", f"--config.data.dir={dataset_dir}"],
      cwd=ROOT, env=dict(os.environ, XLA_FLAGS=xla_flags.with_devices(1)), capture_output=True,
      text=True, timeout=600, check=False)
  assert proc.returncode == 0, proc.stderr[-3000:]
  return workdir


@pytest.fixture(scope="module")
def site(run):
  """The site of the run (default folder), written by the CLI."""
  assert view_cli.main(["--workdir", run]) == 0
  return os.path.join(run, "view")


def _rows(path):
  with open(path, encoding="utf-8") as f:
    return [json.loads(line) for line in f]


def _write_rows(path, rows):
  with open(path, "w", encoding="utf-8") as f:
    for r in rows:
      f.write(json.dumps(r) + "\n")  # ASCII: a lone surrogate survives as an escape


def _read(path):
  with open(path, encoding="utf-8") as f:
    return f.read()


class _Elements(html.parser.HTMLParser):
  """Every start tag with its attributes, and the text of every script element."""

  def __init__(self):
    super().__init__()
    self.tags, self.scripts, self._in_script = [], [], False

  def handle_starttag(self, tag, attrs):
    self.tags.append((tag, dict(attrs)))
    self._in_script = tag == "script"
    if self._in_script:
      self.scripts.append("")

  def handle_endtag(self, tag):
    self._in_script = self._in_script and tag != "script"

  def handle_data(self, data):
    if self._in_script:
      self.scripts[-1] += data


def _elements(text):
  parser = _Elements()
  parser.feed(text)
  parser.close()
  return parser


# ------------------------------------------------------------------------------------ the pages
def test_every_log_has_a_self_contained_page(run, site):
  names = sorted(os.listdir(site))
  assert names == ["eval_00000000.html", "eval_00000001.html", "index.html",
                   "step_00000001.html"]
  index = _read(os.path.join(site, "index.html"))
  for name in names[:2] + names[3:]:
    assert f'href="{name}"' in index
  for name in names:
    text = _read(os.path.join(site, name))
    for tag, attrs in _elements(text).tags:
      for key in ("src", "href", "action", "data", "poster"):
        value = attrs.get(key) or ""
        assert "://" not in value and not value.startswith("//"), (name, tag, key, value)
      assert tag not in ("link", "img", "iframe", "object", "embed", "base"), (name, tag)
    assert "@import" not in text and "url(" not in text
    assert "default-src 'none'" in text.replace("&#x27;", "'")  # the page's CSP


def test_a_step_page_draws_every_group_bracket_and_score(run, site):
  rows = _rows(os.path.join(run, "rollouts", "step_00000001.jsonl"))
  text = _read(os.path.join(site, "step_00000001.html"))
  assert text.count('class="bracket"') == len(rows) == text.count('class="group"')
  for r in rows:
    rounds = sorted({m["round"] for m in r["matches"]})
    assert rounds == [0, 1, 2] and len(r["matches"]) == GROUP_SIZE + 2  # the smoke's bracket
    section = text[text.index(f'id="g{r["group"]}"'):]
    section = section[:section.index("</section>")]
    assert section.count('class="round"') == len(rounds)
    assert section.count('class="match ') == len(r["matches"])
    for k, m in enumerate(r["matches"]):
      detail = section[section.index(f'id="g{r["group"]}-m{k}"'):]
      assert f"Match {k + 1}, round {m['round'] + 1}: #{m['i']} (P) vs #{m['j']} (Q)" in detail
      fwd = m["detail"]["dimensions"]["p"]["forward"]["path"]
      assert "path: breadth" in detail and f"<td>{fwd[0]:.3g}</td>" in detail
      assert f"{m['score_p']:.3g}" in detail and f"{m['score_q']:.3g}" in detail
    standing = section[section.index('class="standing"'):]
    labels = re.findall(r"<tr><td>#(\d+)</td>", standing)
    assert [int(x) for x in labels] == r["order"]  # best first
    assert section.count('class="player"') == GROUP_SIZE


def test_an_eval_page_shows_matches_verdicts_and_opponents(run, site):
  rows = _rows(os.path.join(run, "eval", "eval_00000001.jsonl"))
  text = _read(os.path.join(site, "eval_00000001.html"))
  trajectories = [r for r in rows if r["kind"] == "trajectory"]
  assert text.count('class="group"') == len(trajectories) == 5
  assert "vs reference: win rate" in text and "vs sft: win rate" in text
  for r in trajectories:
    section = text[text.index(f'id="g{r["index"]}"'):]
    section = section[:section.index("</section>")]
    assert f'data-subtask="{r["subtask"]}"' in section
    assert f'data-solved="{"solved" if r["solved"] else "unsolved"}"' in section
    for u in r["unmet"]:
      assert f"<li>{u}</li>" in section
    if not r["solved"]:
      assert f"met {r['met']} of {r['total']}" in section
    for m in r["matches"]:
      assert f"policy (P) vs {m['opponent']} (Q)" in section
    assert 'class="call"' in section  # the reference's tool calls, with their arguments


def test_group_outcomes_follow_the_scores(run, site):
  text = _read(os.path.join(site, "eval_00000001.html"))
  rows = [r for r in _rows(os.path.join(run, "eval", "eval_00000001.jsonl"))
          if r["kind"] == "trajectory"]
  names = {1.0: "won", 0.0: "lost", 0.5: "tied", None: "failed"}
  for r in rows:
    outcomes = " ".join(sorted({names[m["outcome"]] for m in r["matches"]}))
    assert f'id="g{r["index"]}" data-subtask="{r["subtask"]}" data-outcomes="{outcomes}"' in text


# ----------------------------------------------------------------------------- hostile strings
def _poison(run, tmp_path):
  """A copy of the run's logs with hostile strings in every field a policy or judge can write."""
  work = tmp_path / "hostile"
  shutil.copytree(run, work, ignore=shutil.ignore_patterns("view", "sft", "checkpoints", "tb"))
  bad = " ".join(HOSTILE)
  call = {"id": "c0", "type": "function",
          "function": {"name": HOSTILE[1], "arguments": json.dumps({"q": bad})}}
  step = work / "rollouts" / "step_00000001.jsonl"
  rows = _rows(step)
  for r in rows:
    r["task_id"], r["subtask"], r["query"] = bad, HOSTILE[0], bad
    for t in r["trajectories"]:
      t["finish_reason"] = HOSTILE[1]
      t["messages"] = [{"role": HOSTILE[0], "content": bad},
                       {"role": "assistant", "content": bad, "reasoning_content": bad,
                        "tool_calls": [call]},
                       {"role": "tool", "content": bad},
                       {"role": "assistant", "content": "</script>" + bad}]
    r["matches"][0].update(ok=False, error=bad)
    r["matches"][1]["detail"]["reasons"] = [bad, {"why": bad}]
    r["matches"][1]["detail"][HOSTILE[1]] = bad
  _write_rows(step, rows)
  ev = work / "eval" / "eval_00000001.jsonl"
  rows = _rows(ev)
  for r in rows[1:]:
    r["task_id"], r["subtask"], r["unmet"] = bad, HOSTILE[2], [bad, HOSTILE[0]]
    r["messages"][-1]["content"] = bad
    r["matches"][0]["opponent"] = HOSTILE[1]
    r["matches"][0]["opponent_messages"][-1]["content"] = bad
  _write_rows(ev, rows)
  return str(work)


def test_hostile_strings_stay_text(run, tmp_path):
  work = _poison(run, tmp_path)
  written = view.write_site(work, str(tmp_path / "site"))
  for path in written:
    text = _read(path)
    found = _elements(text)
    scripts = [t for t, _ in found.tags if t == "script"]
    assert len(scripts) == (0 if path.endswith("index.html") else 1), path
    assert all(s == markup.SCRIPT for s in found.scripts), path  # only the viewer's own script
    for tag, attrs in found.tags:
      assert tag not in ("img", "svg", "iframe"), (path, tag)
      assert not any(k.startswith("on") for k in attrs), (path, tag, attrs)
      assert not any(str(v).lstrip().lower().startswith("javascript:")
                     for k, v in attrs.items() if k in ("href", "src")), (path, tag, attrs)
    assert "<script>alert" not in text and "<img" not in text and "<svg" not in text
  step = _read(str(tmp_path / "site" / "step_00000001.html"))
  assert "&lt;script&gt;alert(1)&lt;/script&gt;" in step  # shown, as text
  assert "&quot;&gt;&lt;img src=x onerror=alert(2)&gt;" in step
  assert "{{7*7}}" in step and "é中文\U0001F600" in step
  assert 'class="match failed"' in step and "Judge&#x27;s reasons:" in step


def test_filters_of_hostile_subtasks_compare_attributes_not_markup(run, tmp_path):
  work = _poison(run, tmp_path)
  view.write_site(work, str(tmp_path / "site"))
  text = _read(str(tmp_path / "site" / "eval_00000001.html"))
  assert 'data-value="&lt;/script&gt;"' in text and 'data-subtask="&lt;/script&gt;"' in text


# --------------------------------------------------------------------------------- bad input
def test_a_corrupt_row_is_named_with_its_file_and_line(run, tmp_path, capsys):
  work = tmp_path / "corrupt"
  shutil.copytree(run, work, ignore=shutil.ignore_patterns("view", "sft", "checkpoints", "tb"))
  step = work / "rollouts" / "step_00000001.jsonl"
  lines = step.read_text(encoding="utf-8").splitlines()
  step.write_text(lines[0] + "\n" + lines[1][:40] + "\n", encoding="utf-8")
  assert view_cli.main(["--workdir", str(work), "--out", str(tmp_path / "out")]) == 2
  err = capsys.readouterr().err
  assert f"{step}:2: not valid JSON" in err
  step.write_text(lines[0] + "\n" + json.dumps({"kind": "group", "trajectories": 3}) + "\n",
                  encoding="utf-8")
  with pytest.raises(view.ViewError, match=re.escape(f"{step}:2: key 'trajectories': expected "
                                                     "list, got int")):
    view.write_site(str(work), str(tmp_path / "out"))


def test_a_missing_workdir_or_logs_get_a_clear_message(tmp_path, capsys):
  assert view_cli.main(["--workdir", str(tmp_path / "nowhere")]) == 2
  assert "nowhere: no such directory" in capsys.readouterr().err
  with pytest.raises(view.ViewError, match="no eval/eval_<step>.jsonl or rollouts/step_<step>"):
    view.write_site(str(tmp_path))


# ------------------------------------------------------------------------------ in a browser
def _browser():
  """A headless Chromium driven by selenium, or the reason there is none."""
  chromium = shutil.which("chromium") or shutil.which("chromium-browser")
  driver = shutil.which("chromedriver")
  try:
    from selenium import webdriver  # pylint: disable=import-outside-toplevel
  except ImportError:
    return None, "selenium is not installed (pip install -e '.[test]')"
  if not chromium or not driver:
    return None, ("chromium and chromedriver are not installed (apt-get install chromium "
                  "chromium-driver, or bash scripts/setup.sh --judge)")
  options = webdriver.ChromeOptions()
  options.binary_location = chromium
  for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
              "--window-size=1400,1000"):
    options.add_argument(arg)
  return webdriver.Chrome(options=options,
                          service=webdriver.ChromeService(executable_path=driver)), ""


def test_the_filters_work_in_headless_chromium(run, site, tmp_path):
  browser, why = _browser()
  if browser is None:
    if os.environ.get("ARENARL_REQUIRE_BROWSER") == "1":
      pytest.fail(f"ARENARL_REQUIRE_BROWSER=1 but {why}")
    pytest.skip(why)
  from selenium.webdriver.common.by import By  # pylint: disable=import-outside-toplevel
  try:
    browser.get("file://" + os.path.join(site, "step_00000001.html"))
    groups = browser.find_elements(By.CSS_SELECTOR, "section.group")
    assert len(groups) == 2 and all(g.is_displayed() for g in groups)
    for g in groups:
      assert len(g.find_elements(By.CSS_SELECTOR, ".bracket .round:not(.final)")) == 3
      assert "sum (0-20)" in g.text and "path: breadth" in g.text
    assert browser.find_element(By.ID, "shown").text == "2 of 2 shown"

    browser.get("file://" + os.path.join(site, "eval_00000001.html"))
    groups = browser.find_elements(By.CSS_SELECTOR, "section.group")
    subtask = groups[0].get_attribute("data-subtask")
    button = browser.find_element(
        By.CSS_SELECTOR, f'button[data-filter="subtask"][data-value="{subtask}"]')
    button.click()
    shown = [g for g in groups if g.is_displayed()]
    assert shown and all(g.get_attribute("data-subtask") == subtask for g in shown)
    assert len(shown) < len(groups)
    assert "active" in button.get_attribute("class")
    browser.save_screenshot(str(tmp_path / "eval_filtered.png"))
    browser.find_element(By.CSS_SELECTOR, 'button[data-filter="subtask"][data-value=""]').click()
    browser.find_element(By.CSS_SELECTOR, 'button[data-filter="outcome"][data-value="won"]'
                         ).click()
    for g in groups:
      assert g.is_displayed() == ("won" in g.get_attribute("data-outcomes").split())
    browser.find_element(By.CSS_SELECTOR, 'button[data-filter="outcome"][data-value=""]').click()
    browser.find_element(By.CSS_SELECTOR, 'button[data-filter="solved"][data-value="unsolved"]'
                         ).click()
    for g in groups:
      assert g.is_displayed() == (g.get_attribute("data-solved") == "unsolved")
    browser.save_screenshot(str(tmp_path / "eval.png"))
    assert (tmp_path / "eval.png").stat().st_size > 10_000
  finally:
    browser.quit()
