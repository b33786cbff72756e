"""`labeldp demo` end to end (the README's first command): wall time against the 3-minute target.

Each run is the real command in a fresh process: two services started, a release at ε = 1, delivery,
training, three models scored, figures written, services stopped. The per-step timings come from the
demo's own ``report.json``.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import time
from pathlib import Path

from benchmarks.common import write

TARGET_S = 180.0
RUNS = 2


def main() -> None:
    rows = []
    data = []
    for dataset in ("prices", "weeks"):
        for _ in range(RUNS):
            with tempfile.TemporaryDirectory() as tmp:
                start = time.perf_counter()
                subprocess.run(
                    [
                        os.environ.get("PYTHON", "python"),
                        "-m",
                        "labeldp.cli",
                        "demo",
                        "--dataset",
                        dataset,
                        "--out",
                        tmp,
                    ],
                    check=True,
                    capture_output=True,
                )
                wall = time.perf_counter() - start
                report = json.loads((Path(tmp) / "report.json").read_text())
            t = report["timings_s"]
            data.append({"dataset": dataset, "wall_s": wall, "timings_s": t})
            steps = " | ".join(f"{t[k]:.1f}" for k in ("upload", "release", "deliver", "train", "score"))
            rows.append(
                f"| {dataset} | {report['examples_released']:,} | {wall:.1f} | {TARGET_S:.0f} | {steps} |"
            )
    markdown = (
        "| dataset | examples released | wall s | target s | upload | release | deliver | train "
        "| score (3 models) |\n"
        "|---|---|---|---|---|---|---|---|---|\n" + "\n".join(rows)
    )
    write("bench_demo", markdown, data)


if __name__ == "__main__":
    main()
