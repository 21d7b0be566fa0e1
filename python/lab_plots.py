"""The lab's plots with matplotlib (docs/page-size-lab.md): the L2 TLB miss
rate of a pointer chase against the footprint, one line per page-size policy
(the same sweep as `uvm-lab --sweep`), and the modelled time split by cause.

    python3 python/lab_plots.py [OUT_PREFIX]   -> OUT_PREFIX-reach.png, OUT_PREFIX-time.png
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import uvm_lab  # noqa: E402

M = 1 << 20
BASE = 1 << 40


ACCESSES = 100000


def sweep(policies, footprints_mib, accesses=ACCESSES):
    rates, splits = {}, {}
    for policy in policies:
        rates[policy], splits[policy] = [], []
        for mib in footprints_mib:
            with uvm_lab.Lab(uvm_lab.Model(), policy) as lab:
                size = ((mib * M) + 2 * M - 1) // (2 * M) * (2 * M)
                lab.allocate(BASE, size)
                lab.run(uvm_lab.Workload(uvm_lab.POINTER_CHASE, footprint=mib * M, accesses=accesses,
                                         processors=132), BASE)
                s = lab.stats()
                rates[policy].append(s.l2_miss_rate())
                splits[policy].append((s.time_l1_ns, s.time_l2_ns, s.time_walks_ns))
    return rates, splits


def main():
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed (Debian: python3-matplotlib)")
        return 77  # ctest's "skipped"
    prefix = sys.argv[1] if len(sys.argv) > 1 else "lab"
    footprints = [1 << i for i in range(0, 11)]
    policies = [uvm_lab.PAGES_4K, uvm_lab.PAGES_64K, uvm_lab.PAGES_2M, uvm_lab.MOSAIC]
    rates, splits = sweep(policies, footprints)
    fig, ax = plt.subplots(figsize=(7, 4))
    # Each policy its dash, marker and width, the later ones narrower, so that
    # a line drawn over an equal one (Mosaic's over 2M's) leaves it in sight;
    # the legend says which are the same.
    styles = [("-", "o"), ((0, (6, 3)), "s"), ((0, (2, 2)), "D"), ((0, (8, 2, 2, 2)), "^"), ((0, (4, 2)), "x")]
    for k, p in enumerate(policies):
        same = next((q for q in policies[:k] if rates[q] == rates[p]), None)
        label = uvm_lab.POLICY_NAMES[p] + (f" (= {uvm_lab.POLICY_NAMES[same]})" if same is not None else "")
        dash, mark = styles[k % len(styles)]
        width = 1.2 + 2.4 * (len(policies) - 1 - k) / max(1, len(policies) - 1)
        ax.plot(footprints, [100 * r for r in rates[p]], linestyle=dash, marker=mark, markersize=5,
                linewidth=width, label=label, zorder=2 + k)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("footprint (MiB)")
    ax.set_ylabel("L2 TLB miss rate (%)")
    ax.set_title("Pointer chase: where TLB reach runs out (example model)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(prefix + "-reach.png", dpi=120)
    fig, ax = plt.subplots(figsize=(7, 4))
    last = len(footprints) - 1
    names = [uvm_lab.POLICY_NAMES[p] for p in policies]
    bottoms = [0.0] * len(policies)
    for i, cause in enumerate(("L1 TLB hits", "L2 TLB hits", "walks")):
        values = [splits[p][last][i] / ACCESSES for p in policies]  # ns per access, as uvm-lab's table
        ax.bar(names, values, bottom=bottoms, label=cause)
        bottoms = [b + v for b, v in zip(bottoms, values)]
    ax.set_ylabel("modelled translation time per access (ns)")
    ax.set_title(f"Where the time goes at {footprints[last]} MiB")
    ax.legend()
    fig.tight_layout()
    fig.savefig(prefix + "-time.png", dpi=120)
    print(f"wrote {prefix}-reach.png and {prefix}-time.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
