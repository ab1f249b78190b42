import os

import torch

# make test runs the suite on two pytest-xdist workers (one per core of the CI machine): each then
# computes on one thread, as two threads each would only contend for the same cores
torch.set_num_threads(1 if os.environ.get("PYTEST_XDIST_WORKER") else min(2, torch.get_num_threads()))
