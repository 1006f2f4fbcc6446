"""How many draft tokens to verify each step (``--draft-tokens``): a fixed K, or a controller that picks K
from what it measures.

- costs.py: what a step costs on this machine (verify per window size, drafting, overhead), kept across
  sessions;
- acceptance.py: how many of the current drafter's tokens get accepted, by position and confidence;
- policy.py: FixedK, AdaptiveK (which chooses K from the two) and make_policy.
"""

from localspec.engine.speclen.acceptance import AcceptanceEstimator
from localspec.engine.speclen.costs import CostModel
from localspec.engine.speclen.policy import MAX_K, AdaptiveK, FixedK, make_policy

__all__ = ["MAX_K", "AcceptanceEstimator", "AdaptiveK", "CostModel", "FixedK", "make_policy"]
