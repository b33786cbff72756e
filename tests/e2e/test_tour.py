"""The tour (docs/tour.md): its shell script, run as written with bash against both services on free
ports, and what a new user should see in it — bins that split the sample's labels, an audit that finds
an advantage, a budget refusal that says what is left, and no stray lines on stderr."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow.csv as pcsv
import pytest

from labeldp.mechanisms import PublishedMechanism, explicit_support
from labeldp.processes import free_port
from labeldp.terminal import numbers

ROOT = Path(__file__).resolve().parents[2]
TOUR = ROOT / "docs" / "tour.md"
# after the tour, before its trap stops the services: the release as the service answers it
EPILOGUE = 'labeldp labels releases show "$REL" --json > release.json\n'


def tour_script() -> str:
    found = re.search(r"<!-- tour -->\n```sh\n(.*?)```", TOUR.read_text(), flags=re.S)
    assert found is not None, "docs/tour.md should hold the tour's script after <!-- tour -->"
    return found.group(1)


@pytest.mark.processes
def test_the_tour_runs_against_real_services(tmp_path: Path) -> None:
    script = tmp_path / "tour.sh"
    script.write_text("set -euo pipefail\n" + tour_script() + EPILOGUE)
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),  # this code
        "TMPDIR": str(tmp_path),
        "LABELDP_PORT": str(free_port()),
        "LABELDP_FEATURES_PORT": str(free_port()),
        "LABELDP_FEATURES_GRPC_PORT": str(free_port()),
    }
    for name in ("LABELDP_DATABASE_URL", "LABELDP_FEATURES_DATABASE_URL", "LABELDP_API_KEY"):
        env.pop(name, None)
    done = subprocess.run(
        ["bash", str(script)], env=env, capture_output=True, text=True, timeout=600, check=False
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    out, err = done.stdout, done.stderr
    # (pymp-*: the folder of the labels party's fork-server socket, removed as the server exits)
    [scratch] = [p for p in tmp_path.iterdir() if p.is_dir() and not p.name.startswith("pymp-")]
    assert "curl" not in tour_script() and "jq" not in tour_script()  # the CLI alone
    assert "2,000 examples in both" in out and "2,000 labels stored" in out
    assert re.search(r"from advertiser: 2,000 examples at ε = 2$", out, flags=re.M)  # ε as both write it
    assert "deliveries: delivered" in out and " to publisher\n" in out  # the recipient by name

    # the bins split the sample's labels: each holds a real share of them
    release = json.loads((scratch / "release.json").read_text())
    mechanism = PublishedMechanism.model_validate(release["mechanism"])
    labels = pcsv.read_csv(scratch / "labels.csv").column("label").to_numpy()
    points = explicit_support(mechanism.support).snap(labels)
    shares = np.bincount(np.asarray(mechanism.support_bins)[points], minlength=mechanism.m) / labels.size
    assert mechanism.m >= 2 and shares.min() >= 0.05, shares
    assert f"bins ({mechanism.m}): {numbers(release['bins'])}\n" in out  # in preview and releases show

    # the audit finds what a real release gives away: more than nothing, never more than the worst case
    audited = re.search(r"\(advantage (\d\.\d+)\)", out)
    assert audited is not None and 0 < float(audited.group(1)) <= mechanism.worst_case_additive_advantage

    # the refusal: exit 1 (refused as things stand), spent and left in words
    assert "refused with exit code 1" in out
    [refusal] = [line for line in err.splitlines() if "409 budget-exhausted" in line]
    assert "2,000 of 2,000 examples lack budget for ε = 5.5" in refusal and "spent 2 (4 left)" in refusal
    assert [line for line in err.splitlines() if line != refusal] == []  # no progress-bar leftovers

    predictions = [line.split("\t") for line in out.splitlines() if line.startswith("click-")]
    # a price between the lowest and the highest bin value (printed to 6 significant digits): the
    # debiasing's inverse, unclipped, can give a negative price for a cheap diamond
    lo, hi = min(mechanism.bin_values) * (1 - 1e-5), max(mechanism.bin_values) * (1 + 1e-5)
    assert [p[0] for p in predictions] == ["click-1", "click-2"]
    assert all(0 < lo <= float(p[1]) <= hi for p in predictions), (predictions, lo, hi)
    assert (scratch / "model.skops").stat().st_size > 10_000  # the model left the service
