import os


def pytest_configure(config) -> None:
    """make test runs the suite on two pytest-xdist workers (one per core of the CI machine): each
    then computes on one thread, as two threads each would only contend for the same cores. The
    xdist controller runs no test, so it does not import torch (2 s before any worker starts)."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if not worker and getattr(config.option, "numprocesses", None):
        return
    import torch

    torch.set_num_threads(1 if worker else min(2, torch.get_num_threads()))
