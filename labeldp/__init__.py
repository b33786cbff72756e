"""labeldp: two-party, feature-oblivious label differential privacy.

Layers (enforced by the import contracts in pyproject.toml, run by the test suite):
``labeldp.mechanisms`` (pure math) ← ``labeldp.common`` and ``labeldp.v1`` (shared plumbing, the wire
contract) ← ``labels_party`` / ``features_party`` ← the app layer (``labeldp.cli``, ``labeldp.client``
and ``labeldp.client.types``, ``labeldp.terminal``, ``labeldp.demo``, ``labeldp.audit``,
``labeldp.samples``, ``labeldp.processes``); no import cycle at any level (docs/architecture.md).
"""

__version__ = "0.2.0"
