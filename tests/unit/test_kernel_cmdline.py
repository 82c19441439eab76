"""Unit tests of module_utils/kernel_cmdline (no root, no bootloader): parsing at the shell and kernel layers, GRUB
file edits on fixture files, idempotence, check mode, restore round trips, grubby commands built from a fixture,
reboot_required, and bad input. Fixture origins: tests/unit/fixtures/kernel_cmdline/README.md."""

import difflib
import json
import shutil
from pathlib import Path

import pytest

from ansible_collections.xdpfleet.fabric.plugins.module_utils.tuning import kernel_cmdline as kc
from ansible_collections.xdpfleet.fabric.plugins.module_utils.tuning import kernel_cmdline_args as ka
from ansible_collections.xdpfleet.fabric.plugins.module_utils.tuning import kernel_cmdline_bootloaders as kb
from ansible_collections.xdpfleet.fabric.plugins.module_utils.tuning import kernel_cmdline_shell as ksh

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "kernel_cmdline"
NO_IOMMU_CMDLINE = "BOOT_IMAGE=/boot/vmlinuz-6.1.0-27-amd64 root=UUID=0b1f ro quiet\n"


def no_commands(argv):
    raise AssertionError(f"no command expected, got {argv}")


class Host:
    """A GRUB file and a state dir in a temporary directory, and the module's work run against them."""

    def __init__(self, tmp_path, fixture="debian12_grub", proc_cmdline=NO_IOMMU_CMDLINE):
        self.grub = tmp_path / "default" / "grub"
        self.grub.parent.mkdir()
        shutil.copyfile(FIXTURES / fixture, self.grub)
        self.original = self.grub.read_bytes()
        self.state_dir = tmp_path / "state"
        self.cmdline = tmp_path / "cmdline"
        self.cmdline.write_text(proc_cmdline)

    def run(self, check_mode=False, run_command=no_commands, **params):
        full = {
            "state": "present",
            "present": [],
            "absent": [],
            "bootloader": "grub",
            "grub_file": str(self.grub),
            "grub_variable": "GRUB_CMDLINE_LINUX_DEFAULT",
            "update_command": [],
            "state_dir": str(self.state_dir),
            **params,
        }
        return kc.run(full, check_mode, run_command, str(self.cmdline))

    def text(self):
        return self.grub.read_text()

    def changed_lines(self):
        before, after = self.original.decode().splitlines(), self.text().splitlines()
        diff = difflib.unified_diff(before, after, lineterm="", n=0)
        return [d for d in diff if d.startswith(("+", "-")) and not d.startswith(("+++", "---"))]

    def record(self):
        path = self.state_dir / kc.STATE_FILE
        return json.loads(path.read_text()) if path.exists() else None


# ------------------------------------------------------------------------------------------ parsing


@pytest.mark.parametrize(
    "text",
    [
        "",
        "   ",
        "quiet",
        "  quiet  splash ",
        'foo="a b"  bar',
        "ro -- single",
        "-- init only",
        (FIXTURES / "lab_proc_cmdline").read_text(),
    ],
)
def test_cmdline_renders_back_exactly(text):
    assert ka.Cmdline.parse(text).render() == text


def test_kernel_splitting_quotes_repeats_and_values_with_equals():
    cmdline = ka.Cmdline.parse('console=tty0 foo="a b" console=ttyS0,115200 root=UUID=ab=cd "bar=x y" nosmt')
    assert cmdline.args == [
        "console=tty0",
        'foo="a b"',
        "console=ttyS0,115200",
        "root=UUID=ab=cd",
        '"bar=x y"',
        "nosmt",
    ]
    assert [ka.key_of(a) for a in cmdline.args] == ["console", "foo", "console", "root", "bar", "nosmt"]
    assert ka.plain('foo="a b"') == ka.plain('"foo=a b"') == "foo=a b"
    assert ka.matches("root", "root=UUID=ab=cd") and ka.matches("root=UUID=ab=cd", "root=UUID=ab=cd")
    assert not ka.matches("console=tty0", "console=ttyS0,115200")


def test_arguments_after_the_double_dash_belong_to_init():
    lab = ka.Cmdline.parse((FIXTURES / "lab_proc_cmdline").read_text())
    assert lab.args[0].startswith("mitigations=") and lab.args[-1] == "rdinit=/process_api"
    assert "--firecracker-init" not in lab.args
    edited, added, removed = ka.apply_request(ka.Cmdline.parse("ro quiet -- quiet single"), ["iommu=pt"], ["quiet"])
    assert edited.render() == "ro iommu=pt -- quiet single"
    assert (added, removed) == (["iommu=pt"], ["quiet"])
    assert ka.apply_request(ka.Cmdline.parse("-- single"), ["nosmt"], [])[0].render() == "nosmt -- single"


@pytest.mark.parametrize(
    ("word", "value", "style"),
    [
        ('"quiet console=ttyS0,115200 foo=\\"a b\\""', 'quiet console=ttyS0,115200 foo="a b"', '"'),
        ("'quiet foo=\"a b\"'", 'quiet foo="a b"', "'"),
        ("quiet", "quiet", ""),
        ("", "", ""),
        ('"a \\\\ \\$ \\x"', "a \\ $ \\x", '"'),
        ("quiet\\ splash", "quiet splash", ""),
        ("'a'\" b\"", "a b", '"'),
        ('"line \\\none"', "line one", '"'),
    ],
)
def test_shell_word_unquoting(word, value, style):
    end, got, got_style = ksh._scan_word(word + "  # comment", 0)
    assert (got, got_style, end) == (value, style, len(word))


@pytest.mark.parametrize("word", ['"$GRUB_CMDLINE_LINUX_DEFAULT iommu=pt"', "$(cat x)", '"`id`"', '"open', "'open"])
def test_shell_words_this_module_does_not_evaluate(word):
    with pytest.raises(ValueError, match=r"expansion|unterminated"):
        ksh._scan_word(word, 0)


@pytest.mark.parametrize("style", ['"', "'", ""])
def test_shell_quote_round_trips(style):
    for value in ["quiet", 'quiet foo="a b" x=$y', "it's", ""]:
        quoted = ksh.shell_quote(value, style)
        assert ksh.shell_unquote(quoted) == value


def test_the_last_uncommented_assignment_is_the_one():
    text = (FIXTURES / "tuned_grub").read_text()
    found = ksh.find_assignment(text, "GRUB_CMDLINE_LINUX_DEFAULT")
    assert found.value.startswith("quiet  console=tty0")
    assert text[found.end :].startswith("  # tuned 2025-03")
    assert ksh.find_assignment("X=1\nexport X='2'\n", "X").value == "2"
    assert ksh.find_assignment("GRUB_CMDLINE_LINUX_DEFAULT_EXTRA=1\n", "GRUB_CMDLINE_LINUX_DEFAULT") is None


# ------------------------------------------------------------------------------------------ planned edits


def test_once_only_keys_are_replaced_in_place_others_appended():
    cmdline = ka.Cmdline.parse("iommu=nopt console=tty0 quiet iommu=soft")
    edited, added, removed = ka.apply_request(cmdline, ["iommu=pt", "console=ttyS0"], [])
    assert edited.render() == "iommu=pt console=tty0 quiet console=ttyS0"
    assert added == ["iommu=pt", "console=ttyS0"]
    assert removed == ["iommu=nopt", "iommu=soft"]
    # Already there: a stray second value of a once-only key still goes.
    edited, added, removed = ka.apply_request(ka.Cmdline.parse("iommu=pt x iommu=nopt"), ["iommu=pt"], [])
    assert (edited.render(), added, removed) == ("iommu=pt x", [], ["iommu=nopt"])


def test_hugepage_pairs_repeat():
    cmdline = ka.Cmdline.parse("hugepagesz=1G hugepages=4")
    edited, added, _ = ka.apply_request(cmdline, ["hugepagesz=2M", "hugepages=512"], [])
    assert edited.args == ["hugepagesz=1G", "hugepages=4", "hugepagesz=2M", "hugepages=512"]
    assert added == ["hugepagesz=2M", "hugepages=512"]


def test_absent_by_key_or_exact_argument():
    cmdline = ka.Cmdline.parse('console=tty0 quiet console=ttyS0 "console=x y" splash')
    assert ka.apply_request(cmdline, [], ["console"])[0].render() == "quiet splash"
    assert ka.apply_request(cmdline, [], ["console=ttyS0"])[0].args == [
        "console=tty0",
        "quiet",
        '"console=x y"',
        "splash",
    ]
    assert ka.apply_request(cmdline, [], ["console=x y"])[2] == ['"console=x y"']


def test_debian_file_only_the_variable_line_changes(tmp_path):
    host = Host(tmp_path)
    result = host.run(present=["iommu=pt", "intel_iommu=on"])
    assert result["changed"] and result["added"] == ["iommu=pt", "intel_iommu=on"]
    assert host.changed_lines() == [
        '-GRUB_CMDLINE_LINUX_DEFAULT="quiet"',
        '+GRUB_CMDLINE_LINUX_DEFAULT="quiet iommu=pt intel_iommu=on"',
    ]
    assert result["diff"]["before"] == 'GRUB_CMDLINE_LINUX_DEFAULT="quiet"\n'
    assert result["diff"]["after"] == 'GRUB_CMDLINE_LINUX_DEFAULT="quiet iommu=pt intel_iommu=on"\n'
    assert result["cmdline_configured"] == ["quiet", "iommu=pt", "intel_iommu=on"]
    assert result["commands"] == []


def test_el_file_grub_cmdline_linux(tmp_path):
    host = Host(tmp_path, "el9_grub")
    result = host.run(grub_variable="GRUB_CMDLINE_LINUX", present=["iommu=pt"], absent=["rhgb"])
    assert result["changed"] and result["removed"] == ["rhgb"]
    assert host.changed_lines() == [
        '-GRUB_CMDLINE_LINUX="crashkernel=1G-4G:192M,4G-64G:256M,64G-:512M resume=/dev/mapper/rhel-swap '
        'rd.lvm.lv=rhel/root rd.lvm.lv=rhel/swap rhgb quiet"',
        '+GRUB_CMDLINE_LINUX="crashkernel=1G-4G:192M,4G-64G:256M,64G-:512M resume=/dev/mapper/rhel-swap '
        'rd.lvm.lv=rhel/root rd.lvm.lv=rhel/swap quiet iommu=pt"',
    ]


def test_tuned_file_keeps_quoting_spacing_comment_and_init_arguments(tmp_path):
    host = Host(tmp_path, "tuned_grub")
    result = host.run(present=["iommu=pt", "console=ttyS1"], absent=["quiet"])
    assert result["added"] == ["iommu=pt", "console=ttyS1"]
    assert result["removed"] == ["quiet", "iommu=nopt"]
    assert host.changed_lines()[1] == (
        '+GRUB_CMDLINE_LINUX_DEFAULT="console=tty0 console=ttyS0,115200n8 iommu=pt dyndbg=\\"file drivers/net/* +p\\" '
        'root=UUID=7a6f0b1e-4c2d-4f7a-9e21-3b5d8c0a1f64 console=ttyS1 -- single"  # tuned 2025-03'
    )
    assert len(host.changed_lines()) == 2
    # The single-quoted variable stays single-quoted.
    host.run(grub_variable="GRUB_CMDLINE_LINUX", present=["nosmt"], state_dir=str(tmp_path / "other"))
    assert "GRUB_CMDLINE_LINUX='net.ifnames=0 biosdevname=0 nosmt'\n" in host.text()


def test_unquoted_value_gets_quotes_only_when_it_needs_them(tmp_path):
    host = Host(tmp_path)
    host.grub.write_text("GRUB_CMDLINE_LINUX_DEFAULT=quiet\n")
    host.run(present=["nosmt"])
    assert host.text() == 'GRUB_CMDLINE_LINUX_DEFAULT="quiet nosmt"\n'
    host.grub.write_text("GRUB_CMDLINE_LINUX_DEFAULT=\n")
    host.run(present=["nosmt"], state_dir=str(tmp_path / "other"))
    assert host.text() == "GRUB_CMDLINE_LINUX_DEFAULT=nosmt\n"


def test_idempotent_and_check_mode_writes_nothing(tmp_path):
    host = Host(tmp_path)
    checked = host.run(check_mode=True, present=["iommu=pt"])
    assert checked["changed"] and checked["added"] == ["iommu=pt"]
    assert "iommu=pt" in checked["diff"]["after"] and "iommu=pt" in checked["cmdline_configured"]
    assert host.grub.read_bytes() == host.original and host.record() is None
    assert host.run(present=["iommu=pt"])["changed"] is True
    again = host.run(present=["iommu=pt"])
    assert again["changed"] is False and again["added"] == again["removed"] == []
    assert "diff" not in again
    assert host.run(check_mode=True, present=["iommu=pt"])["changed"] is False


def test_update_command_runs_after_the_write(tmp_path):
    host = Host(tmp_path)
    seen = []

    def run_command(argv):
        seen.append((argv, host.text()))
        return 0, "", ""

    result = host.run(present=["iommu=pt"], update_command=["true", "--regenerate"], run_command=run_command)
    assert result["commands"] == [["true", "--regenerate"]]
    assert seen[0][0] == [shutil.which("true"), "--regenerate"]
    assert "iommu=pt" in seen[0][1]


def test_restore_without_update_command_runs_the_one_the_change_was_made_with(tmp_path):
    """A teardown needs no inventory (playbooks/teardown.yml): the role omits update_command, and restore must run
    the command the change was applied with, not today's default. With [] (the lab, a host whose bootloader reads the
    file another way) none; with a command, that one. This machine has neither update-grub nor grub2-mkconfig, which
    the default would want."""
    assert kb.which("update-grub") is None and kb.which("grub2-mkconfig") is None
    host = Host(tmp_path)
    host.run(present=["iommu=pt"], update_command=[])
    restored = host.run(state="restore", update_command=None)
    assert restored["changed"] and restored["commands"] == [] and host.grub.read_bytes() == host.original

    seen = []

    def run_command(argv):
        seen.append(argv)
        return 0, "", ""

    host.run(present=["iommu=pt"], update_command=["true", "--regenerate"], run_command=run_command)
    restored = host.run(state="restore", update_command=None, run_command=run_command)
    assert restored["commands"] == [["true", "--regenerate"]]
    assert seen == [[shutil.which("true"), "--regenerate"]] * 2 and host.grub.read_bytes() == host.original


def test_failing_update_command_puts_the_file_back(tmp_path):
    host = Host(tmp_path)
    with pytest.raises(kc.KernelCmdlineError, match=r"^update_command: true exited 1: no space.*put back"):
        host.run(present=["iommu=pt"], update_command=["true"], run_command=lambda argv: (1, "", "no space\n"))
    assert host.grub.read_bytes() == host.original
    assert host.record() is None


def test_mode_and_owner_are_kept(tmp_path):
    host = Host(tmp_path)
    host.grub.chmod(0o600)
    host.run(present=["iommu=pt"])
    assert host.grub.stat().st_mode & 0o777 == 0o600
    assert [p.name for p in host.grub.parent.iterdir()] == ["grub"]  # no temporary file left


def test_missing_variable_is_appended_and_restore_removes_it(tmp_path):
    host = Host(tmp_path)
    host.grub.write_text("GRUB_TIMEOUT=5\n")
    host.original = host.grub.read_bytes()
    host.run(present=["iommu=pt"])
    assert host.text() == 'GRUB_TIMEOUT=5\nGRUB_CMDLINE_LINUX_DEFAULT="iommu=pt"\n'
    assert host.record()["original"] is None
    assert host.run(state="restore")["changed"] is True
    assert host.grub.read_bytes() == host.original


def test_grub_d_override_and_other_variable_warn(tmp_path):
    host = Host(tmp_path, "el9_grub")
    (host.grub.parent / "grub.d").mkdir()
    (host.grub.parent / "grub.d" / "50-cloudimg.cfg").write_text('GRUB_CMDLINE_LINUX_DEFAULT="console=ttyS0"\n')
    result = host.run(present=["iommu=pt"], absent=["rhgb"])
    assert any("50-cloudimg.cfg also sets GRUB_CMDLINE_LINUX_DEFAULT" in w for w in result["warnings"])
    assert any(w.startswith("absent: rhgb still in another variable") for w in result["warnings"])


# ------------------------------------------------------------------------------------------ restore


@pytest.mark.parametrize(
    ("fixture", "variable", "present", "absent"),
    [
        ("debian12_grub", "GRUB_CMDLINE_LINUX_DEFAULT", ["iommu=pt"], []),
        ("debian12_grub", "GRUB_CMDLINE_LINUX", ["iommu=pt", "nosmt"], []),
        ("el9_grub", "GRUB_CMDLINE_LINUX", ["iommu=pt", "mitigations=off"], ["rhgb", "resume"]),
        ("tuned_grub", "GRUB_CMDLINE_LINUX_DEFAULT", ["iommu=pt", "isolcpus=2-7"], ["console"]),
    ],
)
def test_present_then_restore_is_byte_identical(tmp_path, fixture, variable, present, absent):
    host = Host(tmp_path, fixture)
    assert host.run(grub_variable=variable, present=present, absent=absent)["changed"]
    assert host.grub.read_bytes() != host.original
    record = host.record()
    assert record["grub_variable"] == variable and record["added"]
    checked = host.run(state="restore", check_mode=True)
    assert checked["changed"] and host.record() == record
    restored = host.run(state="restore")
    assert restored["changed"] is True
    assert sorted(restored["removed"]) == sorted(record["added"])
    assert host.grub.read_bytes() == host.original
    assert host.record() is None
    again = host.run(state="restore")
    assert again["changed"] is False and again["bootloader"] is None


def test_restore_keeps_later_user_edits_and_puts_removed_back_in_place(tmp_path):
    host = Host(tmp_path, "tuned_grub")
    host.run(present=["iommu=pt"], absent=["console=ttyS0,115200n8"])
    # The user's own edit after ours: another argument, by hand.
    host.grub.write_text(host.text().replace("iommu=pt", "iommu=pt nosmt"))
    host.run(state="restore")
    value = ksh.find_assignment(host.text(), "GRUB_CMDLINE_LINUX_DEFAULT").value
    assert ka.Cmdline.parse(value).args == [
        "quiet",
        "console=tty0",
        "console=ttyS0,115200n8",
        "iommu=nopt",
        "nosmt",
        'dyndbg="file drivers/net/* +p"',
        "root=UUID=7a6f0b1e-4c2d-4f7a-9e21-3b5d8c0a1f64",
    ]
    assert value.endswith("-- single")


def test_the_record_keeps_the_net_change_across_runs(tmp_path):
    host = Host(tmp_path)
    host.run(present=["iommu=pt"])
    host.run(present=["nosmt"])
    assert host.record()["added"] == ["iommu=pt", "nosmt"]
    assert host.record()["original"] == '"quiet"'
    host.run(absent=["iommu", "nosmt"])
    assert host.record() is None  # back to the original: nothing left to restore
    assert host.grub.read_bytes() == host.original


def test_updated_record_cancels_out():
    fresh = {"bootloader": "grub", "original": '"quiet"'}
    record = kc.updated_record(None, fresh, ["iommu=pt"], ["quiet"])
    assert record == {**fresh, "added": ["iommu=pt"], "removed": ["quiet"]}
    assert kc.updated_record(record, fresh, ["quiet"], [])["removed"] == []
    assert kc.updated_record(record, fresh, ["quiet"], ["iommu=pt"]) is None
    assert fresh == {"bootloader": "grub", "original": '"quiet"'}


def test_a_record_for_another_target_must_be_restored_first(tmp_path):
    host = Host(tmp_path)
    host.run(present=["iommu=pt"])
    with pytest.raises(kc.KernelCmdlineError, match=r"^state_dir: .*restore them first"):
        host.run(grub_variable="GRUB_CMDLINE_LINUX", present=["nosmt"])


def test_a_corrupt_record_stops_the_module_naming_the_file_and_changes_nothing(tmp_path):
    host = Host(tmp_path)
    host.state_dir.mkdir()
    (host.state_dir / kc.STATE_FILE).write_text('{"bootloader": "gr')
    for state in ("present", "restore"):
        with pytest.raises(kc.KernelCmdlineError, match=rf"^state_dir: the record {host.state_dir}/\S+ is corrupt"):
            host.run(state=state, present=["iommu=pt"])
    assert host.grub.read_bytes() == host.original


# ------------------------------------------------------------------------------------------ grubby


class FakeGrubby:
    """Answers --info=ALL from the fixture (or the text given), and after an update from `info_after_update`;
    records every other command."""

    def __init__(self, info=None, fail_update=False, info_after_update=None):
        self.info = info or (FIXTURES / "grubby_info_all.txt").read_text()
        self.info_after_update = info_after_update or self.info
        self.fail_update = fail_update
        self.updates = []

    def __call__(self, argv):
        if argv[1:] == ["--info=ALL"]:
            return 0, self.info, ""
        self.updates.append(argv)
        if self.fail_update:
            return 1, "", "grubby: failed"
        self.info = self.info_after_update
        return 0, "", ""


NEW_KERNEL = "/boot/vmlinuz-5.14.0-427.13.1.el9_4.x86_64"
OLD_KERNEL = "/boot/vmlinuz-5.14.0-362.8.1.el9_3.x86_64"


def test_grubby_info_fixture_parses():
    kernels = kb.parse_grubby_info((FIXTURES / "grubby_info_all.txt").read_text())
    assert list(kernels) == [NEW_KERNEL, OLD_KERNEL]
    assert kernels[NEW_KERNEL].startswith("ro crashkernel=") and kernels[NEW_KERNEL].endswith("quiet iommu=nopt")
    # Older grubby-bls prints kernel= without quotes.
    assert kb.parse_grubby_info('index=0\nkernel=/boot/vmlinuz-1\nargs="ro"\n') == {"/boot/vmlinuz-1": "ro"}


def test_grubby_command_from_the_fixture():
    grubby = kb.Grubby("/usr/sbin/grubby", FakeGrubby())
    plan = grubby.plan_present(["iommu=pt", "intel_iommu=on"], ["rhgb"])
    assert plan.commands == [
        [
            "/usr/sbin/grubby",
            "--update-kernel=ALL",
            "--args=iommu=pt intel_iommu=on",
            "--remove-args=rhgb iommu=nopt",
        ]
    ]
    assert plan.after[OLD_KERNEL].endswith("quiet iommu=pt intel_iommu=on")
    assert "rhgb" not in plan.after[NEW_KERNEL]
    # One kernel lacking it is enough for a change; none lacking it is none.
    assert kb.Grubby("grubby", FakeGrubby()).plan_present(["quiet"], []).commands == []


def grubby_params(tmp_path, **params):
    return {
        "state": "present",
        "present": [],
        "absent": [],
        "bootloader": "grubby",
        "grub_file": "/etc/default/grub",
        "grub_variable": "GRUB_CMDLINE_LINUX_DEFAULT",
        "update_command": None,
        "state_dir": str(tmp_path / "state"),
        **params,
    }


@pytest.fixture
def grubby_host(tmp_path, monkeypatch):
    grubby_path = tmp_path / "grubby"
    grubby_path.write_text("")
    monkeypatch.setattr(kc, "GRUBBY_PATHS", (str(grubby_path),))
    cmdline = tmp_path / "cmdline"
    cmdline.write_text(NO_IOMMU_CMDLINE)
    return tmp_path, str(grubby_path), str(cmdline)


def test_grubby_check_mode_runs_only_the_read(grubby_host):
    tmp_path, grubby_path, cmdline = grubby_host
    fake = FakeGrubby()
    result = kc.run(grubby_params(tmp_path, present=["iommu=pt"]), True, fake, cmdline)
    assert result["changed"] and fake.updates == []
    assert result["commands"] == [[grubby_path, "--update-kernel=ALL", "--args=iommu=pt", "--remove-args=iommu=nopt"]]
    assert f"{NEW_KERNEL}: ro " in result["diff"]["before"] and "iommu=nopt" in result["diff"]["before"]
    assert "iommu=nopt" not in result["diff"]["after"]
    assert result["reboot_required"] is True
    assert not (tmp_path / "state").exists()


def test_grubby_record_and_restore_per_kernel(grubby_host):
    tmp_path, grubby_path, cmdline = grubby_host
    original = (FIXTURES / "grubby_info_all.txt").read_text()
    # What grubby writes for this change, as --info=ALL shows it afterwards.
    updated = original.replace(" rhgb", "").replace("iommu=nopt", "iommu=pt")
    updated = updated.replace('rhel/swap quiet"', 'rhel/swap quiet iommu=pt"')
    fake = FakeGrubby(original, info_after_update=updated)
    result = kc.run(grubby_params(tmp_path, present=["iommu=pt"], absent=["rhgb"]), False, fake, cmdline)
    assert fake.updates == [[grubby_path, "--update-kernel=ALL", "--args=iommu=pt", "--remove-args=rhgb iommu=nopt"]]
    record = json.loads((tmp_path / "state" / kc.STATE_FILE).read_text())
    assert record["bootloader"] == "grubby"
    assert record["original"][NEW_KERNEL].endswith("quiet iommu=nopt")
    assert (record["added"], record["removed"]) == (["iommu=pt"], ["rhgb", "iommu=nopt"])
    assert result["cmdline_configured"][NEW_KERNEL][-2:] == ["quiet", "iommu=pt"]  # read back from grubby
    assert result["cmdline_configured"][OLD_KERNEL][-2:] == ["quiet", "iommu=pt"]
    fake.updates.clear()
    fake.info_after_update = original
    restored = kc.run(grubby_params(tmp_path, state="restore"), False, fake, cmdline)
    assert restored["changed"] is True
    assert fake.updates == [
        [grubby_path, f"--update-kernel={NEW_KERNEL}", "--args=rhgb iommu=nopt", "--remove-args=iommu=pt"],
        [grubby_path, f"--update-kernel={OLD_KERNEL}", "--args=rhgb", "--remove-args=iommu=pt"],
    ]
    assert not (tmp_path / "state" / kc.STATE_FILE).exists()


def test_grubby_failure_names_the_command_and_keeps_no_record(grubby_host):
    tmp_path, _, cmdline = grubby_host
    with pytest.raises(kc.KernelCmdlineError, match=r"^bootloader: .*--update-kernel=ALL.* exited 1: grubby: failed"):
        kc.run(grubby_params(tmp_path, present=["iommu=pt"]), False, FakeGrubby(fail_update=True), cmdline)
    assert not (tmp_path / "state" / kc.STATE_FILE).exists()


def test_grubby_kernelopts_is_refused_other_variables_are_kept():
    info = 'index=0\nkernel="/boot/vmlinuz-4.18"\nargs="$kernelopts"\n'
    with pytest.raises(kc.KernelCmdlineError, match=r"^bootloader: .*\$kernelopts .*does not evaluate"):
        kb.Grubby("grubby", FakeGrubby(info))
    info = 'index=0\nkernel="/boot/vmlinuz-5.14"\nargs="ro quiet $tuned_params"\n'
    plan = kb.Grubby("grubby", FakeGrubby(info)).plan_present(["iommu=pt"], ["quiet"])
    assert plan.after == {"/boot/vmlinuz-5.14": "ro $tuned_params iommu=pt"}


# ------------------------------------------------------------------------------------------ reboot_required


@pytest.mark.parametrize(
    ("running", "configured", "selectors", "required"),
    [
        ("ro quiet", "quiet iommu=pt", ["iommu"], True),  # a present argument the running kernel lacks
        ("ro quiet iommu=pt", "quiet iommu=pt", ["iommu"], False),
        ("ro quiet iommu=nopt", "quiet iommu=pt", ["iommu"], True),  # another value of a once-only key
        ("ro quiet", "", ["quiet"], True),  # an absent argument still running
        ("ro", "", ["quiet"], False),
        ("console=tty0 console=ttyS0", "console=ttyS0 console=tty0", ["console=ttyS0"], False),
        ('ro foo="a b"', '"foo=a b"', ["foo=a b"], False),  # the same argument, quoted differently
        ("ro nosmt -- iommu=pt", "iommu=pt", ["iommu"], True),  # init's arguments do not count
        ("ro quiet", "unrelated", ["iommu=pt"], False),
    ],
)
def test_reboot_required(running, configured, selectors, required):
    running_args = ka.Cmdline.parse(running).args
    assert ka.reboot_required(running_args, [ka.Cmdline.parse(configured).args], selectors) is required


def test_reboot_required_whether_or_not_this_run_changed(tmp_path):
    host = Host(tmp_path)
    assert host.run(present=["iommu=pt"])["reboot_required"] is True
    assert host.run(present=["iommu=pt"])["reboot_required"] is True  # unchanged, still not running
    assert host.run(present=["quiet"])["reboot_required"] is False  # quiet runs already
    host.cmdline.write_text("BOOT_IMAGE=/vmlinuz ro quiet iommu=pt\n")
    assert host.run(present=["iommu=pt"])["reboot_required"] is False
    restored = host.run(state="restore")
    assert restored["reboot_required"] is True  # iommu=pt is still running, no longer configured


# ------------------------------------------------------------------------------------------ bad input


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"present": [""]}, r"^present\[0\]: an argument must not be empty"),
        ({"present": ["iommu=pt", "intel_iommu on"]}, r"^present\[1\]: 'intel_iommu on' must not contain whitespace"),
        ({"absent": ['foo="ab"']}, r"^absent\[0\]: .* must not contain quotes"),
        ({"present": ["foo='x'"]}, r"^present\[0\]: .* must not contain quotes"),
        ({"present": ["=pt"]}, r"^present\[0\]: '=pt' must start with a key"),
        ({"present": ["--"]}, r"^present\[0\]: '--' starts the init arguments"),
        ({"present": ["x=$HOME"]}, r"^present\[0\]: .*'\$'"),
        # GRUB script's metacharacters and comment sign: grub-mkconfig copies arguments into grub.cfg unquoted.
        ({"present": ["x=1;reboot"]}, r"^present\[0\]: 'x=1;reboot' must not contain .*; found ';'$"),
        ({"present": ["iommu=pt", "x=a#b"]}, r"^present\[1\]: .* found '#'$"),
        ({"present": ["x={a}"]}, r"^present\[0\]: .* found '\{', '\}'$"),
        ({"absent": ["x=a|b&c"]}, r"^absent\[0\]: .* found '\|', '&'$"),
        ({"present": ["x=<a>"]}, r"^present\[0\]: .* found '<', '>'$"),
        ({"present": ["x=a\\b"]}, r"^present\[0\]: .* found '\\\\'$"),
        ({"present": ["x=a\x1bb"]}, r"^present\[0\]: .* must be printable ASCII"),
        ({"present": ["x=\u00e9"]}, r"^present\[0\]: .* must be printable ASCII"),
        ({"present": ["x=a\nb"]}, r"^present\[0\]: .* must not contain whitespace"),
        ({"present": ["iommu=pt"], "absent": ["iommu"]}, r"^absent\[0\]: key 'iommu' is also in present\[0\]"),
        ({"present": ["iommu=pt"], "absent": ["iommu=nopt"]}, r"^absent\[0\]: key 'iommu' is also in present"),
        ({"present": ["iommu=pt", "iommu=nopt"]}, r"^present\[1\]: .* give iommu two values"),
        ({"bootloader": "lilo"}, r"^bootloader: 'lilo' is not one of auto, grub, grubby"),
        ({"state": "absent"}, r"^state: 'absent' is not one of present, restore"),
        ({"grub_variable": "GRUB CMDLINE"}, r"^grub_variable: 'GRUB CMDLINE' is not a shell variable name"),
        ({"grub_variable": "GRUB_CMDLINE_LINUX\n"}, r"^grub_variable: 'GRUB_CMDLINE_LINUX\\n' is not a shell"),
        ({"update_command": ["update-grub", ""]}, r"^update_command\[1\]: must not be empty"),
        ({"grub_file": "/nonexistent/grub", "present": ["iommu=pt"]}, r"^grub_file: /nonexistent/grub does not exist"),
        (
            {"present": ["iommu=pt"], "update_command": ["no-such-update-grub"]},
            r"^update_command: no-such-update-grub not found on this host",
        ),
    ],
)
def test_bad_input_fails_before_anything_is_written(tmp_path, params, message):
    host = Host(tmp_path)
    with pytest.raises(kc.KernelCmdlineError, match=message):
        host.run(**params)
    assert host.grub.read_bytes() == host.original
    assert not host.state_dir.exists()


def test_a_variable_the_module_cannot_evaluate_names_the_file(tmp_path):
    host = Host(tmp_path)
    host.grub.write_text('GRUB_CMDLINE_LINUX_DEFAULT="$GRUB_CMDLINE_LINUX_DEFAULT quiet"\n')
    with pytest.raises(kc.KernelCmdlineError, match=r"^grub_file: .*/grub: GRUB_CMDLINE_LINUX_DEFAULT uses a shell"):
        host.run(present=["iommu=pt"])


def test_the_module_rejects_an_unknown_bootloader_naming_the_option(capsys):
    from ansible.module_utils.testing import patch_module_args

    from ansible_collections.xdpfleet.fabric.plugins.modules import kernel_cmdline as module

    with patch_module_args({"bootloader": "lilo", "present": ["iommu=pt"]}), pytest.raises(SystemExit):
        module.main()
    result = json.loads(capsys.readouterr().out)
    assert result["failed"] and "bootloader" in result["msg"] and "lilo" in result["msg"]


def test_the_module_runs_in_check_mode(tmp_path, capsys):
    from ansible.module_utils.testing import patch_module_args

    from ansible_collections.xdpfleet.fabric.plugins.modules import kernel_cmdline as module

    host = Host(tmp_path)
    args = {
        "present": ["iommu=pt"],
        "bootloader": "grub",
        "grub_file": str(host.grub),
        "update_command": [],
        "state_dir": str(host.state_dir),
        "_ansible_check_mode": True,
        "_ansible_diff": True,
    }
    with patch_module_args(args), pytest.raises(SystemExit):
        module.main()
    result = json.loads(capsys.readouterr().out)
    assert result["changed"] is True and result["added"] == ["iommu=pt"]
    assert result["diff"]["after"] == 'GRUB_CMDLINE_LINUX_DEFAULT="quiet iommu=pt"\n'
    assert host.grub.read_bytes() == host.original
