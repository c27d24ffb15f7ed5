import sys

from poet.cli import main

sys.exit(main())
