"""deploy/prometheus: the alert rules and the scrape configuration are valid for promtool, and
the rules' unit tests (alerts_test.yml) pass; a broken rule or a wrong expectation is
reported. promtool must be installed (`bash scripts/tools.sh`); nothing is skipped."""

import shutil
import subprocess
from pathlib import Path

import pytest

PROMETHEUS = Path(__file__).resolve().parents[2] / "deploy" / "prometheus"
RULES = PROMETHEUS / "alerts.yml"
RULE_TESTS = PROMETHEUS / "alerts_test.yml"


def _promtool(*args: str, cwd: Path = PROMETHEUS) -> subprocess.CompletedProcess[str]:
    binary = shutil.which("promtool")
    if binary is None:
        pytest.fail("promtool is not installed: run `bash scripts/tools.sh` (or `make test`)")
    return subprocess.run(
        [binary, *args], cwd=cwd, capture_output=True, text=True, timeout=120, check=False
    )


def test_the_alert_rules_are_valid() -> None:
    done = _promtool("check", "rules", RULES.name)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS: 8 rules found" in done.stdout


def test_the_scrape_configuration_and_its_rules_are_valid() -> None:
    done = _promtool("check", "config", "prometheus.yml")
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_rules_unit_tests_pass() -> None:
    done = _promtool("test", "rules", RULE_TESTS.name)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def test_a_broken_rule_is_reported(tmp_path: Path) -> None:
    broken = tmp_path / "alerts.yml"
    broken.write_text(RULES.read_text().replace("== 0", "== == 0", 1))
    done = _promtool("check", "rules", broken.name, cwd=tmp_path)
    assert done.returncode != 0
    said = done.stdout + done.stderr
    assert '"CnbrainBrainDown": could not parse expression' in said, said


def test_an_alert_that_does_not_fire_as_expected_fails_its_unit_test(tmp_path: Path) -> None:
    (tmp_path / "alerts.yml").write_text(RULES.read_text())
    wrong = RULE_TESTS.read_text().replace("eval_time: 19m", "eval_time: 17m", 1)
    assert wrong != RULE_TESTS.read_text()
    (tmp_path / "alerts_test.yml").write_text(wrong)
    done = _promtool("test", "rules", "alerts_test.yml", cwd=tmp_path)
    assert done.returncode != 0
    assert "CnbrainAcceleratorModelExhausted" in done.stdout + done.stderr


def test_the_commit_alert_needs_the_series_the_brain_makes_at_its_start(tmp_path: Path) -> None:
    """Its rule test feeds the two-phase series as a national brain exports them: absent
    before it starts, 0 from its start. A series born at the first failure instead (what a
    brain that made its series on first use exported) never fires the alert."""
    (tmp_path / "alerts.yml").write_text(RULES.read_text())
    born_failing = RULE_TESTS.read_text().replace('"_x5 0x10 3x15"', '"_x15 3x15"', 1)
    assert born_failing != RULE_TESTS.read_text()
    (tmp_path / "alerts_test.yml").write_text(born_failing)
    done = _promtool("test", "rules", "alerts_test.yml", cwd=tmp_path)
    assert done.returncode != 0
    assert "CnbrainTwoPhaseCommitFailing" in done.stdout + done.stderr
