"""``deepeval.tracing`` names: ``observe``, ``update_current_span``, ``update_current_trace``.

``from contextjudge.compat.deepeval.tracing import observe, update_current_span`` works like DeepEval's
component-level tracing for the context metrics; run it with
``contextjudge.compat.deepeval.evaluate(observed_callback=app, goldens=[Golden(...)])``.
"""

from ...tracing import observe, update_current_span, update_current_trace

__all__ = ["observe", "update_current_span", "update_current_trace"]
