"""Counts of a run of ncclz_dist_suite.py from its JUnit XML: passed / skipped / failed, the skips
grouped by reason, and each failure's test and first error line (input for bench/results/torch_suite.md).

    python summarize.py junit.xml
"""

from __future__ import annotations

import collections
import sys
import xml.etree.ElementTree as ET


def summarize(path: str) -> str:
    root = ET.parse(path).getroot()
    cases = list(root.iter("testcase"))
    passed, skipped, failed = [], collections.defaultdict(list), []
    seconds = 0.0
    for c in cases:
        name = c.get("name")
        seconds += float(c.get("time") or 0)
        skip = c.find("skipped")
        bad = c.find("failure") if c.find("failure") is not None else c.find("error")
        if skip is not None:
            reason = (skip.get("message") or "").strip()
            skipped[reason].append(name)
        elif bad is not None:
            text = (bad.get("message") or bad.text or "").strip().splitlines()
            failed.append((name, text[0][:300] if text else ""))
        else:
            passed.append(name)
    out = [
        (
            f"{len(cases)} tests: {len(passed)} passed, {sum(len(v) for v in skipped.values())} skipped, "
            f"{len(failed)} failed ({seconds / 60:.1f} min of test time)"
        ),
        "",
        "skipped, by reason:",
    ]
    for reason, names in sorted(skipped.items(), key=lambda kv: -len(kv[1])):
        out.append(f"  {len(names):3d}  {reason}")
    out += ["", "failed:"]
    out += [f"  {n}: {msg}" for n, msg in failed]
    out += ["", "passed:", "  " + " ".join(passed)]
    return "\n".join(out)


if __name__ == "__main__":
    print(summarize(sys.argv[1]))
