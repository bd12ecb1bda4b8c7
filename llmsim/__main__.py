import sys

from llmsim.cli import main

sys.exit(main())
