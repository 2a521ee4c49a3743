"""Run the DSL kernel benchmark from a source checkout: same as ``python -m inductor_lite.bench.kernels``."""

import sys

from inductor_lite.bench.kernels import main

if __name__ == "__main__":
    sys.exit(main())
