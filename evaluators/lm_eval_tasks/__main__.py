import sys

from evaluators.lm_eval_tasks import main

sys.exit(main())
