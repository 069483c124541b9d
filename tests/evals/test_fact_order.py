"""Where the harness places the retrieved facts: the product's order, or the reversed control."""

from __future__ import annotations

from evals.locomo import EvalSettings, FactOrder, ordered


def test_the_product_order_puts_the_most_relevant_fact_last() -> None:
    best_first = [7, 3, 9, 1]
    assert ordered(best_first, FactOrder.PRODUCT) == [1, 9, 3, 7]


def test_the_reversed_control_puts_the_most_relevant_fact_first() -> None:
    best_first = [7, 3, 9, 1]
    assert ordered(best_first, FactOrder.REVERSED) == best_first
    assert ordered(best_first, FactOrder.REVERSED) is not best_first  # the caller's list kept


def test_a_run_places_facts_as_the_product_does_unless_told() -> None:
    assert EvalSettings(files=()).fact_order is FactOrder.PRODUCT
