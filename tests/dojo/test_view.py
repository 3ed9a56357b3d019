"""The grading view: each kata's suite gets the other katas' reference parts it needs, never the
kata's own reference or a twin of it, and only the runner modules the plugin needs."""

from __future__ import annotations

import pytest

from dojo import catalog
from dojo.grading import view

SLUGS = [k.slug for k in catalog.load() if k.has_suite]


@pytest.mark.parametrize("slug", SLUGS)
def test_the_view_never_holds_the_kata_reference(slug):
    """no kata sees solutions/<slug>.py nor solutions/<slug>_*.py; it sees every other module its suite imports"""
    shown = set(view.reference_modules(catalog.get(slug)))
    assert not shown & view.hidden(catalog.get(slug)) and not any(m.startswith(f"{slug}_") for m in shown)
    assert view.solution_imports(catalog.get(slug).suite) - view.hidden(catalog.get(slug)) <= shown


def test_what_each_kata_is_given():
    """attention: nothing of solutions; generate: the model and the cache; latency: also the roofline it is told to use"""
    assert view.hidden(catalog.get("attention")) == {"attention", "system.kernels.attention_fast"}
    assert view.reference_modules(catalog.get("attention")) == []
    assert {"model", "kv_cache"} <= set(view.reference_modules(catalog.get("generate")))
    assert "roofline" in view.reference_modules(catalog.get("latency")) and "roofline" in view.allowed(
        catalog.get("latency")
    )
    assert "roofline" not in view.allowed(catalog.get("mixed_precision"))


def test_only_the_plugin_and_its_helpers_of_the_runner():
    """the plugin, the channel, target loading and the suites' helpers: not grade, check_katas or the CLI"""
    runner = set(view.runner_modules(catalog.get("bpe")))  # its suite uses dojo.testing
    assert {"grading.suite.plugin", "grading.channel", "targets", "testing"} <= runner
    assert not runner & {
        "grading.grade",
        "grading.proof.check_katas",
        "cli",
        "grading.proof.mutant",
        "grading.confine.sandbox",
        "grading.scan.integrity",
    }
