"""module_utils/common: the change report and the schema error wording every module shares, and what converge
reports for a program's plan through it (no root, no kernel)."""

import difflib

from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf import program as xp
from ansible_collections.xdpfleet.fabric.plugins.module_utils.common import schema
from ansible_collections.xdpfleet.fabric.plugins.module_utils.common.changes import Changes, merged


def unified(diff: dict) -> list[str]:
    """The lines Ansible's diff callback prints for a diff dict (a unified diff of before and after)."""
    lines = difflib.unified_diff(diff["before"].splitlines(), diff["after"].splitlines(), lineterm="", n=0)
    return [line for line in lines if line[:1] in "+-" and line[:3] not in ("---", "+++")]


def test_removal_shows_as_minus_addition_as_plus_and_replacement_as_a_pair():
    changes = Changes("vtep xdp_vtep")
    changes.add("VNI 100: remove peer 198.51.100.98", before="VNI 100: peer 198.51.100.98 via ul-b")
    changes.add("VNI 200: add peer 198.51.100.99", after="VNI 200: peer 198.51.100.99 via ul-b")
    changes.add(
        "acc100: replace program", key="acc100", before="acc100: xdp_vtep tag 1", after="acc100: xdp_vtep tag 2"
    )
    result = changes.result()
    assert result["changed"] is True
    assert result["changes"][0] == "VNI 100: remove peer 198.51.100.98"
    assert unified(result["diff"]) == [
        "-VNI 100: peer 198.51.100.98 via ul-b",
        "-acc100: xdp_vtep tag 1",
        "+VNI 200: peer 198.51.100.99 via ul-b",
        "+acc100: xdp_vtep tag 2",
    ]
    assert result["diff"]["before_header"] == result["diff"]["after_header"] == "vtep xdp_vtep"


def test_nothing_to_do_reports_unchanged_without_a_diff():
    result = Changes("x").result()
    assert result == {"changed": False, "changes": []}


SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["vnis"],
    "properties": {
        "vnis": {"type": "array", "items": {"type": "integer", "title": "VNI", "minimum": 1, "maximum": 16777215}},
        "local_ip": {"type": "string", "format": "ipv4", "description": "the tunnel address"},
    },
}


def test_schema_problems_name_the_path_and_the_rule_in_document_order():
    problems = schema.problems(SCHEMA, {"vnis": [5, 0, "x"], "vnsi": 1})
    assert problems == [
        "document: unknown key 'vnsi' (did you mean 'vnis'?)",
        "vnis[1]: 0 is below the minimum 1 (VNI)",
        'vnis[2]: must be an integer, got the string "x"',
    ]
    assert schema.problems(SCHEMA, {}) == ["document: missing required key 'vnis'"]
    assert schema.problems(SCHEMA, {"vnis": [], "local_ip": "300.1.1.1"}, root="template") == [
        'local_ip: "300.1.1.1" is not a valid IPv4 address (the tunnel address)'
    ]


def test_special_wording_replaces_the_generic_message_only_where_it_answers():
    def ipv6(error, where):
        return [f"{where}: IPv6 is not supported"] if schema.is_ipv6(error.instance) else None

    assert schema.problems(SCHEMA, {"vnis": [], "local_ip": "2001:db8::1"}, special=ipv6) == [
        "local_ip: IPv6 is not supported"
    ]
    assert schema.problems(SCHEMA, {"vnis": [0]}, special=ipv6) == ["vnis[0]: 0 is below the minimum 1 (VNI)"]


def test_merged_diffs_prefix_each_part_and_keep_removals_in_before():
    counter = Changes("xdp_program counter")
    counter.add("p1: detach xdp_count tag 1 native", key="p1", before="p1: xdp_count tag 1 native")
    echo = Changes("echo tg-echo-p3")
    echo.add("p3: attach xdp_echo tag 2 native", key="p3", after="p3: xdp_echo tag 2 native")
    diff = merged("xdpfleet", {"counter": counter.diff(), "tg-echo-p3": echo.diff()})
    assert diff["before_header"] == diff["after_header"] == "xdpfleet"
    assert unified(diff) == ["-counter: p1: xdp_count tag 1 native", "+tg-echo-p3: p3: xdp_echo tag 2 native"]


OLD, NEW = "xdp_count tag 1 native", "xdp_count tag 2 native"


def converged(*steps: xp.Step, new_maps=()) -> xp.Converged:
    return xp.Converged(plan=xp.Plan(steps=list(steps), new_maps=list(new_maps)), program={}, maps={})


def test_each_plan_action_is_a_step_and_a_state_line_on_its_side():
    done = converged(
        xp.Step("p1", "unchanged", before=NEW, after=NEW),
        xp.Step("p2", "attach", after=NEW),
        xp.Step("p3", "replace", before=OLD, after=NEW),
        xp.Step("p4", "detach", before=OLD),
        new_maps=["xdp_counters"],
    ).changes("xdp_program counter")
    assert isinstance(done, Changes) and done.steps == [
        f"p2: attach {NEW}",
        f"p3: replace {NEW}",
        f"p4: detach {OLD}",
        "replace map xdp_counters (the pinned one no longer fits)",
    ]
    assert unified(done.diff()) == [
        f"-p3: {OLD}",
        f"-p4: {OLD}",
        "-map xdp_counters (pinned)",
        f"+p2: {NEW}",
        f"+p3: {NEW}",
        "+map xdp_counters (new: the pinned one no longer fits)",
    ]


def test_a_plan_with_nothing_to_do_is_no_change():
    assert converged(xp.Step("p1", "unchanged", before=NEW, after=NEW)).changes("x").result() == {
        "changed": False,
        "changes": [],
    }
