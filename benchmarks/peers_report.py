"""The report of ``peers.py``: figures printed as they come, then a markdown table and a plot."""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import os
import platform
import statistics
import time
from pathlib import Path

WORKLOADS = {  # key: (title, unit, lower is better)
    "latency": ("1. no-op latency on one engine, median", "ms", True),
    "throughput": ("2. tiny tasks on 2 engines, all submitted at once", "tasks/s", False),
    "map": ("3. map of {items:,} tiny items on 2 engines", "items/s", False),
    "local": ("4. tiny tasks in kernel threads (declared GPU=2)", "tasks/s", False),
    "makespan": ("5. 16 tasks x 0.25 GPU x 1 s on 2 GPUs (bound 2.0 s)", "s", True),
}
SHORT = {"throughput": "2. at once, 2 engines", "map": "3. map, 2 engines",
         "local": "4. kernel threads"}
OURS = "jupyter_sched"


def compare(ours: float, theirs: float, lower_is_better: bool) -> str:
    """How jupyter_sched fares against a peer's figure, in words either way round."""
    if not ours or not theirs:
        return ""
    speed = theirs / ours if lower_is_better else ours / theirs
    if round(speed, 2) == 1:
        return "the same"
    return f"{speed:.2f}x better" if speed >= 1 else f"{1 / speed:.2f}x worse"


class Report:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.rows: list[tuple[str, str, float, str]] = []  # workload, system, value, note
        self.goals: list[tuple[str, str, bool]] = []  # what, measured, met
        self.notes: list[str] = []
        self.when = time.strftime("%Y-%m-%d %H:%M %Z")
        self.load = os.getloadavg()[0]
        self.elapsed = 0.0

    def add(self, workload: str, system: str, value: float, note: str = "") -> None:
        self.rows.append((workload, system, value, note))
        unit = WORKLOADS[workload][1]
        print(f"[{workload}] {system}: {value:,.2f} {unit}" + (f"  ({note})" if note else ""))

    def latency(self, system: str, samples: list[float], note: str = "") -> None:
        ordered = sorted(samples)
        p90 = ordered[int(len(ordered) * 0.9)] * 1e3
        self.add("latency", system, statistics.median(ordered) * 1e3,
                 ", ".join(filter(None, [f"p90 {p90:.2f} ms of {len(ordered)} calls", note])))

    def rate(self, workload: str, system: str, value: float, note: str = "") -> None:
        self.add(workload, system, value, note)

    def makespan(self, system: str, spans: list[float], note: str = "") -> None:
        rounds = (f"median of {', '.join(f'{s:.2f}' for s in spans)}" if len(spans) > 1
                  else "one round" if self.args.rounds > 1 else "")
        self.add("makespan", system, statistics.median(spans),
                 ", ".join(filter(None, [rounds, note])))

    def value(self, workload: str, system: str) -> float | None:
        return next((v for w, s, v, _ in self.rows if (w, s) == (workload, system)), None)

    def goal(self, what: str, value: float, op: str, target: float, unit: str) -> None:
        met = value <= target if op == "<=" else value >= target
        shown = f"{value:,.2f}{unit} (goal {op} {target:g}{unit})"
        self.goals.append((what, shown, met))
        print(f"GOAL {what}: {shown}: {'met' if met else 'NOT met'}")

    def note(self, text: str) -> None:
        self.notes.append(text)
        print(f"-- {text}")

    def skipped(self, name: str, why: str) -> None:
        self.notes.append(f"{name}: skipped ({why})")
        print(f"-- {name}: skipped ({why})")

    def failed(self, name: str, err: BaseException) -> None:
        self.notes.append(f"{name}: failed, {type(err).__name__}: {err}")
        print(f"-- {name}: FAILED, {type(err).__name__}: {err}")

    def write(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "peers.md").write_text(self.markdown())
        print(f"wrote {folder / 'peers.md'}")
        if installed("matplotlib"):
            self.plot(folder / "peers.png")
            print(f"wrote {folder / 'peers.png'}")
        else:
            print("matplotlib is not installed: no plot")

    def header(self) -> list[str]:
        versions = ", ".join(f"{name} {_version(name)}" for name in
                             ("ipyparallel", "distributed", "ray") if installed(name))
        a = self.args
        mode = "`--quick`" if a.quick else "full"
        return [
            "# jupyter_sched and its peers: the same workloads, one run", "",
            f"{self.when}; {platform.system()} {platform.machine()}{_cpu_model()}, "
            f"{os.cpu_count()} CPUs "
            f"(load average {self.load:.1f} at the start: the machine was shared, figures are "
            f"noisy); Python {platform.python_version()}; {versions}.", "",
            f"Every system below ran in this same run of `python benchmarks/peers.py` ({mode}, "
            f"{self.elapsed:.0f} s), one after another on the same machine. Sizes: "
            f"{a.calls} no-op calls a path (raw ipyparallel and jupyter_sched in alternating "
            f"rounds of 10); {a.tasks:,} tiny tasks, medians of {3 * a.rounds} alternating "
            f"rounds; map of {a.items:,} items, once; {a.local:,} tasks a kind in kernel "
            f"threads, best of {a.rounds}; makespans: median of {a.rounds} rounds unless said.", "",
            "![tasks/s, latency and makespan per system](peers.png)", ""]

    def markdown(self) -> str:
        lines = [*self.header(),
                 "| workload | system | figure | jupyter_sched vs this | note |",
                 "|---|---|---:|---|---|"]
        for key, (title, unit, lower) in WORKLOADS.items():
            rows = self.ordered([key])
            ours = next((v for _, s, v, _ in rows if s.startswith(OURS)), None)
            for _, system, value, note in rows:
                versus = "" if system.startswith(OURS) or ours is None else compare(
                    ours, value, lower)
                lines.append(f"| {title.format(items=self.args.items)} | {system} | "
                             f"{value:,.2f} {unit} | {versus} | {note} |")
        lines += ["", "| goal (DESIGN.md section 8) | measured | met |", "|---|---|---|"]
        lines += [f"| {what} | {shown} | {'yes' if met else '**no**'} |"
                  for what, shown, met in self.goals]
        lines += [""] + [f"* {note}" for note in self.notes]
        return "\n".join(lines).rstrip() + "\n"

    def ordered(self, keys: list[str]) -> list[tuple[str, str, float, str]]:
        """The rows of these workloads in their order, jupyter_sched's first in each."""
        return sorted((r for r in self.rows if r[0] in keys),
                      key=lambda r: (list(WORKLOADS).index(r[0]), not r[1].startswith(OURS)))

    def plot(self, path: Path) -> None:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        panels = [(["latency"], "no-op latency on one engine, median (ms, lower is better)"),
                  (["throughput", "map", "local"], "tiny tasks/s (log scale, higher is better)"),
                  (["makespan"], "16 x 0.25 GPU x 1 s on 2 GPUs: makespan (s, lower is better)")]
        heights = [max(1, sum(r[0] in keys for r in self.rows)) for keys, _ in panels]
        fig, axes = plt.subplots(3, 1, figsize=(10, 2.2 + 0.42 * sum(heights)),
                                 gridspec_kw={"height_ratios": heights})
        for ax, (keys, title) in zip(axes, panels, strict=True):
            rows = self.ordered(keys)[::-1]  # barh draws the first row at the bottom
            labels = [(SHORT[k] + " · " if len(keys) > 1 else "") + s for k, s, _, _ in rows]
            colours = ["tab:blue" if s.startswith(OURS) else "tab:gray" for _, s, _, _ in rows]
            bars = ax.barh(labels, [v for _, _, v, _ in rows], color=colours)
            ax.bar_label(bars, [f"{v:,.2f}" if v < 100 else f"{v:,.0f}" for _, _, v, _ in rows],
                         fontsize=7, padding=2)
            ax.set_title(title, fontsize=10, loc="left")
            ax.tick_params(labelsize=8)
            if len(keys) > 1:
                ax.set_xscale("log")
            if keys == ["makespan"]:
                ax.axvline(2.0, color="black", lw=0.8, ls=":", label="bound 2.0 s")
                ax.axvline(2.1, color="tab:green", lw=0.8, ls="--", label="goal 2.1 s")
                ax.legend(fontsize=8, loc="lower right")
        fig.suptitle(f"jupyter_sched (blue) and peers (gray), one run: {self.when}, "
                     f"{os.cpu_count()} CPUs, Python {platform.python_version()}", fontsize=10)
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        plt.close(fig)


def _cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return f" ({line.split(':', 1)[1].strip()})"
    return ""


def installed(name: str) -> bool:
    return importlib.util.find_spec(name) is not None


def _version(name: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return "?"
