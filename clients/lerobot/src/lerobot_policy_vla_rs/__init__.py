"""lerobot policy plugin: `--policy.type=vla_rs` runs lerobot's loops (lerobot-eval,
lerobot-record, ...) with a policy served by vla-server.

lerobot's scripts call `register_third_party_plugins()`, which imports every installed
distribution whose name starts with `lerobot_policy_`; importing this package registers the
config type `vla_rs` (`PreTrainedConfig.register_subclass`). lerobot's factories then find
`VlaRsPolicy` in modeling_vla_rs and `make_vla_rs_pre_post_processors` in processor_vla_rs by
their names.
"""

from .configuration_vla_rs import VlaRsConfig
from .modeling_vla_rs import VlaRsMismatchError, VlaRsPolicy
from .processor_vla_rs import make_vla_rs_pre_post_processors

__all__ = ["VlaRsConfig", "VlaRsPolicy", "VlaRsMismatchError", "make_vla_rs_pre_post_processors"]
__version__ = "0.1.0"
