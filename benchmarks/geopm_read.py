"""Benchmark: a GEOPM report of 1000 hosts x 20 regions read into frames, against geopmpy.

Scales a real report (the peer data's ``testio_...yaml.report``, GEOPM 1.0
fields, 2 hosts x 13 regions) to 1000 hosts x 20 regions (region entries
repeated in turn, renamed ``r<i>-<name>``; hosts ``host0000``...) into
``benchmarks/.data/``, about 14 MB, then runs each side in a fresh Python
process, interleaved round by round (so a burst of load from other processes
hits all of them), and reports the best and median wall time and the peak
memory (peak RSS of the process after reading minus its RSS before, i.e.
what the read itself added) of

- Joulehouse: ``read_report`` (rapidyaml -> JSON -> frames, pandera-validated);
- geopmpy 3.2.2's ``geopmpy.io.RawReport`` (PyYAML's pure-Python SafeLoader
  with geopmpy's float resolver; its source distribution from PyPI, kept in
  ``~/.cache/joulehouse``, run from there, not part of the project);
- rapidyaml's bare parse (``ryml.parse_in_arena``), the floor of our reader;
- PyYAML's C loader (``yaml.load(..., CSafeLoader)``) for reference.

Run: ``.venv/bin/python benchmarks/geopm_read.py [--rounds N]``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tarfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
DATA = HERE / ".data"
SOURCE = (HERE.parent.parent / "shared" / "peer-data" / "geopm"
          / "testio_geopm-1.0.0dev30_fm_stream_dgemm_2host.yaml.report")
CACHE = Path(os.environ.get("JOULEHOUSE_CACHE", Path.home() / ".cache" / "joulehouse"))
SIDES = ("joulehouse", "geopmpy", "ryml_parse", "pyyaml_c")


def scaled_report(source: Path, hosts: int, regions: int) -> str:
    """The first host of ``source`` as ``hosts`` hosts of ``regions`` regions each."""
    head, hosts_text = source.read_text().split("Hosts:\n", 1)
    first_host = hosts_text.split("\n  mcfly12:\n")[0]  # "  mcfly11:\n" + its body
    host_body = first_host.split("\n", 1)[1]
    before, rest = host_body.split("    Regions:\n", 1)
    entries_text, after = rest.split("    Unmarked Totals:", 1)
    entries = ["    -\n" + e for e in entries_text.split("    -\n") if e.strip()]
    renamed = [entries[i % len(entries)].replace('region: "', f'region: "r{i}-', 1)
               for i in range(regions)]
    block = before + "    Regions:\n" + "".join(renamed) + "    Unmarked Totals:" + after
    return head + "Hosts:\n" + "".join(
        f"  host{h:04d}:\n{block.rstrip()}\n" for h in range(hosts))


def geopmpy_folder() -> Path:
    """geopmpy's source tree (io.py and its package), extracted from the cached sdist."""
    sdist = CACHE / "geopmpy-3.2.2.tar.gz"
    if not sdist.is_file():
        CACHE.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "pip", "download", "geopmpy==3.2.2", "--no-deps",
                        "--no-binary", ":all:", "--quiet", "-d", str(CACHE)], check=True)
    folder = DATA / "geopmpy-3.2.2"
    if not (folder / "geopmpy" / "io.py").is_file():
        with tarfile.open(sdist) as archive:
            members = [m for m in archive.getmembers()
                       if m.name.startswith("geopmpy-3.2.2/geopmpy/") and m.isfile()]
            archive.extractall(DATA, members=members, filter="data")
    return folder


def child(side: str, path: str, geopmpy: str) -> None:
    """One read in this fresh process; prints wall seconds and the MiB the read added."""
    import warnings
    warnings.simplefilter("ignore")
    if side == "joulehouse":
        from joulehouse.geopm.readers import read_report as read
    elif side == "geopmpy":
        sys.path.insert(0, geopmpy)
        from geopmpy.io import RawReport as read
    elif side == "ryml_parse":
        import ryml

        def read(name):
            return ryml.parse_in_arena(Path(name).read_bytes())
    else:
        import yaml

        def read(name):
            with open(name) as handle:
                return yaml.load(handle, Loader=yaml.CSafeLoader)
    rss_before = _rss_kib()
    start = time.perf_counter()
    result = read(path)
    wall = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB
    if side == "joulehouse":
        rows = {"regions": len(result.regions), "hosts": int(result.header["host_count"][0])}
    elif side == "geopmpy":
        hosts = result.host_names()
        rows = {"regions": sum(len(result.region_names(h)) for h in hosts), "hosts": len(hosts)}
    else:
        rows = {}
    print(json.dumps({"wall_s": wall, "added_mib": (peak - rss_before) / 1024, **rows}))


def _rss_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def run_side(side: str, path: Path, geopmpy: Path) -> dict:
    out = subprocess.run([sys.executable, __file__, "--child", side, str(path), str(geopmpy)],
                         check=True, capture_output=True, text=True, cwd=HERE.parent)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--child", nargs=3, metavar=("SIDE", "PATH", "GEOPMPY"))
    args = parser.parse_args()
    if args.child:
        child(*args.child)
        return
    sys.path.insert(0, str(HERE))
    import pandas
    import ryml
    import yaml
    from machine import describe, load_average
    DATA.mkdir(exist_ok=True)
    path = DATA / "geopm_1000x20.report"
    path.write_text(scaled_report(SOURCE, 1000, 20))
    size_mib = path.stat().st_size / 2**20
    geopmpy = geopmpy_folder()
    print(describe(pandas, yaml, extra=f"rapidyaml {ryml.version}; load {load_average()}"))
    print(f"report: {path.stat().st_size:,} bytes ({size_mib:.1f} MiB), 1000 hosts x 20 regions")
    results: dict[str, list[dict]] = {side: [] for side in SIDES}
    for round_ in range(args.rounds):
        for side in SIDES:
            results[side].append(run_side(side, path, geopmpy))
        print(f"round {round_ + 1}: " + ", ".join(
            f"{side} {results[side][-1]['wall_s']:.2f} s" for side in SIDES), flush=True)
    assert results["joulehouse"][0]["regions"] == results["geopmpy"][0]["regions"] == 20000
    summary = {}
    print("\n| side | best s | median s | peak added MiB (x file) |\n|---|---|---|---|")
    for side in SIDES:
        walls = [r["wall_s"] for r in results[side]]
        mib = max(r["added_mib"] for r in results[side])
        summary[side] = (min(walls), statistics.median(walls))
        print(f"| {side} | {min(walls):.2f} | {statistics.median(walls):.2f} | "
              f"{mib:.0f} ({mib / size_mib:.1f}x) |")
    ours, theirs, floor = summary["joulehouse"], summary["geopmpy"], summary["ryml_parse"]
    print(f"\ngeopmpy RawReport / Joulehouse: {theirs[0] / ours[0]:.1f}x (best), "
          f"{theirs[1] / ours[1]:.1f}x (median)")
    print(f"Joulehouse / rapidyaml bare parse: {ours[0] / floor[0]:.1f}x (best), "
          f"{ours[1] / floor[1]:.1f}x (median); load after: {load_average()}")


if __name__ == "__main__":
    main()
