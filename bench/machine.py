"""The machine a bench ran on, as the benches record it."""
import platform


def cpu_name():
    """The CPU's model name from /proc/cpuinfo (the platform's name where it
    has none)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def cpu_fields():
    """The first processor's /proc/cpuinfo fields (vendor_id, cpu family,
    model, flags, ...) as a dict of strings; empty where there is none."""
    out = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if not line.strip():
                    break
                k, _, v = line.partition(":")
                out[k.strip()] = v.strip()
    except OSError:
        pass
    return out


# The kinds of CPU whose speed differs in kind for memfit and PyTorch: the
# vector ISA decides the kernels both run (AVX2 only, AVX-512 with bf16, and
# AMX tiles on the Xeons that have them), the vendor the cache sizes and the
# oneDNN paths. Each kind keeps a table of its own in the README.
KIND_LABELS = {
    "amd-avx2": "AMD, AVX2 only (Zen 3)",
    "amd-avx512": "AMD, AVX-512 with AVX512-BF16 (Zen 4/5)",
    "intel-avx2": "Intel, AVX2 only",
    "intel-avx512": "Intel Xeon, AVX-512 (no AMX)",
    "intel-amx": "Intel Xeon, AVX-512 with AMX",
}


def cpu_kind(fields=None):
    """The kind of this CPU (a key of KIND_LABELS, or vendor-isa for others):
    its vendor and the widest vector ISA it has."""
    f = cpu_fields() if fields is None else fields
    flags = set(f.get("flags", "").split())
    vendor = {"AuthenticAMD": "amd", "GenuineIntel": "intel"}.get(f.get("vendor_id", ""), "other")
    if "amx_tile" in flags or "amx_bf16" in flags:
        isa = "amx"
    elif "avx512f" in flags:
        isa = "avx512"
    elif "avx2" in flags:
        isa = "avx2"
    else:
        isa = "sse"
    return f"{vendor}-{isa}"


def cpu_kind_label(kind):
    if kind.endswith("-as-avx2"):
        return KIND_LABELS.get(kind[:-len("-as-avx2")], kind) + ", limited to AVX2 on both sides"
    return KIND_LABELS.get(kind, kind)
