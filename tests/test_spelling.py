from pyclassify.spelling import one_edit, suggestion


def test_one_edit_is_one_insertion_deletion_substitution_or_swap():
    assert one_edit("podSelector", "podSelectr")  # deletion
    assert one_edit("podSelectr", "podSelector")  # insertion
    assert one_edit("ingress", "ingresz")  # substitution
    assert one_edit("egress", "egerss")  # swap of neighbours
    assert not one_edit("ingress", "ingress")
    assert not one_edit("ingress", "egress")  # two edits
    assert not one_edit("egress", "segrse")  # a swap of characters apart


def test_suggestion_prefers_case_then_one_edit_then_difflib():
    known = ["podSelector", "namespaceSelector", "ipBlock"]
    assert suggestion("PodSelector", known) == "podSelector"
    assert suggestion("ipBlok", known) == "ipBlock"
    assert suggestion("namespaceSelectorr", known) == "namespaceSelector"
    assert suggestion("ports", known) is None
    assert suggestion(3, known) is None
