"""Run the model benchmark from a source checkout: same as ``python -m inductor_lite.bench``."""

import sys

from inductor_lite.bench.__main__ import main

if __name__ == "__main__":
    sys.exit(main())
