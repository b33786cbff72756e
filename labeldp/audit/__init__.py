"""Privacy audits anyone holding ground truth can run: an empirical label-inference attack on a
release (``attack``) and a black-box lower bound on the ε a live labels party implements
(``canaries``). The exact math is in ``labeldp.mechanisms.advantage``."""
