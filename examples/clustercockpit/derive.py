"""Derive the bundled example archive from the ClusterCockpit peer data.

Run from the repository root: ``.venv/bin/python examples/clustercockpit/derive.py``.
See PROVENANCE.md for what each job is.
"""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import numpy as np

PEER = Path(__file__).resolve().parents[3] / "shared" / "peer-data" / "clustercockpit"
TARGET = Path(__file__).resolve().parent / "archive"
EMMY = "emmy/1403/244/1608923076"
EMMY_HOSTS, EMMY_SAMPLES, EMMY_METRICS = 4, 361, ("rapl_power", "mem_bw")


def trimmed_emmy() -> tuple[dict, bytes]:
    """Emmy job 1403244: its first 4 hosts, 6 h (361 samples at 60 s), two metrics."""
    source = PEER / "cc-backend-testdata-archive" / EMMY
    meta = json.loads((source / "meta.json").read_text())
    with gzip.open(source / "data.json.gz") as handle:
        data = json.load(handle)
    data = {name: data[name] for name in EMMY_METRICS}
    for scopes in data.values():
        for scope in scopes.values():
            scope["series"] = scope["series"][:EMMY_HOSTS]
            for series in scope["series"]:
                series["data"] = series["data"][:EMMY_SAMPLES]
                present = [v for v in series["data"] if v is not None]
                series["statistics"] = {"min": min(present), "avg": float(np.mean(present)),
                                        "max": max(present)}
    meta["numNodes"] = EMMY_HOSTS
    meta["resources"] = meta["resources"][:EMMY_HOSTS]
    meta["duration"] = (EMMY_SAMPLES - 1) * 60
    meta["statistics"] = {name: meta["statistics"][name] for name in EMMY_METRICS}
    for name in EMMY_METRICS:  # cc-backend's job statistics: mean of the nodes' averages
        series = data[name]["node"]["series"]
        stats = meta["statistics"][name]
        stats["avg"] = round(float(np.mean([s["statistics"]["avg"] for s in series])), 2)
        stats["min"] = min(s["statistics"]["min"] for s in series)
        stats["max"] = max(s["statistics"]["max"] for s in series)
    return meta, json.dumps(data, separators=(",", ":")).encode()


def main() -> None:
    if TARGET.exists():
        shutil.rmtree(TARGET)
    assembled = PEER / "assembled-archive"
    shutil.copytree(assembled, TARGET)
    for path in TARGET.rglob("*"):
        path.chmod(0o755 if path.is_dir() else 0o644)
    emmy = TARGET / EMMY
    emmy.mkdir(parents=True)
    shutil.copyfile(PEER / "cc-backend-testdata-archive/emmy/cluster.json",
                    TARGET / "emmy/cluster.json")
    meta, data = trimmed_emmy()
    (emmy / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
    (emmy / "data.json.gz").write_bytes(gzip.compress(data, 9, mtime=0))


if __name__ == "__main__":
    main()
