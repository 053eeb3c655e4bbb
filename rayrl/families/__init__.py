"""The two experience families, written once: off-policy (n-step transitions, replay,
samples-per-insert limit, optional persistence) and on-policy (fixed-length unrolls, a
bounded queue, a policy-lag limit). An algorithm names its family and derives its config
from the family's config class, which carries the family's settings and checks."""

from __future__ import annotations

from rayrl.families.off_policy import OFF_POLICY, OffPolicyConfig, ReplayConfig
from rayrl.families.on_policy import ON_POLICY, OnPolicyConfig

__all__ = ["OFF_POLICY", "ON_POLICY", "OffPolicyConfig", "OnPolicyConfig", "ReplayConfig"]
