"""The digests of joulehouse/digest.py: stable values, since stored fingerprints hold them."""

from joulehouse.digest import contents_digest, digest_pairs

#: Two named contents and their digest: the value every ClusterCockpit job's stored
#: fingerprint carries for its reader's sources (``blocks.reader_version``), so a change of
#: the algorithm would read every block again once.
FILES = [("b.py", b"print(1)\n"), ("a/x.json", b"{}")]
FILES_DIGEST = "29600160b5ae705cdf87"


def test_named_contents_digest_to_a_fixed_value_in_any_order():
    assert contents_digest(FILES) == contents_digest(FILES[::-1]) == FILES_DIGEST


def test_a_name_and_its_content_never_run_together():
    assert contents_digest([("a", b"bc")]) != contents_digest([("ab", b"c")])
    assert contents_digest([("a", b"")]) != contents_digest([("a", b""), ("", b"")])


def test_pairs_digest_in_any_order_and_tell_key_from_value():
    assert digest_pairs({"a": "1", "b": "2"}) == digest_pairs({"b": "2", "a": "1"})
    assert digest_pairs({"a": "1"}) != digest_pairs({"a1": ""})
