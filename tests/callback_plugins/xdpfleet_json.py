# Copyright: xdpfleet developers
# GNU General Public License v2.0 only (see https://www.gnu.org/licenses/old-licenses/gpl-2.0.txt)
"""Notification callback for tests: writes per-host stats and per-task results of a playbook run as JSON.

ansible-core 2.19 ships no json callback (it moved to ansible.posix). Enable this one next to the normal stdout:
    ANSIBLE_CALLBACK_PLUGINS=tests/callback_plugins ANSIBLE_CALLBACKS_ENABLED=xdpfleet_json \
    XDPFLEET_JSON_RESULTS=/path/out.json ansible-playbook ...
"""

from __future__ import annotations

import json
import os
import time

from ansible.plugins.callback import CallbackBase

DOCUMENTATION = r"""
name: xdpfleet_json
type: notification
short_description: Write per-host stats and per-task results of a run to a JSON file (for tests)
description:
  - >-
    At the end of a run, writes {"stats": {host: {ok, changed, failed, unreachable, skipped, rescued, ignored}},
    "tasks": [{play, task, action, host, status, changed, seconds, result}]} to the file named by
    XDPFLEET_JSON_RESULTS (seconds: from the task's start to this host's result, to find where a run's time goes).
  - Each result keeps the module's return values, C(diff), C(msg), C(warnings) and loop C(results).
requirements:
  - enable it with ANSIBLE_CALLBACKS_ENABLED=xdpfleet_json
options:
  output:
    description: File to write.
    env:
      - name: XDPFLEET_JSON_RESULTS
    required: true
    type: path
"""


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "notification"
    CALLBACK_NAME = "xdpfleet_json"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self):
        super().__init__()
        self._tasks: list[dict] = []
        self._play = None
        self._task_started = time.monotonic()

    def v2_playbook_on_play_start(self, play):
        self._play = play.get_name()

    def v2_playbook_on_task_start(self, task, is_conditional):
        self._task_started = time.monotonic()

    def v2_playbook_on_handler_task_start(self, task):
        self._task_started = time.monotonic()

    def _record(self, result, status: str) -> None:
        raw = result.result
        # _dump_results strips internal keys and renders 2.19's tagged values; it drops diff and warnings, which
        # tests want, so those are taken from the raw result.
        data = self._dump_results(raw, keep_invocation=True, serialize=False)
        for key in ("diff", "warnings"):
            if key in raw:
                data[key] = raw[key]
        self._tasks.append(
            {
                "play": self._play,
                "task": result.task.get_name(),
                "action": result.task.action,
                "host": result.host.get_name(),
                "status": status,
                "changed": bool(raw.get("changed", False)),
                "seconds": round(time.monotonic() - self._task_started, 3),
                "result": data,
            }
        )

    def v2_runner_on_ok(self, result):
        self._record(result, "ok")

    def v2_runner_on_failed(self, result, ignore_errors=False):
        self._record(result, "ignored" if ignore_errors else "failed")

    def v2_runner_on_skipped(self, result):
        self._record(result, "skipped")

    def v2_runner_on_unreachable(self, result):
        self._record(result, "unreachable")

    def v2_playbook_on_stats(self, stats):
        hosts = {}
        for host in sorted(stats.processed):
            summary = stats.summarize(host)
            hosts[host] = {
                "ok": summary["ok"],
                "changed": summary["changed"],
                "failed": summary["failures"],
                "unreachable": summary["unreachable"],
                "skipped": summary["skipped"],
                "rescued": summary["rescued"],
                "ignored": summary["ignored"],
            }
        path = self.get_option("output")
        tmp = f"{path}.tmp"
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump({"stats": hosts, "tasks": self._tasks}, fh, indent=1, default=str)
        os.replace(tmp, path)
