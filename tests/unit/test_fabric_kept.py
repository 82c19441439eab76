"""The checked fabric kept on the controller (fabric/fleet.py): one file per document under the fabric's digest,
read back only by that digest."""

import pytest

from ansible_collections.xdpfleet.fabric.plugins.module_utils.fabric import fleet

DOCUMENTS = {
    "a": {"tunnel_ports": [{"port": "ul-a", "local_ip": "198.51.100.97"}], "vnis": [{"vni": 100}]},
    "rack 1/b": {"tunnel_ports": [{"port": "ul-a", "local_ip": "198.51.100.98"}], "vnis": [{"vni": 100}]},
}
REPORT = {"vteps": {"a": {"backend": "xdp"}, "rack 1/b": {"backend": "tc"}}, "vnis": [], "warnings": []}


def test_each_host_reads_its_own_document_by_the_digest(tmp_path):
    digest = fleet.keep(str(tmp_path), DOCUMENTS, REPORT)
    assert fleet.document(str(tmp_path), digest, "a") == DOCUMENTS["a"]
    assert fleet.document(str(tmp_path), digest, "rack 1/b") == DOCUMENTS["rack 1/b"]
    assert fleet.document(str(tmp_path), digest, "c") is None
    assert fleet.report(str(tmp_path), digest) == REPORT
    assert sorted(path.name for path in tmp_path.iterdir()) == [digest]


def test_the_digest_names_what_was_derived(tmp_path):
    digest = fleet.keep(str(tmp_path), DOCUMENTS, REPORT)
    assert fleet.keep(str(tmp_path), dict(reversed(DOCUMENTS.items())), REPORT) == digest
    moved = {**DOCUMENTS, "a": {**DOCUMENTS["a"], "vnis": [{"vni": 200}]}}
    other = fleet.keep(str(tmp_path), moved, REPORT)
    assert other != digest
    assert fleet.document(str(tmp_path), other, "a")["vnis"] == [{"vni": 200}]
    assert fleet.document(str(tmp_path), digest, "a")["vnis"] == [{"vni": 100}]


@pytest.mark.parametrize("digest", [None, "", "0" * 64, "..", "../elsewhere"])
def test_a_digest_this_run_did_not_check_is_refused(tmp_path, digest):
    fleet.keep(str(tmp_path), DOCUMENTS, REPORT)
    with pytest.raises(fleet.KeptFabricError, match="was not checked by this run"):
        fleet.document(str(tmp_path), digest, "a")
    with pytest.raises(fleet.KeptFabricError, match="was not checked by this run"):
        fleet.report(str(tmp_path), digest)


def test_a_document_filed_under_another_digest_is_refused(tmp_path):
    digest = fleet.keep(str(tmp_path), DOCUMENTS, REPORT)
    other = fleet.keep(str(tmp_path), {"a": {"vnis": []}}, REPORT)
    moved = tmp_path / other / fleet.DOCUMENTS / "a.json"
    moved.write_bytes((tmp_path / digest / fleet.DOCUMENTS / "a.json").read_bytes())
    with pytest.raises(fleet.KeptFabricError, match=f"derived under fabric '{digest}'"):
        fleet.document(str(tmp_path), other, "a")
