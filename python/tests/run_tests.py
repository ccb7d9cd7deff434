"""ctest's entry for the Python package: pytest over a folder, or a skip
(exit 77, which ctest reports as skipped) naming the package to install.
run_tests.py FOLDER [--need MODULE "HOW TO INSTALL IT"]"""
import subprocess
import sys

try:
    import pytest  # noqa: F401
except ImportError:
    print("skipped: pytest is not installed for " + sys.executable + " (apt-get install python3-pytest, or make deps)")
    sys.exit(77)

folder = sys.argv[1]
if len(sys.argv) == 5 and sys.argv[2] == "--need":
    try:
        __import__(sys.argv[3])
    except ImportError as e:
        print(f"skipped: {sys.argv[3]} cannot be imported for {sys.executable} ({e}); {sys.argv[4]} installs it")
        sys.exit(77)
sys.exit(subprocess.call([sys.executable, "-m", "pytest", folder, "-q", "-p", "no:cacheprovider"]))
