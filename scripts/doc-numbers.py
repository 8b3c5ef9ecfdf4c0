#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""scripts/doc-numbers.py — the tables of measured numbers in README.md and docs/, made from runs of
the `dmm` tool, so that they cannot drift from what the tree measures.

  scripts/doc-numbers.py --cli BUILD/tools/dmm [--write | --check] [--shared DIR]

A table lives between two comments in a page:
  <!-- numbers: NAME (scripts/doc-numbers.py) -->
  ...the table...
  <!-- /numbers -->
and NAME is one of TABLES below. --write replaces each table with what the runs give now; --check
(the test docs/numbers) fails, naming the page and the table, when a page differs from that. The
runs are `dmm replay --json` of the traces on the host driver (2 MiB granule), which are
deterministic: the same tree gives the same numbers on every machine. A trace that is not on this
machine keeps its row as it is, and the output says so: only the shared traces may be missing
(../shared/traces/ is not part of a clone); a missing trace of data/traces/ is an error. A malformed
marker, or a table of TABLES that no page holds, is an error too.
PyTorch's ratios come from the trace headers; those with expandable segments from the runs that
recorded the shared traces (EXPANDABLE below), since no trace header carries them.

Exit 0 when every page matches (or was written), 1 when one differs, 2 on bad usage or a failed run.
"""
import argparse
import json
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# (row label, trace file name, folder: "data" = data/traces, "shared" = the shared traces)
TRACES = [
    ("gpt2-train (GPT-2 small, AdamW, bf16, varied shapes)", "gpt2-train.trace.gz", "data"),
    ("llama-generate (0.9B Llama-style, HF generate)", "llama-generate.trace.gz", "shared"),
    ("bert-dynamic (BERT-base fp16, random shapes)", "bert-dynamic.trace.gz", "data"),
    ("gpt2-steps (`data/traces/`, GPT-2 training steps)", "gpt2-steps.trace.gz", "data"),
    ("models-train (`data/traces/`, the project's models training)", "models-train.trace.gz", "data"),
    ("vit-steps (`data/traces/`, ViT training steps)", "vit-steps.trace.gz", "data"),
]

# PyTorch with expandable segments, peak reserved / peak allocated, in the runs that recorded the traces.
EXPANDABLE = {"gpt2-train.trace.gz": "1.123", "llama-generate.trace.gz": "1.045", "bert-dynamic.trace.gz": "1.206"}


def replay(cli, path, *opts):
    r = subprocess.run([cli, "replay", path, "--json", *opts], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"dmm replay {path} {' '.join(opts)} failed: {r.stderr.strip()}")
    try:
        return json.loads(r.stdout)
    except json.JSONDecodeError as e:
        raise RuntimeError(f"dmm replay {path} {' '.join(opts)} printed no JSON ({e})") from None


def field(d, key):
    if key not in d:
        raise RuntimeError(f"dmm replay {d.get('trace', '?')} gave no '{key}' (a tool older than this script?)")
    return d[key]


def native(d):
    r = field(d, "native_ratio")
    return f"{r:.3f}" if r > 0 else "—"


def steady_calls(d):
    s = field(d, "steady")
    return sum(field(s, k) for k in ("create", "map", "set_access", "unmap", "release"))


def row_fragmentation(cli, label, name, path):
    """README: the default beside the fixed limit and PyTorch's allocators."""
    default, fixed = replay(cli, path), replay(cli, path, "--settle", "20")
    return (f"| {label} | **{field(default, 'ratio'):.3f}** | {field(fixed, 'ratio'):.3f} | {native(default)} | "
            f"{EXPANDABLE.get(name, '—')} |")


def row_both(cli, label, name, path):
    """docs/performance.md: memory and driver calls at once, against the best fixed layout found."""
    plan = replay(cli, path, "--plan")  # the default's single pass, with the offline plan
    cells = []
    for opts in ((), ("--settle", "30")):
        once = plan if not opts else replay(cli, path, *opts)
        rep = replay(cli, path, *opts, "--repeat", "3")
        cells += [f"{field(once, 'ratio'):.3f}", f"{field(rep, 'ratio'):.3f}", str(steady_calls(rep))]
    return f"| {label.split(' ')[0]} | {' | '.join(cells)} | {field(plan, 'plan_ratio'):.3f} | {native(plan)} |"


TABLES = {
    "fragmentation": ("| trace | dmm (default) | dmm, fixed limit | PyTorch native | PyTorch expandable segments |\n"
                      "|---|---|---|---|---|", row_fragmentation),
    "memory-and-calls": ("| trace | default: once | default: 3 repetitions | default: driver calls in the 3rd | "
                         "settle 30: once | settle 30: 3 repetitions | settle 30: driver calls in the 3rd | "
                         "best fixed layout found | PyTorch native |\n|---|---|---|---|---|---|---|---|---|",
                         row_both),
}

BLOCK = re.compile(r"(<!-- numbers: ([\w-]+) \(scripts/doc-numbers\.py\) -->\n)(.*?)(<!-- /numbers -->)", re.S)
MARKER = re.compile(r"<!--\s*/?\s*numbers")


def trace_path(name, folder, shared):
    path = os.path.join(ROOT, "data", "traces", name) if folder == "data" else os.path.join(shared, name)
    return path if os.path.isfile(path) else None


def render(cli, table, old, shared, notes):
    header, make = TABLES[table]
    old_rows = {r.split("|")[1].strip(): r for r in old.strip().split("\n")[2:] if r.startswith("|")}
    rows = []
    for label, name, folder in TRACES:
        path = trace_path(name, folder, shared)
        key = label.split(" ")[0] if table == "memory-and-calls" else label
        if path is None:
            if folder == "data":
                raise RuntimeError(f"data/traces/{name} is missing: the tree's own traces must be there")
            if key in old_rows:
                rows.append(old_rows[key])
                notes.append(f"{table}: {name} is not on this machine; its row is kept as it is")
            continue
        rows.append(make(cli, label, name, path))
    return header + "\n" + "\n".join(rows) + "\n"


def main():
    ap = argparse.ArgumentParser(description="Makes the measured tables of README.md and docs/ from dmm runs.")
    ap.add_argument("--cli", required=True, help="the built dmm tool")
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", action="store_true", help="rewrite the tables in place")
    mode.add_argument("--check", action="store_true", help="fail where a page differs")
    ap.add_argument("--shared", default=os.path.join(os.path.dirname(ROOT), "shared", "traces"),
                    help="the folder of the shared traces (default: ../shared/traces beside the tree)")
    args = ap.parse_args()
    if not os.access(args.cli, os.X_OK):
        print(f"doc-numbers: --cli {args.cli} is not an executable dmm tool (build the tree first)", file=sys.stderr)
        return 2
    pages = [os.path.join(ROOT, "README.md")]
    pages += sorted(os.path.join(ROOT, "docs", p) for p in os.listdir(os.path.join(ROOT, "docs")) if p.endswith(".md"))
    differ, notes, found, seen = [], [], 0, set()
    try:
        for page in pages:
            text = open(page, encoding="utf-8").read()

            def fill(m):
                if m.group(2) not in TABLES:
                    raise RuntimeError(f"{os.path.relpath(page, ROOT)}: no table named '{m.group(2)}' "
                                       f"(known: {', '.join(TABLES)})")
                return m.group(1) + render(args.cli, m.group(2), m.group(3), args.shared, notes) + m.group(4)

            blocks = BLOCK.findall(text)
            markers = len(MARKER.findall(text))
            if markers != 2 * len(blocks):
                raise RuntimeError(f"{os.path.relpath(page, ROOT)}: {markers} 'numbers' comments but {len(blocks)} "
                                   f"well-formed tables: each table is '<!-- numbers: NAME "
                                   f"(scripts/doc-numbers.py) -->' ... '<!-- /numbers -->'")
            seen.update(b[1] for b in blocks)
            new = BLOCK.sub(fill, text)
            found += len(blocks)
            if new != text:
                rel = os.path.relpath(page, ROOT)
                if args.write:
                    with open(page, "w", encoding="utf-8") as f:
                        f.write(new)
                    print(f"doc-numbers: wrote {rel}")
                else:
                    differ.append(rel)
        missing = sorted(set(TABLES) - seen)
        if missing:
            raise RuntimeError(f"no page holds the table(s) {', '.join(missing)}")
    except RuntimeError as e:
        print(f"doc-numbers: {e}", file=sys.stderr)
        return 2
    for n in notes:
        print(f"doc-numbers: {n}")
    for rel in differ:
        print(f"doc-numbers: {rel}: a table differs from what the tree measures; run "
              f"scripts/doc-numbers.py --cli BUILD/tools/dmm --write and commit the page")
    print(f"doc-numbers: {found} table(s), {len(differ)} differ")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
