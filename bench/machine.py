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
