"""The generated code in services/cnbrain/v1 is what scripts/protos.sh makes from protos/: a
.proto edited without regenerating fails here, naming the files that differ."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
COMMITTED = ROOT / "services" / "cnbrain" / "v1"


def _generated(directory: Path) -> dict[str, bytes]:
    return {
        path.name: path.read_bytes()
        for path in sorted(directory.iterdir())
        if path.is_file() and path.suffix in (".py", ".pyi")
    }


def test_generated_code_matches_the_protos(tmp_path: Path) -> None:
    done = subprocess.run(
        ["bash", "scripts/protos.sh", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={"PATH": "/usr/bin:/bin", "PYTHON": sys.executable},
        check=False,
    )
    assert done.returncode == 0, f"scripts/protos.sh failed:\n{done.stdout}\n{done.stderr}"
    fresh = _generated(tmp_path / "cnbrain" / "v1")
    committed = _generated(COMMITTED)
    assert fresh, "scripts/protos.sh generated nothing"
    hint = "run `bash scripts/protos.sh` and commit services/cnbrain/v1"
    assert sorted(committed) == sorted(fresh), (
        f"missing: {sorted(set(fresh) - set(committed))}, "
        f"extra: {sorted(set(committed) - set(fresh))}; {hint}"
    )
    differing = [name for name in fresh if fresh[name] != committed[name]]
    assert not differing, f"out of date: {differing}; {hint}"
