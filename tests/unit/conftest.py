"""The unit tier runs anywhere, as any user, with no privilege and no kernel feature: a skip here would hide a test
that belongs in a root tier (tests/root, tests/kernel), so a skip counts as a failure."""

import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.skipped and not hasattr(report, "wasxfail"):
        report.outcome = "failed"
        report.longrepr = (
            "tests/unit skips nothing: a test that needs root or the kernel belongs in tests/root or tests/kernel "
            f"({report.longrepr})"
        )
