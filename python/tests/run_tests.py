"""ctest's entry for the Python package: pytest over this folder, or a skip
(exit 77, which ctest reports as skipped) naming the package to install."""
import subprocess
import sys

try:
    import pytest  # noqa: F401
except ImportError:
    print("skipped: pytest is not installed for " + sys.executable + " (apt-get install python3-pytest, or make deps)")
    sys.exit(77)

folder = sys.argv[1]
sys.exit(subprocess.call([sys.executable, "-m", "pytest", folder, "-q", "-p", "no:cacheprovider"]))
