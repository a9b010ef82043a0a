import sys

from cir_demo.cli import main
from cir_demo.utils.gc_pause import started_as_program

started_as_program()
sys.exit(main())
