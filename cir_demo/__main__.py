import sys

from cir_demo.cli import main

sys.exit(main())
